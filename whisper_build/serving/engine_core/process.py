"""Starting the engine-core process from the Triton stub: an explicit interpreter, a visible name, no fork.

Inside Triton's python-backend stub ``sys.executable`` is the stub binary, not a Python, and forking a
process that may have touched CUDA is unsafe; so the core is ``subprocess.Popen``-ed (``posix_spawn`` /
``fork``+``exec`` of a fresh interpreter, a direct child of the stub, no shell) as
``<python> -m whisper_build.serving.engine_core whisper-engine-core --config JSON``. The interpreter:
``WHISPER_ENGINE_CORE_PYTHON``, else ``sys.executable`` when it is a Python, else ``python3`` on ``PATH``
(the launcher puts the environment's ``bin`` first). Docs: docs/engines.md, "The engine core".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from whisper_build.paths import REPO_ROOT
from whisper_build.serving.engine_core.core import PROCESS_NAME, CoreConfig

__all__ = ["PYTHON_VARIABLE", "core_command", "core_python", "spawn_core"]

PYTHON_VARIABLE = "WHISPER_ENGINE_CORE_PYTHON"
"""Environment variable: the interpreter that runs the engine core (default: see the module docstring)."""


def core_python() -> str:
    """The interpreter for the core (raises ``RuntimeError`` when none is found)."""
    chosen = os.environ.get(PYTHON_VARIABLE)
    if chosen:
        return chosen
    if Path(sys.executable).name.startswith("python"):
        return sys.executable
    found = shutil.which(f"python{sys.version_info[0]}.{sys.version_info[1]}") or shutil.which("python3")
    if found is None:
        raise RuntimeError(f"no Python interpreter for the engine core: set {PYTHON_VARIABLE}")
    return found


def core_command(config: CoreConfig, python: str | None = None) -> list[str]:
    """The core's argv: ``python -m whisper_build.serving.engine_core whisper-engine-core --config JSON``."""
    return [python or core_python(), "-m", "whisper_build.serving.engine_core", PROCESS_NAME, "--config",
            config.model_dump_json()]  # fmt: skip


def spawn_core(config: CoreConfig) -> subprocess.Popen[bytes]:
    """Start the core as a direct child; it imports the same ``whisper_build`` as this process.

    Its stdout/stderr are this process's (the pod log). It ignores SIGINT (Ctrl-C drains through the stub).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen(core_command(config), env=env, stdin=subprocess.DEVNULL, close_fds=True)  # noqa: S603
