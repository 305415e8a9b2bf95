"""Shared fixtures. Fixture modules live next to this file and are imported here so that every
test module can request them by name."""

# triton_server: real tritonserver + CPU whisper on free ports, session-scoped (tests/fixtures_triton.py);
# slow_triton_server: another one whose engine a test slows down (tests/slow_engine.py)
import os
import shutil

import pytest
from fixtures_triton import slow_triton_server, triton_server  # noqa: F401

CI_TOOLS = ("espeak-ng", "sox", "prometheus", "promtool")
"""Debian tools some tests need (.ci/apt-packages.txt). Locally a missing tool skips those tests;
in CI it fails the run, so a broken install can never turn into silently skipped tests."""


def pytest_sessionstart(session: pytest.Session) -> None:
    missing = [tool for tool in CI_TOOLS if shutil.which(tool) is None]
    if missing and os.environ.get("CI"):
        pytest.exit(f"CI needs {', '.join(missing)} on PATH (install .ci/apt-packages.txt)", returncode=3)
