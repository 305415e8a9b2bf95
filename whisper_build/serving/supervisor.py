"""Entrypoint of the serving image: runs tritonserver and the gateway, restarts Triton, stops both in order.

Triton first, then the gateway; a crashed Triton is restarted with back-off (the pod stays running
but unready), a gateway that exits ends the container, SIGTERM stops the gateway first, then Triton;
a heartbeat file feeds the gateway's ``/live``. Entry points: :func:`main`, :class:`Supervisor` (the
rules, in its docstring), :class:`~whisper_build.serving.supervisor_config.SupervisorSettings` (``WHISPER_SUPERVISOR_*``,
``WHISPER_MODEL_REPOSITORY_FILE``). Docs: docs/serving.md; docs/gateway.md, "Shutdown".
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from whisper_build.serving.backoff import Backoff
from whisper_build.serving.supervisor_config import (
    BenchmarkModeRefused,
    ModelPathMissing,
    SupervisorSettings,
    refuse_benchmark_mode,
    resolve_model_repository,
)
from whisper_build.serving.triton_cleanup import TritonLaunch
from whisper_build.serving.triton_model.settings import TritonSettings, tritonserver_args

__all__ = [
    "ChildSpec",
    "BenchmarkModeRefused",
    "RestartPolicy",
    "ModelPathMissing",
    "Supervisor",
    "SupervisorSettings",
    "build_children",
    "main",
    "resolve_model_repository",
]

log = logging.getLogger("whisper.supervisor")


@dataclass(frozen=True)
class RestartPolicy:
    """Restart an exited child after a back-off delay (see :class:`Backoff`).

    Attributes:
        initial_s: first delay, seconds.
        max_s: largest delay, seconds.
        reset_after_s: an uptime this long starts the delays over at ``initial_s``.
        termination_message_path: where each exit is also written (see :class:`SupervisorSettings`).
    """

    initial_s: float = 1.0
    max_s: float = 60.0
    reset_after_s: float = 60.0
    termination_message_path: Path | None = None


@dataclass(frozen=True)
class ChildSpec:
    """One supervised process.

    Attributes:
        name: for logs.
        command: argv.
        stop_timeout_s: seconds to wait after SIGTERM before SIGKILL.
        env: environment (default: the supervisor's).
        restart: restart it when it exits by itself; ``None``: its exit stops everything.
        spawn: starts the process instead of ``subprocess.Popen(command, env=env)`` (the local
            launcher passes its own, which also redirects the log and sets the parent-death signal).
        after_exit: called with the exited process before it is restarted or the supervisor
            ends (Triton's: :meth:`whisper_build.serving.triton_cleanup.TritonLaunch.clean_up`).
        stop: ends the process at shutdown instead of SIGTERM, then SIGKILL after ``stop_timeout_s``
            (called with the process and ``stop_timeout_s``; False when it had to be killed). The
            local launcher's does not wait for Triton's model unload.
    """

    name: str
    command: list[str]
    stop_timeout_s: float
    env: dict[str, str] | None = field(default=None, compare=False)
    restart: RestartPolicy | None = None
    spawn: Callable[[], subprocess.Popen[bytes]] | None = field(default=None, compare=False)
    after_exit: Callable[[subprocess.Popen[bytes]], None] | None = field(default=None, compare=False)
    stop: Callable[[subprocess.Popen[bytes], float], bool] | None = field(default=None, compare=False)


@dataclass
class _Child:
    spec: ChildSpec
    process: subprocess.Popen[bytes] | None
    started_at: float
    backoff: Backoff | None
    restart_at: float = 0.0
    restarts: int = 0


def triton_restart_policy(supervisor: SupervisorSettings) -> RestartPolicy:
    """Back-off bounds of the settings, with the termination-message file."""
    return RestartPolicy(
        initial_s=supervisor.restart_initial_s,
        max_s=max(supervisor.restart_max_s, supervisor.restart_initial_s),
        termination_message_path=supervisor.termination_message_path,
    )


def build_children(triton: TritonSettings, supervisor: SupervisorSettings, repository: Path) -> list[ChildSpec]:
    """Triton (restarted with back-off) then the gateway, in start order (stopped in reverse).

    The model repository is resolved once, before: restarts reuse the same path, so the
    preflight's work and the engine files already on the pod's volume are not fetched again.
    Every tritonserver run puts its python-backend shared memory under one prefix of this
    supervisor's; after each exit its leftover stubs are killed and those regions removed
    (:class:`whisper_build.serving.triton_cleanup.TritonLaunch`).
    """
    launch = TritonLaunch()
    return [
        ChildSpec("tritonserver", [supervisor.tritonserver, *tritonserver_args(triton, repository), *launch.args],
                  supervisor.triton_stop_timeout_s, restart=triton_restart_policy(supervisor),
                  after_exit=launch.clean_up),
        ChildSpec("gateway", list(supervisor.gateway_command), supervisor.gateway_stop_timeout_s),
    ]  # fmt: skip


class Supervisor:
    """Start children in order, watch them, stop them in reverse order.

    Children with a :class:`RestartPolicy` are restarted when they exit. See the module docstring.

    Args:
        children: in start order.
        poll_interval_s: how often exits are checked and the heartbeat is touched.
        heartbeat_file: touched every poll when given.

    * Start: tritonserver first, then the gateway (its ``/ping`` answers 503 until the model answers
      its canary inference, so Kubernetes sends no traffic before that).
    * tritonserver exiting on its own (crash, ``kill -9``, a model repository that fails to load) is
      restarted with exponential back-off, 1 s doubling to 60 s (:class:`whisper_build.serving.backoff.Backoff`;
      back to 1 s after 60 s of uptime). Each exit is one log line, also written to the container's
      termination-message file. The container keeps running, so the pod stays *running but unready*
      (the gateway's ``/ping`` is 503) instead of crash-looping, and the init container (preflight) and
      the model repository it resolved are reused: nothing is fetched again per try.
    * The gateway exiting on its own is a failure: Triton is stopped and the supervisor exits non-zero
      (the child's code, or 1), so Kubernetes restarts the container.
    * SIGTERM/SIGINT: the gateway is stopped FIRST and waited for — uvicorn's graceful shutdown lets
      in-flight requests finish, and those still need Triton — then Triton gets SIGTERM (it finishes
      its own in-flight work, ``--exit-timeout-secs``). A child that outlives its stop timeout is
      killed. Exit code 0 when everything stopped by itself, 1 otherwise.
    * Heartbeat: every poll the supervisor touches ``heartbeat_file``; the gateway's liveness
      endpoint (``/live``) fails when it goes stale, so a hung supervisor restarts the container.

    Settings (``SupervisorSettings``): ``WHISPER_SUPERVISOR_TRITONSERVER`` (binary),
    ``WHISPER_SUPERVISOR_GATEWAY_COMMAND`` (JSON list), stop timeouts, back-off bounds, heartbeat and
    termination-message files, and ``WHISPER_MODEL_REPOSITORY_FILE`` — the file where the preflight
    init container wrote the model repository to serve (``k8s_charts/workload.py``). Triton ports,
    engine and batching come from ``WHISPER_TRITON_*``
    (:class:`whisper_build.serving.triton_model.settings.TritonSettings`).
    """

    def __init__(
        self, children: Sequence[ChildSpec], poll_interval_s: float = 0.2, heartbeat_file: Path | None = None
    ) -> None:
        self._children = list(children)
        self._poll = poll_interval_s
        self._heartbeat = heartbeat_file
        self._stop = threading.Event()
        self._running: list[_Child] = []

    def request_stop(self, signum: int = signal.SIGTERM, _frame: FrameType | None = None) -> None:
        """Signal handler: begin the ordered shutdown (idempotent)."""
        if not self._stop.is_set():
            log.info("received %s: stopping %s", signal.Signals(signum).name,
                     ", then ".join(child.spec.name for child in reversed(self._running)))  # fmt: skip
        self._stop.set()

    def run(self, adopted: Mapping[str, subprocess.Popen[bytes]] | None = None) -> int:
        """Run until a signal or the exit of a child without restart policy; the process exit code.

        Args:
            adopted: already started processes by child name (not started again, but watched,
                restarted and stopped like the others).
        """
        adopted = adopted or {}
        failure: int | None = None
        try:
            for spec in self._children:
                process = adopted.get(spec.name) or self._spawn(spec)
                backoff = None
                if spec.restart is not None:
                    backoff = Backoff(
                        spec.restart.initial_s, spec.restart.max_s, reset_after_s=spec.restart.reset_after_s
                    )
                self._running.append(_Child(spec, process, time.monotonic(), backoff))
            failure = self._watch()
        finally:
            clean = self._shutdown()
        if failure is not None:
            return failure
        return 0 if clean else 1

    @staticmethod
    def _spawn(spec: ChildSpec) -> subprocess.Popen[bytes]:
        log.info("starting %s: %s", spec.name, " ".join(spec.command))
        if spec.spawn is not None:
            return spec.spawn()
        # Own session: a terminal Ctrl-C reaches only the supervisor, which keeps the order.
        return subprocess.Popen(spec.command, env=spec.env, start_new_session=True)

    def _watch(self) -> int | None:
        while not self._stop.wait(self._poll):
            self._beat()
            now = time.monotonic()
            for child in self._running:
                if child.process is None:
                    if now >= child.restart_at and not self._stop.is_set():
                        child.process, child.started_at = self._spawn(child.spec), time.monotonic()
                    continue
                code = child.process.poll()
                if code is None:
                    continue
                if child.spec.after_exit is not None:
                    child.spec.after_exit(child.process)
                if child.spec.restart is None or child.backoff is None:
                    log.error("%s exited unexpectedly with %s; stopping the others", child.spec.name, code)
                    return code if code > 0 else 1
                self._schedule_restart(child, code, now)
        return None

    def _schedule_restart(self, child: _Child, code: int, now: float) -> None:
        assert child.backoff is not None and child.spec.restart is not None
        uptime = now - child.started_at
        delay = child.backoff.next_delay(uptime)
        child.restarts += 1
        child.process, child.restart_at = None, now + delay
        message = (
            f"{child.spec.name} exited with code {code} after {uptime:.0f} s; restart {child.restarts} in {delay:g} s "
            f"(back-off {child.spec.restart.initial_s:g} s doubling to {child.spec.restart.max_s:g} s). Until it "
            "serves again the pod stays unready (gateway /ping 503); its log above says why it stopped"
        )
        log.error("%s", message)
        path = child.spec.restart.termination_message_path
        if path is not None and path.parent.is_dir():
            try:
                path.write_text(message + "\n", encoding="utf-8")
            except OSError as err:
                log.warning("cannot write the termination message to %s: %s", path, err)

    def _beat(self) -> None:
        if self._heartbeat is not None:
            try:
                self._heartbeat.touch()
            except OSError as err:
                log.warning("cannot touch the heartbeat file %s: %s", self._heartbeat, err)

    def _shutdown(self) -> bool:
        """SIGTERM each running child in reverse start order and wait; True when none was killed."""
        clean = True
        for child in reversed(self._running):
            spec, process = child.spec, child.process
            if process is not None and process.poll() is None and spec.stop is not None:
                clean = spec.stop(process, spec.stop_timeout_s) and clean
            elif process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    code = process.wait(timeout=spec.stop_timeout_s)
                    log.info("%s stopped (exit code %s)", spec.name, code)
                except subprocess.TimeoutExpired:
                    log.error("%s did not stop within %.0f s; killing it", spec.name, spec.stop_timeout_s)
                    process.kill()
                    process.wait()
                    clean = False
            if process is not None and spec.after_exit is not None:
                spec.after_exit(process)
        self._running.clear()
        return clean


def main() -> int:
    """Container entrypoint: ``python3 -m whisper_build.serving.supervisor``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s supervisor %(levelname)s %(message)s")
    triton, settings = TritonSettings(), SupervisorSettings()
    try:
        repository = resolve_model_repository(triton, settings)
        refuse_benchmark_mode(triton, repository)
    except (ModelPathMissing, BenchmarkModeRefused) as err:
        log.error("%s", err)
        return 2
    log.info("serving model repository %s (engine %s, model_path %s)",
             repository, triton.engine.engine, triton.engine.model_path or "from the repository")  # fmt: skip
    supervisor = Supervisor(build_children(triton, settings, repository), heartbeat_file=settings.heartbeat_file)
    signal.signal(signal.SIGTERM, supervisor.request_stop)
    signal.signal(signal.SIGINT, supervisor.request_stop)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
