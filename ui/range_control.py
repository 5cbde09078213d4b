"""A two-handled range over a model's layers, built on ``gr.HTML``.

(``gradio_rangeslider`` does not render under Gradio 6.) The handles sit on the L+1
*boundaries* between layers, so the span between them is exactly the block ``[start, end)``:
0-based, start inclusive, end exclusive, as in ``prune.core.surgery``. Dragging updates the
summary and the layer strip live in the browser (parameter counts come from the
``layer_params`` prop); releasing a handle fires ``release`` with ``value = [start, end]``.
A slot that holds no depth cut (empty, or a width step) shows no selection: its ``note`` says what
the slot holds instead, until a handle is dragged.
"""

from __future__ import annotations

import html
import math
import re

import gradio as gr

from prune.core.errors import InvalidCut, quoted
from prune.core.surgery import check_block

from ui.palette import IN_CUT, TEXT_HEX, VERMILLION
from ui.help_text import example_block

_TEMPLATE = r"""${(() => {
  const L = Number(layers) || 0;
  if (L < 2) return `<div class="lc-range lc-empty">Load a model to choose a block of layers to cut.</div>`;
  const v = Array.isArray(value) && value.length === 2 ? value : [0, 1];
  const a = Math.max(0, Math.min(L - 1, Math.round(Number(v[0]) || 0)));
  const b = Math.max(a + 1, Math.min(L, Math.round(Number(v[1]) || 0)));
  const cut = Array.isArray(custom) ? new Set(custom) : null;  // [] = no whole layer cut
  const none = typeof note === 'string' && note.length > 0;  // no selection: the note says what the slot holds
  const isCut = (i) => none ? false : cut ? cut.has(i) : (i >= a && i < b);
  const removed = Array.from({length: L}, (_, i) => i).filter(isCut);
  const params = Array.isArray(layer_params) ? layer_params : [];
  const p = removed.reduce((s, i) => s + (Number(params[i]) || 0), 0);
  const pct = Number(total_params) > 0 ? 100 * p / Number(total_params) : 0;
  const fmt = (x) => x >= 1e9 ? (x / 1e9).toFixed(2) + ' B' : (x / 1e6).toFixed(1) + ' M';
  const what = !cut ? `Cut layers ${a}…${b - 1} = <code>[${a}, ${b})</code>` :
    removed.length ? `Cut layers ${removed.join(', ')}` : 'No whole layer cut';
  const cells = Array.from({length: L}, (_, i) =>
    `<div class="lc-cell${isCut(i) ? ' cut' : ''}"` +
    ` title="layer ${i}${isCut(i) ? ' (removed)' : ''}">${i}</div>`).join('');
  const thumb = 22;
  const fill = cut || none ? '' : `<div class="lc-fill" style="left: calc(${a / L} * (100% - ${thumb}px) + ` +
    `${thumb / 2}px); width: calc(${(b - a) / L} * (100% - ${thumb}px))"></div>`;
  const summary = none ? note :
    `${what} · <b>${removed.length}</b> of ${L} layers · <b>${fmt(p)}</b> parameters (<b>${pct.toFixed(1)} %</b>)`;
  return `<div class="lc-range${none ? ' lc-none' : ''}" data-start="${none ? '' : a}" data-end="${none ? '' : b}"` +
    ` data-removed="${removed.length}">
    <div class="lc-summary">${summary}</div>
    <div class="lc-track">${fill}
      <input type="range" class="lc-lo" min="0" max="${L}" step="1" value="${a}"` +
    ` aria-label="start: first layer removed">
      <input type="range" class="lc-hi" min="0" max="${L}" step="1" value="${b}"` +
    ` aria-label="end: first layer kept after the block">
    </div>
    <div class="lc-cells" style="grid-template-columns: repeat(${L}, 1fr)">${cells}</div>
  </div>`;
})()}"""

_CSS = r"""
.lc-range { font-size: 1.05rem; user-select: none; }
.lc-empty { color: var(--body-text-color-subdued); padding: 12px 0; }
.lc-summary { margin-bottom: 6px; }
.lc-summary code { font-size: 1rem; }
.lc-track { position: relative; height: 34px; }
.lc-track::before { content: ""; position: absolute; left: 11px; right: 11px; top: 14px; height: 6px;
  border-radius: 3px; background: var(--neutral-300, #ccc); }
.lc-fill { position: absolute; top: 12px; height: 10px; border-radius: 4px; background: CUT_COLOUR; }
.lc-track input[type=range] { position: absolute; left: 0; top: 0; width: 100%; height: 34px; margin: 0;
  background: none; pointer-events: none; -webkit-appearance: none; appearance: none; }
.lc-track input[type=range]::-webkit-slider-runnable-track { background: none; height: 34px; }
.lc-track input[type=range]::-webkit-slider-thumb { -webkit-appearance: none; pointer-events: auto; width: 22px;
  height: 22px; margin-top: 6px; border-radius: 50%; background: #fff; border: 3px solid HANDLE_COLOUR;
  cursor: ew-resize; }
.lc-track input[type=range]::-moz-range-thumb { pointer-events: auto; width: 16px; height: 16px; border-radius: 50%;
  background: #fff; border: 3px solid HANDLE_COLOUR; cursor: ew-resize; }
.lc-track input[type=range]:focus-visible::-webkit-slider-thumb { outline: 3px solid #4c78a8; }
.lc-cells { display: grid; gap: 1px; margin: 2px 11px 0 11px; }
.lc-cell { text-align: center; font-size: 0.7rem; padding: 3px 0; border-radius: 2px;
  background: var(--neutral-200, #ddd); color: var(--neutral-700, #333); overflow: hidden; }
.lc-cell.cut { background: CUT_COLOUR; color: CUT_TEXT; font-weight: 700; }
.lc-none .lc-summary { color: var(--body-text-color-subdued); font-style: italic; }
.lc-none .lc-track input[type=range]::-webkit-slider-thumb { border-color: var(--neutral-400, #999); }
.lc-none .lc-track input[type=range]::-moz-range-thumb { border-color: var(--neutral-400, #999); }
"""

# The cut in the charts' colour for a layer in it (colour-blind safe), its handles darker.
_CSS = _CSS.replace("CUT_COLOUR", IN_CUT).replace("HANDLE_COLOUR", VERMILLION).replace("CUT_TEXT", TEXT_HEX)

_JS = r"""
const handles = () => [element.querySelector('.lc-lo'), element.querySelector('.lc-hi')];
function current(target) {
  const [lo, hi] = handles();
  const L = Number(props.layers);
  let a = Number(lo.value), b = Number(hi.value);
  if (target === lo) a = Math.min(a, b - 1); else b = Math.max(b, a + 1);
  if (b - a >= L) { if (target === lo) a = b - L + 1; else b = a + L - 1; }  // never remove every layer
  a = Math.max(0, Math.min(a, L - 1));
  b = Math.min(L, Math.max(b, a + 1));
  lo.value = a; hi.value = b;
  return [a, b];
}
const isHandle = (e) => e.target && e.target.matches && e.target.matches('.lc-lo, .lc-hi');
element.addEventListener('input', (e) => {   // while dragging: re-render the summary only
  if (!isHandle(e)) return;
  if (Array.isArray(props.custom)) props.custom = false;
  if (props.note) props.note = '';
  props.value = current(e.target);
});
element.addEventListener('change', (e) => {  // released: tell Python
  if (!isHandle(e)) return;
  props.value = current(e.target);
  trigger('release');
});
"""


class LayerRange(gr.HTML):
    """Two handles over the layers; value ``[start, end]`` (end exclusive); ``release`` on drop."""

    def __init__(self, value: list[int] | None = None, *, layers: int = 0, layer_params: list[int] | None = None,
                 total_params: int = 0, custom: list[int] | None = None, note: str = "", **kwargs):
        # custom: the removed layers of a scattered cut, shown instead of the block; note: what a slot without a
        # selection holds (Gradio rebuilds the component from an update's props, so every prop is an argument here)
        super().__init__(value=list(value) if value else None, html_template=_TEMPLATE, css_template=_CSS,
                         js_on_load=_JS, layers=layers, layer_params=list(layer_params or []),
                         total_params=int(total_params), custom=_custom(custom), note=html.escape(note), **kwargs)

    def api_info(self) -> dict:
        return {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
                "description": "[start, end]: 0-based layer indices, start inclusive, end exclusive"}


def range_update(value: tuple[int, int] | list[int] | None, *, layers: int, layer_params: list[int],
                 total_params: int, custom: list[int] | None = None, note: str = "") -> dict:
    """A ``gr.update`` for LayerRange; every prop is sent because an update replaces them all.

    ``value``: the block, None for no selection, which ``note`` (plain text) then explains; ``custom``: the
    removed layers when they are not one block; ``[]`` when no whole layer is removed.
    """
    return gr.update(value=[int(value[0]), int(value[1])] if value is not None else None, layers=int(layers),
                     layer_params=list(layer_params), total_params=int(total_params), custom=_custom(custom),
                     note=html.escape(note) if value is None else "")


def _custom(custom) -> list[int] | bool:
    """The prop as sent: a list of removed layers, or False for a block (Gradio leaves a None prop unchanged,
    so a block after a scattered cut would still show the scattered one)."""
    return [int(i) for i in custom] if isinstance(custom, (list, tuple)) else False


_NUMBER = re.compile(r"(?<!\d)-?\d+(?:\.\d+)?")


def parse_range(value, num_layers: int) -> tuple[int, int]:
    """``[start, end]`` (list, tuple, dict or text like "20, 26" / "[20, 26)") → a checked block.

    Raises ``InvalidCut`` with a message for the user (index convention included).
    """
    if isinstance(value, dict):
        value = [value.get("start"), value.get("end")]
    if isinstance(value, str):
        value = _NUMBER.findall(value)
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        start, end = example_block(int(num_layers)) or (0, 1)
        raise InvalidCut(f"A block is two numbers [start, end), e.g. [{start}, {end}]; got {quoted(value)}.")
    bounds = []
    for part in value:
        try:
            number = float(part)
        except (TypeError, ValueError):
            raise InvalidCut(f"Block bounds must be whole numbers, got {quoted(part)}.") from None
        if not math.isfinite(number) or number != int(number):
            raise InvalidCut(f"Block bounds must be whole numbers, got {quoted(part)}.")
        bounds.append(int(number))
    start, end = bounds
    check_block(int(num_layers), start, end)
    return start, end
