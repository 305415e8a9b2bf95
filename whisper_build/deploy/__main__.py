"""``python -m whisper_build.deploy``."""

import sys

from whisper_build.deploy.cli import main

sys.exit(main())
