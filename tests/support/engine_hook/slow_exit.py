"""Test-only engine wrapper: the python stub's interpreter takes long to exit, as a stub with torch loaded does.

``WHISPER_ENGINE_WRAPPER=<this file>:wrap`` registers an ``atexit`` handler in the ``whisper`` model's
stub that sleeps ``WHISPER_TEST_STUB_EXIT_SECONDS`` (default 600): Triton's model unload, which waits
for the stub process to end, then outlasts any ``--exit-timeout-secs``. The engine itself is unchanged.
"""

from __future__ import annotations

import atexit
import os
import time
from typing import Any

EXIT_SECONDS_VARIABLE = "WHISPER_TEST_STUB_EXIT_SECONDS"


def wrap(engine: Any) -> Any:
    """The ``WHISPER_ENGINE_WRAPPER`` entry point: ``engine`` as it is, the stub's exit slowed."""
    atexit.register(time.sleep, float(os.environ.get(EXIT_SECONDS_VARIABLE, "600")))
    return engine
