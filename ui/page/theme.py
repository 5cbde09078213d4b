"""The page's look: system fonts only (a talk's projector machine is often offline), a few rules of CSS, and what
a table of measurements shows before the first."""

from __future__ import annotations

import gradio as gr
import pandas as pd

THEME = gr.themes.Soft(primary_hue="red", text_size="lg",
                       font=["system-ui", "Segoe UI", "Helvetica", "Arial", "sans-serif"],
                       font_mono=["ui-monospace", "Consolas", "monospace"])
CSS = """
#cut-banner { font-size: 1.25rem; padding: 6px 12px; border-left: 6px solid #e45756;
              background: var(--block-background-fill); }
#title h1 { margin-bottom: 0; }
#index-convention { font-size: 0.95rem; color: var(--body-text-color-subdued); }
.gen-out textarea { font-size: 1.05rem !important; }
"""
EMPTY_TABLE = pd.DataFrame({"Metric": [], "Original": [], "A": [], "B": []})
