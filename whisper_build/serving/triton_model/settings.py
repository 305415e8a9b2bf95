"""Settings of the Triton server that serves the ``whisper`` model (local launcher and image).

Environment variables use the prefix ``WHISPER_TRITON_``; nested fields use ``__``:

| setting | environment variable | default |
|---|---|---|
| bind address (HTTP, gRPC) | ``WHISPER_TRITON_HOST`` | ``127.0.0.1`` |
| bind address of the metrics port | ``WHISPER_TRITON_METRICS_HOST`` | the bind address above |
| HTTP / gRPC / metrics ports | ``WHISPER_TRITON_HTTP_PORT`` / ``_GRPC_PORT`` / ``_METRICS_PORT`` | 8000 / 8001 / 8002 (docs/contracts.md §6) |
| model repository | ``WHISPER_TRITON_MODEL_REPOSITORY`` | empty: render one into a temporary directory |
| engine | ``WHISPER_TRITON_ENGINE__ENGINE`` | ``ctranslate2`` |
| model / engine directory | ``WHISPER_TRITON_ENGINE__MODEL_PATH`` | bundled tiny.en (ctranslate2) |
| any :class:`EngineParams` field | ``WHISPER_TRITON_ENGINE__<FIELD>`` | see ``EngineParams`` |
| any :class:`BatchingConfig` / :class:`SpeakerConfig` field | ``WHISPER_TRITON_BATCHING__<FIELD>`` / ``_SPEAKER__<FIELD>`` | see the class |
| graceful stop timeout | ``WHISPER_TRITON_EXIT_TIMEOUT_S`` | 30 |
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from whisper_build.serving import contract
from whisper_build.serving.engines.params import EngineParams
from whisper_build.serving.triton_model.repository import MODEL_NAME, BatchingConfig, SpeakerConfig

__all__ = ["TritonSettings", "tritonserver_args"]


class TritonSettings(BaseSettings):
    """Where Triton listens and what it serves. See the module docstring for the variables."""

    model_config = SettingsConfigDict(env_prefix="WHISPER_TRITON_", env_nested_delimiter="__", extra="forbid")

    host: str = "127.0.0.1"
    metrics_host: str | None = Field(
        None, description="bind address of the metrics port (the pod IP for the scraper); default: host"
    )
    http_port: int = Field(8000, ge=0, le=65535)
    grpc_port: int = Field(8001, ge=0, le=65535)
    metrics_port: int = Field(8002, ge=0, le=65535)
    model_repository: Path | None = None
    engine: EngineParams = EngineParams()
    batching: BatchingConfig = BatchingConfig()
    speaker: SpeakerConfig = SpeakerConfig()
    exit_timeout_s: int = Field(30, ge=1)
    log_verbose: int = Field(0, ge=0)

    @property
    def grpc_url(self) -> str:
        """``host:port`` for ``tritonclient.grpc``."""
        return f"{self.host}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        """``http://host:port`` of the KServe v2 HTTP endpoint."""
        return f"http://{self.host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        """``http://host:port/metrics`` (Prometheus text)."""
        return f"http://{self.metrics_bind_host}:{self.metrics_port}/metrics"

    @property
    def metrics_bind_host(self) -> str:
        """Address the metrics port binds: ``metrics_host``, else ``host``."""
        return self.metrics_host or self.host


def tritonserver_args(settings: TritonSettings, model_repository: Path) -> list[str]:
    """Command-line flags (without the binary) for ``tritonserver`` with these settings.

    Latency summaries are on (``--metrics-config summary_latencies=true``: Triton 2.51 serves
    ``nv_inference_*_summary_us`` quantiles); the model repository is loaded once, not polled.
    Model control is ``explicit`` with ``--load-model=whisper``: the model loads at start as before
    (a load failure still ends the server, which the supervisor restarts with back-off), and the
    gateway can load it again through the repository API when its python stub died
    (``whisper_build.serving.transcription.health``). That API also lets any client of Triton's ports
    unload the model, so those ports must stay private to the pod.
    """
    host = settings.host
    return [
        f"--model-repository={model_repository}",
        f"--http-address={host}", f"--http-port={settings.http_port}",
        f"--grpc-address={host}", f"--grpc-port={settings.grpc_port}",
        f"--metrics-address={settings.metrics_bind_host}", f"--metrics-port={settings.metrics_port}",
        "--allow-metrics=true",
        "--metrics-config=summary_latencies=true",
        f"--exit-timeout-secs={settings.exit_timeout_s}",
        f"--log-verbose={settings.log_verbose}",
        "--strict-readiness=true",
        "--model-control-mode=explicit", f"--load-model={MODEL_NAME}",
        *([f"--load-model={contract.SPEAKER_MODEL}"] if settings.speaker.enabled else []),
    ]  # fmt: skip
