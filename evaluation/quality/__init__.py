"""Quality: lm-evaluation-harness tasks (offline), a faster scorer, perplexity, resumed cuts."""
