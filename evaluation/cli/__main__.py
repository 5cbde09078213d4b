"""``python -m evaluation.cli``: the command line (see :mod:`evaluation.cli`)."""

import sys

from evaluation.cli import main

sys.exit(main())
