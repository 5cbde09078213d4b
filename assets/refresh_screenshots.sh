#!/usr/bin/env bash
# Regenerates the screenshots in assets/ (the README's and the docs'): the browser tests run on the embedded default
# model with LAYERCUT_SCREENSHOTS=assets (about 15 minutes on 2 CPU cores). The test command never writes here:
# its screenshots go to a temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."
LAYERCUT_SCREENSHOTS=assets .venv/bin/python -m pytest -q tests/ui/test_browser.py tests/ui/test_browser_jobs.py tests/ui/test_encoder_browser.py "$@"
