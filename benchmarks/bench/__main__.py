"""``python -m benchmarks.bench``: see :mod:`benchmarks.bench.cli`. Docs: docs/benchmarks.md, "The `bench` tool"."""

import sys

from benchmarks.bench.cli import main

sys.exit(main())
