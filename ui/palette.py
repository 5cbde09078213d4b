"""The page's colours: one per compared model on every chart, from a palette that people with a colour-vision
deficiency tell apart, and the sequential scale of the importance map.

The qualitative colours are Okabe & Ito's (*Color Universal Design*, 2008; Wong, *Nature Methods* 8, 441, 2011):
blue, vermillion and bluish green stay apart under protanopia and deuteranopia, the common deficiencies.
Colour is never the only cue: the charts also name their series in legends, hatch the bars in a cut, and the
divergence mark carries a ▶ sign.
"""

from __future__ import annotations

from itertools import cycle

from ui.session import SLOTS

BLUE, VERMILLION, BLUISH_GREEN = "#0072B2", "#D55E00", "#009E73"
ORANGE, SKY_BLUE, REDDISH_PURPLE, YELLOW, BLACK = "#E69F00", "#56B4E9", "#CC79A7", "#F0E442", "#000000"
OKABE_ITO = (BLACK, ORANGE, SKY_BLUE, BLUISH_GREEN, YELLOW, BLUE, VERMILLION, REDDISH_PURPLE)

MODEL_COLORS = dict(zip(("original", *SLOTS), (BLUE, VERMILLION, BLUISH_GREEN)))  # the same on every chart
GREY = "#666666"
# What is no model (methods, splits): never a model's colour; yellow left out, too faint on white.
SERIES = (ORANGE, REDDISH_PURPLE, SKY_BLUE, GREY)
KEPT, IN_CUT, PROTECTED = SKY_BLUE, ORANGE, "#c8c8c8"  # the per-layer bars; a cut's bars are hatched as well
IN_CUT_PATTERN = "/"
IDEAL = BLACK  # the ideal (FLOPs) speedup, a tick over each measured bar
MEASURED = BLACK  # a cut sweep's measured quality, beside the methods' scores
# Sequential and colour-blind safe (perceptually uniform, no red against green); reversed so that the most
# removable block of each size is the lightest cell.
COLORSCALE = "Viridis_r"
TEXT_HEX = "#222222"  # dark text on a light bar
HIGHLIGHT = "#FCE4A8"  # a light orange behind the text from where an answer leaves the original's


def model_colors(labels) -> dict[str, str]:
    """Each compared model's colour ("original", "A", "B" always the same); labels the page does not know (the
    command line's "pruned") take series colours in turn."""
    others = cycle(SERIES)
    return {label: MODEL_COLORS.get(label) or next(others) for label in labels}


def series_looks(count: int, dashes: tuple[str, ...] = ("solid", "dash", "dot")) -> list[tuple[str, str]]:
    """``count`` (colour, dash) pairs for lines that are no model (methods, splits): past the palette's colours,
    the colours repeat with the next dash."""
    return [(SERIES[i % len(SERIES)], dashes[i // len(SERIES) % len(dashes)]) for i in range(count)]


def ink(background: str) -> str:
    """White or dark text on ``background``, whichever contrasts more (WCAG's contrast ratio)."""
    light = _luminance(background)
    return "white" if 1.05 / (light + 0.05) >= (light + 0.05) / (_luminance(TEXT_HEX) + 0.05) else TEXT_HEX


def _luminance(color: str) -> float:
    """WCAG's relative luminance of a "#rrggbb" colour."""
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(int(color[i:i + 2], 16) / 255) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b
