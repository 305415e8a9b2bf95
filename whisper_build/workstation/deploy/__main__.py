"""``python -m whisper_build.workstation.deploy``."""

import sys

from whisper_build.workstation.deploy.cli import main

sys.exit(main())
