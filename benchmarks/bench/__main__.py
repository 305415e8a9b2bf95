"""``python -m benchmarks.bench``: see :mod:`benchmarks.bench.cli`."""

import sys

from benchmarks.bench.cli import main

sys.exit(main())
