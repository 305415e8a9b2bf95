"""``python -m whisper_build.deploy``. Docs: docs/deploy.md, "Deploy"."""

import sys

from whisper_build.deploy.cli import main

sys.exit(main())
