"""``python -m whisper_build.release.engine_build``. Docs: docs/engines.md, "Running the build tool by hand"."""

import sys

from whisper_build.release.engine_build.cli import main

sys.exit(main())
