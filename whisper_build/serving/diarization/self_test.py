"""The speaker model's self-test at load, and its deaths: a model that dies on every load is marked failed.

:func:`self_test` runs one diarization of a synthetic clip in a forked child, so a crash of native
code (SIGILL from an instruction this CPU lacks, SIGSEGV) kills the child, not the python stub,
and is seen at start-up rather than on a user's first request. :class:`Deaths` keeps, per Triton
server (its pid), when the model's runtime died: a crashed self-test, or a load after the first
(Triton's python backend loads a stub again only after the previous one died). After
:data:`FAILED_AFTER_DEATHS` within :data:`DEATH_WINDOW_SECONDS` the model is failed: it answers every
request at once with :data:`FAILED_MARKER` and the cause; the gateway answers 503 without retry and
names it in ``/ping``. ``WHISPER_SPEAKER_SELF_TEST_FAULT=SIGILL`` (any signal name) kills every
self-test (tests). Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["DEATH_WINDOW_SECONDS", "FAILED_AFTER_DEATHS", "FAILED_MARKER", "FAULT_ENV", "Deaths", "self_test"]

FAILED_AFTER_DEATHS = 3
DEATH_WINDOW_SECONDS = 600.0
FAILED_MARKER = "speaker model failed"
"""Starts the error every request gets from a failed speaker model (the gateway's ``ModelFailed``)."""
FAULT_ENV = "WHISPER_SPEAKER_SELF_TEST_FAULT"
SELF_TEST_TIMEOUT_SECONDS = 300.0


def _clip() -> np.ndarray:
    """3 s of a voiced, vowel-like signal (120 Hz harmonics, syllable envelope): VAD finds speech in it."""
    t = np.arange(48_000) / 16_000
    voice = sum(np.sin(2 * np.pi * 120 * k * t) / k for k in range(1, 20))
    return (0.3 * voice * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t)) / 3).astype(np.float32)


def self_test(run: Callable[[np.ndarray], object], timeout: float = SELF_TEST_TIMEOUT_SECONDS) -> str | None:
    """Run ``run`` on a short clip in a forked child; ``None`` when it returned, else how the child died.

    The cause names the signal and the Python frames (faulthandler) at the crash.
    """
    report = tempfile.NamedTemporaryFile(prefix="speaker-self-test-", suffix=".txt", delete=False)  # noqa: SIM115
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's stack
        code = 0
        try:
            faulthandler.enable(report, all_threads=False)
            if fault := os.environ.get(FAULT_ENV):
                signal.raise_signal(signal.Signals[fault])
            run(_clip())
        except BaseException:  # noqa: BLE001 - an exception is no crash: the stub answers it per request
            code = 0
        os._exit(code)
    deadline = time.monotonic() + timeout
    while (waited := os.waitpid(pid, os.WNOHANG)) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return f"the self-test did not finish within {timeout:g} s"
        time.sleep(0.05)
    report.close()
    trace = Path(report.name).read_text(errors="replace").strip()
    os.unlink(report.name)
    status = waited[1]
    if not os.WIFSIGNALED(status):
        return None
    number = os.WTERMSIG(status)
    frames = " <- ".join(line.strip() for line in trace.splitlines() if line.strip().startswith("File"))
    return f"{signal.Signals(number).name} ({signal.strsignal(number)}) in the self-test at {frames or 'native code'}"


class Deaths:
    """When the speaker model's runtime died, per Triton server (a JSON file in the temporary directory).

    Args:
        server: the Triton server's pid (the stub's parent).
        clock: unix seconds.
    """

    def __init__(self, server: int | None = None, clock: Callable[[], float] = time.time) -> None:
        pid = server or os.getppid()
        try:  # the server's start time (clock ticks after boot) tells a reused pid from the same server
            started = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        except (OSError, IndexError):
            started = "0"
        self.path = Path(tempfile.gettempdir()) / f"whisper-speaker-deaths-{pid}-{started}.json"
        self._clock = clock

    def _read(self) -> dict[str, list]:
        try:
            return dict(json.loads(self.path.read_text()))
        except (OSError, ValueError):
            return {"loads": [], "deaths": []}

    def loaded(self) -> None:
        """A load starts: one after an earlier load of this server means the earlier runtime died."""
        state = self._read()
        if state["loads"]:
            state["deaths"].append([self._clock(), "the runtime died (Triton loaded the model again)"])
        state["loads"].append(self._clock())
        self.path.write_text(json.dumps(state))

    def died(self, cause: str) -> None:
        """The runtime died of ``cause`` (a crashed self-test)."""
        state = self._read()
        state["deaths"].append([self._clock(), cause])
        self.path.write_text(json.dumps(state))

    def failed(self) -> str | None:
        """The cause when :data:`FAILED_AFTER_DEATHS` deaths fell within :data:`DEATH_WINDOW_SECONDS`, else ``None``."""
        recent = [cause for at, cause in self._read()["deaths"] if self._clock() - at <= DEATH_WINDOW_SECONDS]
        if len(recent) < FAILED_AFTER_DEATHS:
            return None
        return f"{len(recent)} deaths within {DEATH_WINDOW_SECONDS / 60:g} min; last: {recent[-1]}"
