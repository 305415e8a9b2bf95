"""The supervisor's settings and its start-up checks: which model repository to serve, and what it refuses.

:class:`SupervisorSettings` (``WHISPER_SUPERVISOR_*``, ``WHISPER_MODEL_REPOSITORY_FILE``),
:func:`resolve_model_repository` and :func:`refuse_benchmark_mode`, used by
:mod:`whisper_build.serving.supervisor` before it starts any child. Docs: docs/serving.md.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from whisper_build.serving.triton_model.repository import MODEL_NAME, render_model_repository
from whisper_build.serving.triton_model.settings import TritonSettings


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
        restart_initial_s: first delay before restarting an exited tritonserver, seconds.
        restart_max_s: longest delay between restarts, seconds.
        heartbeat_file: touched every poll (the gateway's ``/live`` reads its age); none when unset.
        termination_message_path: each tritonserver exit is written here too (Kubernetes shows
            the file's content as the container's termination message); skipped when its folder
            does not exist.
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
    restart_initial_s: float = Field(1.0, gt=0)
    restart_max_s: float = Field(60.0, gt=0)
    heartbeat_file: Path | None = None
    termination_message_path: Path = Path("/dev/termination-log")


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
    """The Triton model repository to serve; the first match wins.

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
    return render_model_repository(
        supervisor.rendered_repository_dir, triton.engine, triton.batching, speaker=triton.speaker
    )
