"""Ctrl-C on ``make serve``: Triton is ended once every request is answered, not after its models' unload.

The ``whisper`` stub is made slow to exit (``tests/support/engine_hook/slow_exit.py``), as a stub with torch
loaded is on a busy CPU, so Triton's own unload would outlast its exit timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from fixtures_triton import make_serve_command
from slow_engine import HOOK_DIR

from whisper_build.serving.engines.factory import WRAPPER_VARIABLE
from whisper_build.serving.triton_cleanup import SHM_DIR
from whisper_build.workstation.process import wait_until_ready


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (the python stubs name their shm prefix)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.integration
def test_ctrl_c_ends_make_serve_cleanly_while_a_model_unloads_slowly(tmp_path: Path) -> None:
    # GIVEN make serve (launcher + gateway) whose whisper stub takes 600 s to exit; Triton gives up after 5 s
    command, env, gateway_port = make_serve_command(tmp_path)
    env.update({WRAPPER_VARIABLE: f"{HOOK_DIR / 'slow_exit.py'}:wrap", "WHISPER_TRITON_EXIT_TIMEOUT_S": "5"})
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    assert process.stdout is not None
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
    reader.start()
    prefix = f"whisper_{process.pid}_"  # the launcher's shared-memory prefix (triton_cleanup.TritonLaunch)
    try:
        wait_until_ready(f"http://127.0.0.1:{gateway_port}/ping", process, 300, "make serve")
        assert _processes_naming(prefix), "no python stub names the launcher's shared-memory prefix"
        # WHEN Ctrl-C reaches its process group
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    reader.join(timeout=30)
    log = b"".join(lines).decode(errors="replace")
    # THEN it exits 0 without Triton's error, leaving no stub and no shared-memory region behind
    assert code == 0, log[-4000:]
    assert "Exit timeout expired" not in log
    assert "every request answered" in log, log[-4000:]
    assert not _processes_naming(prefix)
    assert not list(SHM_DIR.glob(prefix + "*"))
