"""The GPU seconds each device job asks a ZeroGPU Space for: its own estimate (:class:`ui.page.estimates.Seconds`,
the line shown beside its button) from the arguments the job is called with, or its kind's default where it has
none (:func:`ui.page.events.asked` adds the margin and clamps). Each method takes exactly the job handler's inputs.
"""

from __future__ import annotations

from evaluation.serving import COMPILE_ALLOWANCE_S, names_a_judge
from ui.page.estimates import Seconds
from ui.page.events import asked, fixed

# Jobs whose work is not counted beforehand: what each asks for (seconds, before the clamp)
LOAD_S = 120  # a model read from the Hub or disk, then one timed pass
ANALYZE_S = 90  # one pass over the calibration windows per method, more for PPL / Taylor+ / greedy
BUILD_S = 90
EXPORT_S = 120
EXPLAIN_S = 30  # the divergence, the logit lens, the cut's next-token feedback: a few passes over a short text
PATCH_S = 90
FRONTIER_S = 300  # every family at each size: the longest ZeroGPU grants here; a longer frontier stops there
COMPARE_S = 180  # the API's comparison: a load, the columns built, their benchmarks
GGUF_S = 30  # a column written as a GGUF for llama.cpp (an allowance, seconds for the default model)


class Durations:
    """Each device job's duration callable, for :func:`ui.page.events.gpu`."""

    load = staticmethod(fixed(LOAD_S))
    analyze = staticmethod(fixed(ANALYZE_S))
    experts = staticmethod(fixed(ANALYZE_S))  # the expert heatmap: one pass over the calibration windows
    build = staticmethod(fixed(BUILD_S))
    export = staticmethod(fixed(EXPORT_S))
    explain = staticmethod(fixed(EXPLAIN_S))
    patch = staticmethod(fixed(PATCH_S))
    frontier = staticmethod(fixed(FRONTIER_S))
    analyze_model = staticmethod(fixed(LOAD_S))  # the public endpoints (ui/api.py): a load, then an analysis
    compare_models = staticmethod(fixed(COMPARE_S))
    best_under_target = staticmethod(fixed(FRONTIER_S))

    def __init__(self, seconds: Seconds):
        self.seconds = seconds

    def speed(self, session, batches, prompt_len, new_tokens, repeats, compiled=False, llama_cpp=False, *_):
        eager = self.seconds.speed(session, batches, prompt_len, new_tokens, repeats)
        if eager is None:
            return asked(eager)
        engine = eager / len(batches) + GGUF_S * (1 + len(session.variants())) if llama_cpp else 0  # batch 1 there
        if not compiled:
            return asked(eager + engine)
        return asked(2 * eager + engine + COMPILE_ALLOWANCE_S * len(batches) * (1 + len(session.variants())))

    def memory(self, session, *_):
        return asked(self.seconds.memory(session))

    def benchmarks(self, session, tasks, limit, fewshot, *_):
        return asked(self.seconds.benchmarks(session, tasks, limit, fewshot))

    def perplexity(self, session, seq_len, windows, source=None, llama_cpp=False, *_):
        seconds = self.seconds.perplexity(session, seq_len, windows, source)
        if seconds is None or not llama_cpp:
            return asked(seconds)
        return asked(3 * seconds + GGUF_S * (1 + len(session.variants())))  # llama.cpp's pass and the top-1 pass

    def mt_bench(self, session, limit, turns, judge, remote_model, answer_tokens, judge_tokens, *_):
        seconds = self.seconds.mt_bench(session, limit, turns, judge, remote_model, answer_tokens, judge_tokens)
        if seconds is None or not names_a_judge(judge):
            return asked(seconds)
        return asked(seconds + LOAD_S)  # another judge: its load (a model) or its answers (an endpoint) not counted

    def sweep(self, session, task, block_size, limit, others, *_):
        return asked(self.seconds.sweep(session, task, block_size, limit, others))

    def sparsity_sweep(self, session, task, levels, methods, limit, windows, *_):
        return asked(self.seconds.sparsity(session, task, levels, methods, limit, windows))

    def generate(self, session, prompt, max_new_tokens, *_):
        return asked(self.seconds.generation(session, prompt, max_new_tokens))

    def rank_search(self, session, space, criterion, _tolerance, limit, last_layers, projections, *_):
        return asked(self.seconds.rank_search(session, space, criterion, limit, last_layers, projections))

    def heal(self, session, method, loss, _temperature, steps, budget, *_):
        return asked(self.seconds.healing(session, method, loss, steps, budget))

    def stability(self, session, _block_size, resamples, *_):
        return asked(self.seconds.stability(session, resamples))
