"""``python -m whisper_build.engine_build``."""

import sys

from whisper_build.engine_build.cli import main

sys.exit(main())
