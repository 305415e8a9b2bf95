"""Stop a local tritonserver once every request is answered, without waiting for its models' unload.

On SIGTERM Triton refuses new requests, waits for the inferences in flight, logs :data:`UNLOADING`,
then unloads each model: the python backend waits until every stub process has finished its
interpreter's exit, which takes seconds per stub on a busy CPU once torch is loaded (the ``speaker``
model). Past ``--exit-timeout-secs`` Triton gives up with ``Exit timeout expired`` and exit code 1.
A local server keeps nothing across runs, so :func:`end_tritonserver` waits for that line, gives
the unload :data:`UNLOAD_GRACE_S`, then kills the process group and removes its shared-memory
regions. The serving image's supervisor keeps Triton's own shutdown.
Docs: docs/serving.md, "Local run (no Docker)".
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from whisper_build.serving.triton_cleanup import TritonLaunch, kill_process_group, remove_shm_regions

__all__ = ["UNLOADING", "UNLOAD_GRACE_S", "UnloadWatch", "end_tritonserver"]

log = logging.getLogger("whisper.local_triton")

UNLOADING = "All models are stopped, unloading models"
"""Triton's log line once the in-flight inferences of a stop are done (server ``src/server.cc``, 2.51)."""
UNLOAD_GRACE_S = 2.0
"""Seconds Triton may spend unloading its models after :data:`UNLOADING` before it is ended."""


class UnloadWatch:
    """Tells whether a tritonserver run has logged :data:`UNLOADING` since :meth:`mark`.

    Args:
        log_path: the run's log file; ``None``: the run's output is a pipe that :meth:`relay` copies
            to this process's stderr.
    """

    def __init__(self, log_path: Path | None) -> None:
        self._log_path = log_path
        self._offset = 0
        self._seen = threading.Event()

    def relay(self, process: subprocess.Popen[bytes]) -> None:
        """Copy ``process``'s piped output to stderr (where Triton logs) line by line, noting :data:`UNLOADING`.

        A daemon thread; it ends with the process's output.
        """
        if process.stdout is not None:
            self._seen.clear()
            threading.Thread(target=self._copy, args=(process.stdout,), name="triton-output", daemon=True).start()

    def _copy(self, stream: IO[bytes]) -> None:
        out = getattr(sys.stderr, "buffer", None)
        for line in stream:
            if UNLOADING.encode() in line:
                self._seen.set()
            if out is not None:
                out.write(line)
                out.flush()

    def mark(self) -> None:
        """Look only at what the run logs from now on."""
        self._seen.clear()
        self._offset = self._log_path.stat().st_size if self._log_path and self._log_path.exists() else 0

    def seen(self) -> bool:
        """True once :data:`UNLOADING` was logged after :meth:`mark`."""
        if self._log_path is None or self._seen.is_set():
            return self._seen.is_set()
        try:
            with self._log_path.open("rb") as log_file:
                log_file.seek(self._offset)
                found = UNLOADING.encode() in log_file.read()
        except OSError:
            return False
        if found:
            self._seen.set()
        return found


def end_tritonserver(
    process: subprocess.Popen[bytes], launch: TritonLaunch, watch: UnloadWatch, timeout_s: float
) -> bool:
    """SIGTERM ``process``; once it logged :data:`UNLOADING` and :data:`UNLOAD_GRACE_S` passed, end its group.

    Returns:
        False when it was still serving after ``timeout_s`` and had to be killed; True otherwise
        (it exited, or it was ended while unloading: every request had its answer).
    """
    if process.poll() is not None:
        return True
    watch.mark()
    process.send_signal(signal.SIGTERM)
    deadline, unloading_since = time.monotonic() + timeout_s, None
    while process.poll() is None:
        now = time.monotonic()
        if unloading_since is None and watch.seen():
            unloading_since = now
        if unloading_since is not None and now - unloading_since >= UNLOAD_GRACE_S:
            process.kill()
            process.wait()
            try:
                stubs = kill_process_group(process.pid)
            except (TimeoutError, PermissionError) as err:
                log.error("could not kill what tritonserver (pid %s) left running: %s", process.pid, err)
                stubs = []
            regions = remove_shm_regions(launch.prefix, launch.shm_dir)
            log.info(
                "tritonserver stopped: every request answered; its models' unload not waited for "
                "(ended with %d stub process(es), %d shared-memory region(s) removed)", len(stubs), len(regions),
            )  # fmt: skip
            return True
        if now >= deadline:
            log.error("tritonserver did not stop within %.0f s; killing it", timeout_s)
            process.kill()
            process.wait()
            return False
        time.sleep(0.05)
    log.info("tritonserver stopped (exit code %s)", process.returncode)
    return True
