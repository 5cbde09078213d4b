"""The command line (the seed's ``benchmark.py``, kept compatible): benchmark the original and a cut.

Modes (one of):
  --full                                        the unpruned model only
  --personalized --start_block S --end_block E  cut layers S…E, E inclusive ("last layer that will be cut")
  --persistence                                 the zigzag-persistence cuts "10%" and "20%" (r ≥ 0.9 / 0.8·max r)
      [--zigzag_output FILE [--dry_run] [--num_hidden_layers N]]   … read from the authors' CSV
  --method NAME --num_layers K [--selection paper|block]
                                                K layers by any method: as its paper picks them (default), or
                                                the best contiguous block (sleb: its first K greedy removals,
                                                printed step by step)
  --method sublayer --num_layers N --drop attention|mlp   drop the N lowest-scored attention (or MLP) blocks
  --sweep K                                     every block of K layers measured, beside each method's ranking
  --sparsity_sweep [--levels 0,0.1,0.5,0.9,0.99] [--methods magnitude,wanda,sparsegpt]
                                                the first --task and WikiText-2 perplexity at each sparsity level
  --frontier [METHOD] [--axis bytes|params|ms] [--sizes 90,80,70]
             [--target bytes=0.8|bytes=400MiB|ms=20|params=0.8]
                                                every family's best candidate at each size (depth cuts by METHOD,
                                                default block_influence), measured on WikiText-2 and the first
                                                --task; sizes are the weights' bytes as stored unless --axis says
                                                otherwise; with --target, the best model under it that is smaller
                                                in bytes or faster than the original (--export_dir saves it)
  --rank_search feature|weight [--search_on wikitext2|TASK] [--tolerance T] [--search_limit N] [--search_layers N]
                                                surgical rank search of the last N layers' projections, then the
                                                searched model compared like a cut
  --recipe FILE                                 the recipe an export recorded (its folder, layercut.json or
                                                config.json), on --model or else the model its layercut.json names

With a cut mode (or a step), --explain compares each compressed model with the original on a small fixed
slice of the calibration text (perplexity of both, mean KL and top-1 next-token agreement) instead of
running the tasks; it writes ``explain.json``.

After the chosen cut (or, with --full, on the original) one more step may follow:
  --patch lstsq|cosine                          replace the cut block by one linear map folded into the layer
                                                before it (ReplaceMe; after a depth cut only, no training)
  --sparsify METHOD (--sparsity F | --pattern 2:4|4:8)   zero a fraction of every matrix (magnitude, wanda, sparsegpt)
  --width RATIO                                 remove heads and MLP channels until RATIO of the parameters stay
  --decompose feature|weight --param_ratio R    factor every projection at low rank until R of the parameters stay
  --heal lora|last_layers [--heal_steps N] [--heal_budget_s S] [--heal_teacher forward_kl|reverse_kl]
                                                retrain briefly on WikiText-2 *validation* (after another step only),
                                                on its tokens or distilled from the original; prints WikiText-2
                                                *test* perplexity before and after healing
  --quantize int8|int4 [--quant_group G] [--quant_method rtn|gptq]
                                                last: every decoder matrix in int8 or int4 weights, rounded to
                                                nearest (torchao) or chosen by GPTQ on the calibration text
(several: the patch, then width, then low rank, then sparsity, then healing, then quantization).

--model takes a Hub id, a folder, a .gguf file or a Hub GGUF as owner/repo/file.gguf (dequantized once, cached).

--speed adds speed and memory as the page measures them to a comparison's report: batch-1 prefill and decode (ms,
tokens/s), the bytes each decoded token reads, the floor at this device's measured bandwidth and the share of it
reached, weight and peak memory, checkpoint size; also written to ``speed_memory.json``.

Writes ``results_<mode>.json`` (lm-eval style), ``comparison.md`` and ``comparison.csv`` to
``--output_folder``; exits with status 2 and a one-line reason on bad input.

Examples::

    python -m evaluation.cli --full --task arc_easy,piqa --limit 200
    python -m evaluation.cli --method sublayer --num_layers 10 --drop attention --task hellaswag
    python -m evaluation.cli --method angular --num_layers 4 --sparsify wanda --sparsity 0.5
    python -m evaluation.cli --full --quantize int4 --task arc_easy --limit 100 --speed
    python -m evaluation.cli --personalized --start_block 15 --end_block 20 --explain
    python -m evaluation.cli --sparsity_sweep --task arc_easy --limit 100 --methods magnitude,wanda
    python -m evaluation.cli --frontier --task hellaswag --limit 200 --target bytes=0.5
    python -m evaluation.cli --rank_search feature --search_layers 4 --task arc_easy --limit 200
    layercut-benchmark --personalized --start_block 20 --end_block 25 --task hellaswag --export_dir ./cut
    layercut-benchmark --recipe ./cut --task hellaswag      # the same cut again, from the export's recipe
    layercut-benchmark --personalized --start_block 15 --end_block 21 --quantize int8 --export_dir ./cut --gguf Q8_0

Beyond one machine, ``--export_dir`` gives a normal Hugging Face folder for the usual engines, and prints (and
saves as SCALE_OUT.md beside it) the exact ``accelerate launch -m lm_eval`` and ``lm_eval --model vllm`` commands
that evaluate it on many GPUs, with the tensor-parallel sizes vLLM accepts for its shapes
(``evaluation/exports/scale_out.py``).

(offline, add ``--include_path ~/.cache/layercut/tasks/<fingerprint> --tasks layercut_hellaswag``:
the converted local tasks this command prepared).
"""

from __future__ import annotations

from evaluation.cli.parser import build_parser
from evaluation.cli.run import main

__all__ = ["build_parser", "main"]  # the entry point (pyproject.toml, ui/command.py) and docs/gen_cli.py's parser
