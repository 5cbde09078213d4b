"""LayerCut's pruning core: load a model, score its layers, cut a block.

Public API::

    model, tokenizer = prune.load_model()            # None → the embedded default
    result = prune.score(model, tokenizer, "angular")
    start, end = result.best_block(6)                # end exclusive
    pruned = prune.cut(model, start, end)            # the original stays untouched
    sparse = prune.sparsify(model, tokenizer, "wanda", 0.5)  # or pattern="2:4"; also untouched
    narrow = prune.shrink_width(model, tokenizer, param_ratio=0.8)  # fewer heads and MLP channels; untouched
    factored = prune.decompose(model, tokenizer, space="feature", param_ratio=0.8)  # low-rank factors; untouched
    healed = prune.heal(pruned, tokenizer, method="lora")  # a short retraining, merged; ``pruned`` untouched
    small = prune.Quantize.of(4).apply(model)  # int4 weights (torchao, weight-only); ``model`` untouched
"""

from prune.core.version import __version__
from prune.core.calibration import Calibration
from prune.core.errors import LayerCutError
from prune.healing.train import heal
from prune.core.loading import DEFAULT_MODEL, load_model
from prune.lowrank.decomposition import decompose
from prune.depth.methods import METHODS
from prune.depth.methods.context import Context
from prune.depth.result import ImportanceResult
from prune.depth.scoring import score
from prune.sparsity.masks import sparsify
from prune.core.surgery import cut, remove_layers
from prune.width.shrink import shrink_width

# The families, in the order the app's picker and the CLI's help show them; importing each registers it.
from prune.depth.step import DepthCut
from prune.patch.step import Patch
from prune.drop.step import SubLayerDrop
from prune.sparsity.step import Sparsify
from prune.width.step import WidthPrune
from prune.experts.step import ExpertPrune
from prune.lowrank.step import Decompose
from prune.healing.step import Heal
from prune.quantize.step import Quantize
from prune.core.family import FAMILIES

__all__ = ["__version__", "Calibration", "Context", "DEFAULT_MODEL", "Decompose", "DepthCut", "ExpertPrune", "FAMILIES",
           "Heal",
           "ImportanceResult", "LayerCutError", "METHODS", "Patch", "Quantize", "Sparsify", "SubLayerDrop",
           "WidthPrune", "cut", "decompose", "heal", "load_model", "remove_layers", "score", "shrink_width", "sparsify"]
