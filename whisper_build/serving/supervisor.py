"""Entrypoint of the serving image: runs tritonserver and the gateway, stops them in order.

* Start: tritonserver first, then the gateway (its ``/ping`` answers 503 until Triton and the
  model are ready, so Kubernetes sends no traffic before that).
* SIGTERM/SIGINT: the gateway is stopped FIRST and waited for — uvicorn's graceful shutdown lets
  in-flight requests finish, and those still need Triton — then Triton gets SIGTERM (it finishes
  its own in-flight work, ``--exit-timeout-secs``). A child that outlives its stop timeout is
  killed. Exit code 0 when everything stopped by itself, 1 otherwise.
* A child that exits on its own is a failure: the other one is stopped the same way and the
  supervisor exits non-zero (the child's code, or 1), so Kubernetes restarts the container.

Settings (``SupervisorSettings``): ``WHISPER_SUPERVISOR_TRITONSERVER`` (binary),
``WHISPER_SUPERVISOR_GATEWAY_COMMAND`` (JSON list), stop timeouts, and
``WHISPER_MODEL_REPOSITORY_FILE`` — the file where the preflight init container wrote the model
repository to serve (``k8s_charts/workload.py``). Triton ports, engine and batching come from
``WHISPER_TRITON_*`` (:class:`whisper_build.serving.triton_model.settings.TritonSettings`).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from whisper_build.serving.triton_model.repository import MODEL_NAME, render_model_repository
from whisper_build.serving.triton_model.settings import TritonSettings, tritonserver_args

__all__ = [
    "ChildSpec",
    "BenchmarkModeRefused",
    "ModelPathMissing",
    "Supervisor",
    "SupervisorSettings",
    "build_children",
    "main",
    "resolve_model_repository",
]

log = logging.getLogger("whisper.supervisor")


class SupervisorSettings(BaseSettings):
    """What the supervisor runs; environment prefix ``WHISPER_SUPERVISOR_``.

    Attributes:
        tritonserver: the Triton binary (NGC images: ``/opt/tritonserver/bin/tritonserver``).
        gateway_command: argv of the gateway (``python3 -m whisper_build.serving.gateway``; it reads
            ``WHISPER_GATEWAY_*``).
        model_repository_file: file holding the model repository path (``WHISPER_MODEL_REPOSITORY_FILE``).
        gateway_stop_timeout_s: wait for the gateway after SIGTERM; must exceed its graceful
            shutdown (drain + longest request), and stay below the pod's termination grace period.
        triton_stop_timeout_s: wait for Triton after SIGTERM.
        rendered_repository_dir: where a repository is rendered when none is given.
    """

    model_config = SettingsConfigDict(env_prefix="WHISPER_SUPERVISOR_", extra="ignore", populate_by_name=True)

    tritonserver: str = "/opt/tritonserver/bin/tritonserver"
    gateway_command: list[str] = ["python3", "-m", "whisper_build.serving.gateway"]
    model_repository_file: Path | None = Field(
        None, validation_alias=AliasChoices("WHISPER_MODEL_REPOSITORY_FILE", "model_repository_file")
    )
    gateway_stop_timeout_s: float = Field(600.0, gt=0)
    triton_stop_timeout_s: float = Field(60.0, gt=0)
    rendered_repository_dir: Path = Path("/tmp/whisper-model-repository")


@dataclass(frozen=True)
class ChildSpec:
    """One supervised process: name (for logs), argv, seconds to wait after SIGTERM."""

    name: str
    command: list[str]
    stop_timeout_s: float
    env: dict[str, str] | None = field(default=None, compare=False)


class ModelPathMissing(ValueError):
    """A repository would be rendered without ``WHISPER_TRITON_ENGINE__MODEL_PATH``.

    The engine's empty-path default (the bundled whisper tiny.en) is for the local launcher and
    tests only; the serving image refuses it rather than serve the wrong model silently.
    """


class BenchmarkModeRefused(ValueError):
    """The engine would run in the benchmark-only random-weight, fixed-length mode.

    That is ``random_weights_fixed_tokens`` > 0, which the serving image never serves.
    """


def refuse_benchmark_mode(triton: TritonSettings, repository: Path) -> None:
    """Refuse the benchmark-only random-weight mode.

    Raises when ``WHISPER_TRITON_ENGINE__RANDOM_WEIGHTS_FIXED_TOKENS`` or the repository's
    ``whisper/config.pbtxt`` parameters ask for random weights.

    Raises:
        BenchmarkModeRefused: naming where the setting came from.
    """
    if triton.engine.random_weights_fixed_tokens:
        raise BenchmarkModeRefused(
            "WHISPER_TRITON_ENGINE__RANDOM_WEIGHTS_FIXED_TOKENS is set: random weights with a fixed decode "
            "length are for benchmarks only; the serving image refuses them. Unset it."
        )
    config = repository / MODEL_NAME / "config.pbtxt"
    if config.is_file():
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2

        parsed = text_format.Parse(config.read_text(), model_config_pb2.ModelConfig())
        parameter = parsed.parameters.get("random_weights_fixed_tokens")
        value = parameter.string_value.strip() if parameter is not None else ""
        if value not in ("", "0"):
            raise BenchmarkModeRefused(
                f"{config}: parameter random_weights_fixed_tokens={value} (random weights, benchmarks only); "
                "the serving image refuses it"
            )


def resolve_model_repository(triton: TritonSettings, supervisor: SupervisorSettings) -> Path:
    """The Triton model repository to serve, first match wins:

    1. ``WHISPER_TRITON_MODEL_REPOSITORY``;
    2. the path written by the preflight into ``WHISPER_MODEL_REPOSITORY_FILE`` (non-empty);
    3. a repository rendered from ``WHISPER_TRITON_ENGINE__*`` / ``BATCHING__*`` (the preflight
       writes an empty path for the ctranslate2 fallback; the charts then set
       ``WHISPER_TRITON_ENGINE__MODEL_PATH`` to the mounted CTranslate2 conversion).

    Raises:
        ModelPathMissing: case 3 with an empty ``WHISPER_TRITON_ENGINE__MODEL_PATH``.
    """
    if triton.model_repository:
        return triton.model_repository
    file = supervisor.model_repository_file
    if file is not None and file.is_file() and (written := file.read_text(encoding="utf-8").strip()):
        return Path(written)
    if not triton.engine.model_path:
        raise ModelPathMissing(
            "no model to serve: WHISPER_TRITON_MODEL_REPOSITORY is unset, the preflight wrote no repository"
            f" to {file}, and WHISPER_TRITON_ENGINE__MODEL_PATH is empty; the serving image does not fall"
            " back to the bundled tiny.en. Set WHISPER_TRITON_ENGINE__MODEL_PATH to the CTranslate2 model"
            " folder (the charts set /models/ctranslate2 for serving_engine: ctranslate2)"
        )
    return render_model_repository(supervisor.rendered_repository_dir, triton.engine, triton.batching)


def build_children(triton: TritonSettings, supervisor: SupervisorSettings, repository: Path) -> list[ChildSpec]:
    """Triton then the gateway, in start order (stopped in reverse)."""
    return [
        ChildSpec("tritonserver", [supervisor.tritonserver, *tritonserver_args(triton, repository)],
                  supervisor.triton_stop_timeout_s),
        ChildSpec("gateway", list(supervisor.gateway_command), supervisor.gateway_stop_timeout_s),
    ]  # fmt: skip


class Supervisor:
    """Start children in order, watch them, stop them in reverse order. See the module docstring."""

    def __init__(self, children: Sequence[ChildSpec], poll_interval_s: float = 0.2) -> None:
        self._children = list(children)
        self._poll = poll_interval_s
        self._stop = threading.Event()
        self._running: list[tuple[ChildSpec, subprocess.Popen[bytes]]] = []

    def request_stop(self, signum: int = signal.SIGTERM, _frame: FrameType | None = None) -> None:
        """Signal handler: begin the ordered shutdown (idempotent)."""
        if not self._stop.is_set():
            log.info("received %s: stopping %s", signal.Signals(signum).name,
                     ", then ".join(spec.name for spec, _ in reversed(self._running)))  # fmt: skip
        self._stop.set()

    def run(self) -> int:
        """Run until a signal or a child exit; the process exit code (see module docstring)."""
        failure: int | None = None
        try:
            for spec in self._children:
                log.info("starting %s: %s", spec.name, " ".join(spec.command))
                # Own session: a terminal Ctrl-C reaches only the supervisor, which keeps the order.
                process = subprocess.Popen(spec.command, env=spec.env, start_new_session=True)
                self._running.append((spec, process))
            failure = self._watch()
        finally:
            clean = self._shutdown()
        if failure is not None:
            return failure
        return 0 if clean else 1

    def _watch(self) -> int | None:
        while not self._stop.wait(self._poll):
            for spec, process in self._running:
                code = process.poll()
                if code is not None:
                    log.error("%s exited unexpectedly with %s; stopping the others", spec.name, code)
                    return code if code > 0 else 1
        return None

    def _shutdown(self) -> bool:
        """SIGTERM each running child in reverse start order and wait; True when none was killed."""
        clean = True
        for spec, process in reversed(self._running):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    code = process.wait(timeout=spec.stop_timeout_s)
                    log.info("%s stopped (exit code %s)", spec.name, code)
                except subprocess.TimeoutExpired:
                    log.error("%s did not stop within %.0f s; killing it", spec.name, spec.stop_timeout_s)
                    process.kill()
                    process.wait()
                    clean = False
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
    supervisor = Supervisor(build_children(triton, settings, repository))
    signal.signal(signal.SIGTERM, supervisor.request_stop)
    signal.signal(signal.SIGINT, supervisor.request_stop)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
