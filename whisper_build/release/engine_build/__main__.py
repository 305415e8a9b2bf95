"""``python -m whisper_build.release.engine_build``."""

import sys

from whisper_build.release.engine_build.cli import main

sys.exit(main())
