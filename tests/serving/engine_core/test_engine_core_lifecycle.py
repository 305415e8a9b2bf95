"""The engine-core process under ``make serve`` (real tritonserver, CPU tiny.en, the gateway): faults and reloads.

* ``kill -9`` of the core: a request sent right after is answered (a 503 with retry advice, or a 200;
  never a hang), ``/ping`` reports it, and a new core serves (transcriptions succeed again).
* ``kill -9`` of the python stub: its core exits by itself (parent watch) and removes its socket folder;
  the gateway reloads the model and service comes back.
* unload/load of the model three times: one core at a time, and the memory of tritonserver and its
  children back near its first reading.
* ``make serve`` stopped with SIGTERM: no process of it, no ``/dev/shm`` region, no socket folder left.

Bounds are generous (a busy 2-core box); the measured times are printed.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
import speech_samples as samples
from fixtures_triton import make_serve_command

from whisper_build.serving import contract
from whisper_build.serving.engine_core.core import IPC_PREFIX, PROCESS_NAME

pytestmark = pytest.mark.integration

TEXT = "Please remember to turn off the lights when you leave the office tonight."
ANSWERED_WITHIN_S = 30.0
"""A request sent right after the core died is answered (promise: 10 s; slack for a loaded 2-core box)."""
CORE_GONE_WITHIN_S = 30.0
"""The core exits after its stub died (promise: 15 s; the watch looks every 0.5 s)."""
HEALED_WITHIN_S = 150.0


def _ping(client: httpx.Client) -> int:
    try:
        return client.get("/ping", timeout=2).status_code
    except httpx.TransportError:
        return 0


def _wait(condition, timeout: float, what: str) -> float:  # noqa: ANN001
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, what
        time.sleep(0.1)
    return time.monotonic() - start


_SEEN_FOLDERS: set[Path] = set()
"""Every socket folder a core of this module's ``make serve`` was told to use (other tests' cores run beside it)."""


def _cores(launcher: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The live engine cores under ``launcher``; records each core's socket folder in ``_SEEN_FOLDERS``."""
    found = []
    for process in psutil.Process(launcher.pid).children(recursive=True):
        try:
            args = process.cmdline()
            if PROCESS_NAME in args and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
                _SEEN_FOLDERS.add(_folder_of(args))
        except psutil.NoSuchProcess:
            continue
    return found


def _folder_of(core_args: list[str]) -> Path:
    """A core's socket folder, from the ``requests`` endpoint (``ipc://<folder>/requests``) of its ``--config``."""
    config = json.loads(core_args[core_args.index("--config") + 1])
    folder = Path(config["requests"].removeprefix("ipc://")).parent
    assert folder.name.startswith(IPC_PREFIX), folder
    return folder


def _tree_rss(launcher: subprocess.Popen[bytes]) -> int:
    total = 0
    for process in psutil.Process(launcher.pid).children(recursive=True):
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def _transcribe(client: httpx.Client, audio: bytes) -> httpx.Response:
    return client.post("/invocations", json={"audio_data": base64.b64encode(audio).decode()}, timeout=120)


class _PingWatch:
    """Polls ``/ping`` every 50 ms on a thread; ``seen`` holds every status read."""

    def __init__(self, client: httpx.Client) -> None:
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(client,), daemon=True)
        self._thread.start()

    def _run(self, client: httpx.Client) -> None:
        while not self._stop.wait(0.05):
            self.seen.add(_ping(client))

    def stop(self) -> set[int]:
        self._stop.set()
        self._thread.join()
        return self.seen


@pytest.fixture
def serve(tmp_path: Path):
    """``make serve`` on free ports; yields (launcher, gateway client); then SIGTERM and nothing left behind."""
    command, env, gateway_port = make_serve_command(tmp_path, cpu_threads=1)
    _SEEN_FOLDERS.clear()
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{gateway_port}") as client:
            _wait(lambda: _ping(client) == 200, 240, "make serve did not get ready")
            yield process, client
        _cores(process)
        children = psutil.Process(process.pid).children(recursive=True)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
        alive = [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not alive, alive
        assert not list(Path("/dev/shm").glob(f"whisper_{process.pid}_*"))
        assert _SEEN_FOLDERS and not [f for f in _SEEN_FOLDERS if f.exists()], _SEEN_FOLDERS
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()


@pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)")
def test_the_engine_core_heals_after_kill_9_of_it_or_its_stub_and_reloads_leave_no_growth(serve, tmp_path) -> None:
    launcher, client = serve
    audio = samples.speak(TEXT, tmp_path / "speech.wav").read_bytes()
    first = _transcribe(client, audio)
    assert first.status_code == 200 and samples.wer(TEXT, first.json()["transcribe_text"]) < 0.3
    [core] = _cores(launcher)
    assert core.parent().name().startswith("triton_python_b")  # a direct child of the stub
    report: dict[str, float] = {}

    # WHEN the core is killed, a request sent right after is answered: 503 with retry advice, or 200
    watch = _PingWatch(client)
    core.send_signal(signal.SIGKILL)
    started = time.monotonic()
    answer = _transcribe(client, audio)
    report["core_killed_request_answered_s"] = time.monotonic() - started
    assert report["core_killed_request_answered_s"] < ANSWERED_WITHIN_S
    assert answer.status_code in (200, 503), answer.text
    if answer.status_code == 503:
        assert contract.ENGINE_CORE_RESTARTING in answer.text and "retry" in answer.text.lower(), answer.text
    # THEN a new core serves; /ping reported the fault (when the request met it) and is 200 again
    report["core_replaced_s"] = _wait(
        lambda: [c.pid for c in _cores(launcher)] not in ([], [core.pid]), HEALED_WITHIN_S, "no new core"
    )
    _wait(lambda: _ping(client) == 200 and _transcribe(client, audio).status_code == 200, HEALED_WITHIN_S, "no heal")
    if answer.status_code == 503:
        assert 503 in watch.stop(), "the core's death never showed on /ping"
    else:
        watch.stop()

    # WHEN the stub is killed, its core exits by itself and removes its socket folder
    [core] = _cores(launcher)
    stub = core.parent()
    folder = _folder_of(core.cmdline())
    assert folder.is_dir(), folder
    stub.send_signal(signal.SIGKILL)
    report["stub_killed_core_gone_s"] = _wait(
        lambda: not core.is_running() or core.status() == psutil.STATUS_ZOMBIE, CORE_GONE_WITHIN_S, "core orphaned"
    )
    _wait(lambda: not folder.exists(), CORE_GONE_WITHIN_S, "the dead stub's socket folder is left")
    report["stub_killed_healed_s"] = _wait(
        lambda: _ping(client) == 200 and _transcribe(client, audio).status_code == 200, HEALED_WITHIN_S, "no heal"
    )

    # WHEN the model is unloaded and loaded three times, one core serves and the memory comes back
    triton = _triton_url(launcher)
    readings = [_tree_rss(launcher)]
    for _ in range(3):
        assert httpx.post(f"{triton}/v2/repository/models/whisper/unload", timeout=120).status_code == 200
        _wait(lambda: not _cores(launcher), 60, "the core outlived its model's unload")
        assert httpx.post(f"{triton}/v2/repository/models/whisper/load", timeout=300).status_code == 200
        assert len(_cores(launcher)) == 1
        _wait(lambda: _transcribe(client, audio).status_code == 200, HEALED_WITHIN_S, "no service after load")
        readings.append(_tree_rss(launcher))
    print(f"\nengine core lifecycle (s): {({k: round(v, 1) for k, v in report.items()})}; "
          f"tree RSS MB per load: {[r >> 20 for r in readings]}")  # fmt: skip
    assert readings[-1] <= readings[0] * 1.15 + (64 << 20), readings


def _triton_url(launcher: subprocess.Popen[bytes]) -> str:
    """Triton's HTTP URL from the launcher's command line."""
    args = psutil.Process(launcher.pid).cmdline()
    return f"http://127.0.0.1:{args[args.index('--http-port') + 1]}"
