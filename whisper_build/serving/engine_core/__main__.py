"""``python -m whisper_build.serving.engine_core whisper-engine-core --config JSON``: the engine-core process.

Docs: docs/engines.md, "The engine core"
"""

import sys

from whisper_build.serving.engine_core.core import main

sys.exit(main())
