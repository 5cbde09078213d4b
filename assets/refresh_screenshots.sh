#!/usr/bin/env bash
# Regenerates the screenshots in assets/ (the README's and the docs'): the browser tests run on the embedded default
# model with LAYERCUT_SCREENSHOTS=assets, so every long job (rank search, healing, patch) runs on it too
# (about 15 minutes on 2 CPU cores). The test command never writes here: there those jobs run on a tiny model and
# their screenshots go to a temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."
LAYERCUT_SCREENSHOTS=assets .venv/bin/python -m pytest -q tests/ui/test_browser.py tests/ui/test_encoder_browser.py "$@"
