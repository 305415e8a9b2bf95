"""The ``nvidia-pytriton`` wheel as a Triton install: its files, a backend directory, the server's environment.

:class:`TritonWheel` finds ``tritonserver``, the python backend and its stubs in the installed wheel;
:func:`assemble_backends` and :func:`server_environment` prepare what the server needs, as PyTriton
itself does (the details: :func:`whisper_build.workstation.local_triton.main`'s docstring).
Docs: docs/serving.md, "Local run (no Docker)".
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from whisper_build.paths import REPO_ROOT

__all__ = ["TritonStartError", "TritonWheel", "assemble_backends", "server_environment"]


class TritonStartError(RuntimeError):
    """tritonserver exited or did not become ready; the message carries the end of its log."""


@dataclass(frozen=True)
class TritonWheel:
    """Paths inside an installed ``nvidia-pytriton`` wheel.

    Attributes:
        server_dir: ``site-packages/pytriton/tritonserver`` (``bin/``, ``backends/``, stubs).
        libs_dir: ``site-packages/nvidia_pytriton.libs`` (libtritonserver, libcudart, …).
    """

    server_dir: Path
    libs_dir: Path

    @classmethod
    def find(cls) -> TritonWheel:
        """Locate the wheel installed in the running interpreter's environment.

        Raises:
            TritonStartError: ``nvidia-pytriton`` is not installed or lacks ``tritonserver``.
        """
        try:
            import pytriton
        except ImportError as error:
            raise TritonStartError(
                "nvidia-pytriton is not installed: make serve installs it (the serving set)"
            ) from error
        site = Path(pytriton.__file__).resolve().parent.parent
        wheel = cls(site / "pytriton" / "tritonserver", site / "nvidia_pytriton.libs")
        if not wheel.binary.is_file():
            raise TritonStartError(f"{wheel.binary} not found; reinstall nvidia-pytriton")
        return wheel

    @property
    def binary(self) -> Path:
        """The ``tritonserver`` executable."""
        return self.server_dir / "bin" / "tritonserver"

    def stub(self, version: tuple[int, int] = sys.version_info[:2]) -> Path:
        """The python backend stub built for Python ``version`` (default: the running one).

        Raises:
            TritonStartError: the wheel has no stub for that version.
        """
        path = self.server_dir / "python_backend_stubs" / f"{version[0]}.{version[1]}" / "triton_python_backend_stub"
        if not path.is_file():
            raise TritonStartError(f"nvidia-pytriton has no python backend stub for Python {version[0]}.{version[1]}")
        return path


def assemble_backends(wheel: TritonWheel, target: Path) -> Path:
    """Build a backend directory: ``target/python/`` = the wheel's python backend + the stub.

    Returns:
        ``target``, for ``tritonserver --backend-directory``.
    """
    python_dir = target / "python"
    if python_dir.exists():
        shutil.rmtree(python_dir)
    shutil.copytree(wheel.server_dir / "backends" / "python", python_dir)
    shutil.copy2(wheel.stub(), python_dir / "triton_python_backend_stub")
    return target


def server_environment(wheel: TritonWheel, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for tritonserver and its python stubs (see :func:`whisper_build.workstation.local_triton.main`)."""
    env = dict(os.environ if base is None else base)

    def prepend(name: str, *paths: str) -> None:
        env[name] = os.pathsep.join([*paths, *filter(None, [env.get(name)])])

    prepend("LD_LIBRARY_PATH", str(wheel.libs_dir), str(sysconfig.get_config_var("LIBDIR")))
    prepend("PATH", str(Path(sys.executable).parent))
    prepend("PYTHONPATH", str(REPO_ROOT))
    return env
