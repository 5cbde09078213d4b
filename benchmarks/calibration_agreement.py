"""Do the default calibration's block choices agree with the measured cut sweep on the default model?

    .venv/bin/python -m benchmarks.calibration_agreement [--task arc_easy] [--limit 200] [--block 6]

For the default calibration (WikiText-2 validation from the data folder, else the built-in
text; --samples/--seq_len/--source override it) it prints each method's analysis time, its
best block of --block layers, how often that block wins over bootstrap resamples of the
windows, and its Spearman ρ against the measured quality of every such cut; then angular's
opening cut (a tenth of the layers, as the app opens) and whether it still answers "What is
the capital of France?" with Paris. The sweep takes minutes on 2 cores and is cached. Writes
``benchmarks/results/calibration_agreement.json``.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks import harness
from benchmarks.record import write_result

PROMPT = "What is the capital of France?"


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--task", default="arc_easy", help="lm-eval task of the sweep")
    parser.add_argument("--limit", type=int, default=200, help="documents of the task")
    parser.add_argument("--block", type=int, default=6, help="block size of the sweep")
    parser.add_argument("--resamples", type=int, default=20, help="bootstrap resamples per method (0: none)")
    parser.add_argument("--budget_s", type=float, default=120.0,
                        help="fewer resamples (at least 3) for a method whose resamples would take longer than this")
    parser.add_argument("--source", help="calibration source instead of the default one (builtin, wikitext2)")
    parser.add_argument("--samples", type=int, help="calibration windows instead of the default number")
    parser.add_argument("--seq_len", type=int, help="tokens per window instead of the default")
    parser.add_argument("--methods", help="comma list of methods (default: all)")
    run(parser.parse_args())


def run(args) -> None:
    import prune
    from prune.core.paths import default_data_dir
    from evaluation.sweeps.cuts import format_sweep, rank_agreement
    from prune.core.calibration import default_calibration, token_windows
    from prune.depth.stability import block_stability
    from ui.handlers import default_block_size

    data_dir = default_data_dir()
    calibration = default_calibration(data_dir)
    changes = {"source": args.source, "n_samples": args.samples, "seq_len": args.seq_len}
    calibration = replace(calibration, **{k: v for k, v in changes.items() if v is not None})
    model, tokenizer = prune.load_model()
    count = model.config.num_hidden_layers
    windows = token_windows(tokenizer, calibration).shape
    print(f"calibration: {calibration.source}, {windows[0]} windows of {windows[1]} tokens")

    context = prune.Context(model, tokenizer, calibration)
    with harness.Clock() as clock:
        context.residual  # computed once, shared by every method below
    residual_s = clock.wall
    print(f"residual stream: {residual_s:.1f} s")

    names = args.methods.split(",") if args.methods else list(prune.METHODS)
    results, stabilities = {}, {}
    for name in names:
        results[name] = prune.score(None, None, name, context=context, use_cache=False)
        if args.resamples:  # ppl and taylor run the model on every resample: keep them within the budget
            resamples = min(args.resamples, max(3, int(args.budget_s / max(results[name].elapsed_s, 1e-3))))
            stabilities[name] = block_stability(context, name, args.block, resamples=resamples)

    sweep = cached_sweep(model, tokenizer, args.task, args.block, args.limit, data_dir)
    rho = rank_agreement(sweep, results)
    best = sweep.best_start()
    print("\n" + format_sweep(sweep))
    print(f"\n{sweep.task}, {sweep.limit} docs, {sweep.primary_metric}: measured best {args.block}-layer cut "
          f"[{best}, {best + args.block}), baseline {sweep.baseline[sweep.primary_metric]:.3f}")
    print(f"{'method':<20}{'time (s)':>9}  {'best ' + str(args.block):<10}{'measured':>9}{'ρ':>8}  stability")
    loss = dict(zip(sweep.starts, sweep.quality_loss()))
    found = {"calibration": f"{calibration.source}, {windows[0]} windows of {windows[1]} tokens",
             "residual_s": round(residual_s, 1), "task": sweep.task, "limit": sweep.limit, "block": args.block,
             "metric": sweep.primary_metric, "baseline": sweep.baseline[sweep.primary_metric],
             "measured_best": [best, best + args.block], "methods": {}}
    for name, result in results.items():
        start, end = result.best_block(args.block)
        stable = stabilities[name].summary() if name in stabilities else ""
        print(f"{name:<20}{result.elapsed_s:>9.1f}  [{start}, {end}){'':<{10 - len(f'[{start}, {end})')}}"
              f"{-loss[start]:>+9.3f}{rho[name]:>+8.3f}  {stable}")
        found["methods"][name] = {"time_s": round(result.elapsed_s, 2), "best_block": [start, end],
                                  "measured": -loss[start], "rho": rho[name], "stability": stable}

    if "angular" in results:
        size = default_block_size(count)  # the app opens on angular's best block of a tenth of the layers
        start, end = results["angular"].best_block(size)
        answer = greedy_answer(prune.cut(model, start, end), tokenizer, PROMPT)
        stable = block_stability(context, "angular", size, resamples=args.resamples).summary() if args.resamples else ""
        print(f"\nopening cut (angular, {size} layers): [{start}, {end})  {stable}")
        print(f"  {PROMPT!r} → {answer!r}  {'Paris: yes' if 'Paris' in answer else 'Paris: NO'}")
        found["opening_cut"] = {"layers": size, "block": [start, end], "stability": stable, "prompt": PROMPT,
                                "answer": answer, "paris": "Paris" in answer}
    write_result("calibration_agreement", found, model=f"{getattr(model, 'layercut_name', 'default model')}, "
                 f"{count} layers", how="each method's best block on the calibration against the measured sweep of "
                 f"every {args.block}-layer cut (Spearman ρ); stability: bootstrap resamples of the windows")


def cached_sweep(model, tokenizer, task: str, block: int, limit: int, data_dir):
    """The measured sweep, from the results cache when this model, task, block and limit ran before."""
    from evaluation.core.store import ResultStore
    from evaluation.sweeps.cuts import SweepResult, sweep
    from prune.depth.scoring import model_fingerprint

    store = ResultStore()
    key = {"kind": "calibration-sweep", "model": model_fingerprint(model), "task": task, "block_size": block,
           "limit": limit, "data_dir": str(data_dir)}
    if (cached := store.get(key)) is not None:
        return SweepResult.from_json(cached)
    with harness.Clock() as clock:
        result = sweep(model, tokenizer, task, block, limit=limit, data_dir=data_dir)
    print(f"sweep: {clock.wall:.0f} s")
    store.put(key, result.to_json())
    return result


def greedy_answer(model, tokenizer, prompt: str, max_new_tokens: int = 24) -> str:
    """The chat answer with greedy decoding."""
    from evaluation.measure.generation import TokenStream, encode_prompt

    stream = TokenStream(model, tokenizer, encode_prompt(tokenizer, prompt), max_new_tokens=max_new_tokens,
                         temperature=0.0, top_p=1.0, seed=0)
    while not stream.done:
        stream.step()
    return stream.state()["text"]


if __name__ == "__main__":
    main()
