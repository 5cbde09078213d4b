"""The page's look: system fonts only (a talk's projector machine is often offline), a few rules of CSS, and what
a table of measurements shows before the first."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from ui.palette import HIGHLIGHT, ORANGE

# A calm indigo for buttons and choices (apart from the charts' model colours); labels as quiet grey tags, not the
# coloured pills that read like errors; red kept for Stop alone.
STOP, STOP_HOVER = gr.themes.colors.red.c600, gr.themes.colors.red.c700
THEME = gr.themes.Soft(primary_hue="indigo", secondary_hue="indigo", neutral_hue="slate", text_size="lg",
                       font=["system-ui", "Segoe UI", "Helvetica", "Arial", "sans-serif"],
                       font_mono=["ui-monospace", "Consolas", "monospace"]).set(
    block_label_background_fill="*neutral_100", block_label_text_color="*neutral_700",
    block_label_background_fill_dark="*neutral_700", block_label_text_color_dark="*neutral_100",
    block_title_background_fill="*neutral_100", block_title_text_color="*neutral_700",
    block_title_background_fill_dark="*neutral_700", block_title_text_color_dark="*neutral_100",
    button_primary_background_fill="*primary_600", button_primary_background_fill_hover="*primary_500",  # 6:1 text
    button_cancel_background_fill=STOP, button_cancel_background_fill_hover=STOP_HOVER,
    button_cancel_background_fill_dark=STOP, button_cancel_background_fill_hover_dark=STOP_HOVER,
    button_cancel_text_color="white", button_cancel_text_color_hover="white", button_cancel_text_color_dark="white",
    button_cancel_border_color=STOP, button_cancel_border_color_dark=STOP)
# One 1280×720 screen: tight gaps; one-line status and method lines; a banner of constant height (a change of
# slot never moves the heatmap under the pointer); the introduction and settings hidden until About is pressed.
CSS = """
.gradio-container { --layout-gap: 8px; }
.gradio-container > .main > .wrap, .gradio-container .contain { padding-top: 0 !important; }
body, gradio-app, .gradio-container { padding-top: 0 !important; margin-top: 0 !important; }
#layer-range .html-container, #heatmap .html-container { padding: 0 !important; }
.lc-hidden { display: none !important; }
#topbar { align-items: center; }
#title p { font-size: 1.3rem; margin: 0; }
#model-info, #analysis-info, #server-memory, #method-about { font-size: 0.85rem; }
#model-info p, #analysis-info p, #server-memory p, #method-about p, #cut-banner p {
  white-space: nowrap; overflow: hidden; text-overflow: ellipsis; margin: 0; }
#cut-banner { height: 3.4em; overflow: hidden; font-size: 1.05rem; line-height: 1.6em; padding: 2px 12px;
              border-left: 6px solid var(--color-accent); background: var(--block-background-fill); }
#pickers [data-testid="block-info"] { font-size: 0.85rem; }
#slot .wrap { flex-wrap: nowrap; }
#clear-cut, #patch-btn { white-space: nowrap; }
#cut-feedback { min-height: 5em; font-size: 0.95rem; }
.lc-stale { font-weight: 700; background: STALE_BACK; border-bottom: 3px solid STALE_LINE; padding: 0 4px; }
#cut-feedback .lc-pending { color: var(--body-text-color-subdued); }
#index-convention { font-size: 0.95rem; color: var(--body-text-color-subdued); }
.gen-out textarea { font-size: 1.05rem !important; }
""".replace("STALE_BACK", HIGHLIGHT).replace("STALE_LINE", ORANGE)  # out of date: words, a colour and a line
EMPTY_TABLE = pd.DataFrame({"Metric": [], "Original": [], "A": [], "B": []})
