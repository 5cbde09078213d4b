"""LayerCut's benchmarks, run from the repository's root as ``python -m benchmarks.<name>``: a package, so that the
scripts share ``harness`` and ``record`` by import, never by a path beside them.

Importing it makes the run offline unless the environment says otherwise: the figures are measured on machines
that reach no hub, and a script must not wait on one (huggingface_hub and datasets read these as they are imported,
which is why this sits here, before any script's own imports).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
