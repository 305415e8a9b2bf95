"""Gateway settings, read from ``WHISPER_GATEWAY_*`` environment variables (pydantic-settings).

Fields are grouped by concern (server, admission, requests, uploads, health, live sessions, API keys),
the way ``TritonSettings`` nests its engine and batching; each group still reads the flat variable
``WHISPER_GATEWAY_<FIELD>`` of each of its fields (:mod:`whisper_build.serving.flat_settings`), so
the names in docs/gateway.md's table are unchanged.
Docs: docs/gateway.md, "Settings".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from settings import endpoint_auth, throughput
from whisper_build.serving.flat_settings import route_flat_names
from whisper_build.serving.prometheus_text import require_http_url
from whisper_build.serving.transcription.windows import CUT_SEARCH_SECONDS, SILENCE_RMS, WINDOW_SECONDS, WindowPlan

ENV_PREFIX = "WHISPER_GATEWAY_"
_FLAT = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")


class ServerSettings(BaseSettings):
    """The HTTP server and its worker processes: bind address, ports, shutdown."""

    model_config = _FLAT

    host: str = Field("127.0.0.1", description="address the HTTP server binds")
    port: int = Field(8080, ge=0, le=65535, description="HTTP port (transcription traffic)")
    metrics_port: int = Field(
        8081, ge=0, le=65535, description="port of /metrics, off the traffic port (0 = any free port)"
    )
    metrics_on_traffic_port: bool = Field(
        False,
        description="serve /metrics on the traffic port instead (HyperPod inference operator workers: the "
        "operator declares one port, and its SageMaker endpoint forwards only /invocations and /ping)",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="gateway processes sharing the port (whisper_build.serving.gateway.workers); capacity, "
        "queue_size and the audio budget are split between them, so the pod's totals stay as set",
    )
    log_level: str = Field("info", description="uvicorn log level")
    keep_alive_seconds: int = Field(
        5, ge=1, description="uvicorn timeout_keep_alive: idle connections close after this (> the LB idle timeout)"
    )
    drain_seconds: float = Field(
        0.0, ge=0, description="after SIGTERM, keep answering (ping 503) this long before closing"
    )
    graceful_shutdown_seconds: float = Field(
        120.0, gt=0, description="longest wait for in-flight requests after SIGTERM"
    )
    page: bool = Field(
        True,
        description="serve the try-it page at GET / (live and file transcription in a browser; "
        'docs/gateway.md, "The page"); false = 404',
    )


class AdmissionSettings(BaseSettings):
    """How many requests run and wait at once (:class:`~whisper_build.serving.transcription.admission.AdmissionController`)."""

    model_config = _FLAT

    capacity: int = Field(8, ge=1, description="requests processed at once (sized per GPU type); the rest wait")
    queue_size: int = Field(64, ge=0, description="requests allowed to wait for a slot; beyond it -> 429")
    audio_budget_seconds: float | None = Field(
        None,
        gt=0,
        description="seconds of audio transcribed at once (admission budget beside capacity); "
        "default 2 × max_audio_seconds, so two longest files run together and short ones beside them",
    )
    queue_timeout_seconds: float = Field(30.0, gt=0, description="longest wait for a slot before 503")


class RequestSettings(BaseSettings):
    """One transcription request: audio bounds, timeouts and its windows (the core's ``ServiceSettings``)."""

    model_config = _FLAT

    max_audio_seconds: float = Field(7200.0, gt=0, description="longest audio accepted, seconds")
    min_audio_seconds: float = Field(
        0.1,
        ge=0,
        description="shorter audio is refused with 400 audio_too_short before the model sees it (OpenAI's minimum), "
        "seconds; 0 = no minimum",
    )
    request_timeout_seconds: float = Field(300.0, gt=0, description="longest Triton work per request before 504")
    diarization_timeout_seconds: float = Field(
        600.0, gt=0, description="longest wait for the speaker model's turns of one file before 504"
    )
    predicted_rtf: float = Field(
        default_factory=lambda: throughput.throughput_at(throughput.CPU_DEVICE, "ctranslate2", "tiny.en", 16).rtf,
        gt=0,
        description="compute seconds per audio second a long request gets on this pod (settings.throughput for "
        "its GPU, engine and model at the window group's batch; the charts set it; default: the CPU machine's "
        "loaded-run figure, 0.168): a synchronous request whose declared audio × this exceeds "
        "request_timeout_seconds is refused up front (413 audio_too_long); stream=true is exempt",
    )
    window_seconds: float = Field(
        WINDOW_SECONDS, gt=0, le=30.0, description="longest audio window per Triton batch item (Whisper: 30 s)"
    )
    window_group_size: int = Field(
        16,
        ge=1,
        description="non-silent windows sent to Triton per call (order kept); with the next group decoded "
        "meanwhile, a request holds at most two groups (16 × 30 s × 16 kHz float32 = 31 MB each)",
    )
    stream_window_group_size: int = Field(
        1, ge=1, description="non-silent windows per Triton call for stream=true (1: a delta per 30 s of audio)"
    )
    stream_group_timeout_seconds: float = Field(
        120.0, gt=0, description="longest Triton work per window group of a stream (no whole-stream limit)"
    )
    cut_search_seconds: float = Field(
        CUT_SEARCH_SECONDS, ge=0, description="how far before a window's end a cut may move to find silence"
    )
    silence_rms: float = Field(
        SILENCE_RMS, ge=0, description="windows whose 25 ms frames all stay below this RMS are not decoded"
    )

    def window_plan(self) -> WindowPlan:
        """The window pipeline's plan of these settings (synchronous routes; the stream narrows it)."""
        return WindowPlan(
            window_seconds=self.window_seconds,
            cut_search_seconds=self.cut_search_seconds,
            silence_rms=self.silence_rms,
            group_size=self.window_group_size,
            max_audio_seconds=self.max_audio_seconds,
            call_timeout_seconds=self.request_timeout_seconds,
            min_audio_seconds=self.min_audio_seconds,
        )


class UploadSettings(BaseSettings):
    """Request bodies: their size and how slowly a client may send them (body_limit.py, client_timeouts.py)."""

    model_config = _FLAT

    max_body_bytes: int = Field(100 * 1024 * 1024, gt=0, description="largest request body accepted")
    header_timeout_seconds: float = Field(
        20.0, gt=0, description="a request's headers must be complete this long after its first byte (else 408)"
    )
    body_timeout_seconds: float = Field(
        20.0, gt=0, description="an upload must finish within this plus 1 s per min_upload_bytes_per_second (else 408)"
    )
    min_upload_bytes_per_second: float = Field(
        500.0,
        gt=0,
        description="slowest upload rate accepted past body_timeout_seconds (Apache mod_reqtimeout MinRate)",
    )


class ModelHealthSettings(BaseSettings):
    """The canary and the rules of ``/ping`` and ``/live`` (the core's ``HealthSettings``; routes/liveness.py)."""

    model_config = _FLAT

    canary_interval_seconds: float = Field(
        2.0, gt=0, le=5.0, description="pause between canary inferences (health.py); /ping follows them"
    )
    canary_timeout_seconds: float = Field(5.0, gt=0, description="longest canary inference before it counts as failed")
    unhealthy_after_failures: int = Field(
        2, ge=1, description="consecutive failed inferences (canary or request) that make /ping 503"
    )
    stale_after_seconds: float = Field(
        8.0, gt=0, description="/ping 503 when no inference succeeded for this long (a hung model server)"
    )
    hang_after_seconds: float = Field(
        60.0,
        gt=0,
        description="while another client's requests wait in Triton, /ping 503 when Triton completes no execution "
        "for this long (a hung model); longer than the longest batch execution",
    )
    reload_after_failures: int = Field(
        3, ge=1, description="consecutive failed inferences after which the model is loaded again (back-off 1-60 s)"
    )
    supervisor_heartbeat_file: Path | None = Field(
        None, description="file the in-pod supervisor touches; /live fails when it is older than the limit below"
    )
    supervisor_heartbeat_max_age_seconds: float = Field(30.0, gt=0, description="largest heartbeat age /live accepts")

    @model_validator(mode="after")
    def _hang_bound_covers_staleness(self) -> ModelHealthSettings:
        if self.hang_after_seconds < self.stale_after_seconds:
            raise ValueError(
                f"hang_after_seconds ({self.hang_after_seconds:g}) must not be less than stale_after_seconds "
                f"({self.stale_after_seconds:g}): it is the longer bound for a model busy with another client's work"
            )
        return self

    @model_validator(mode="after")
    def _staleness_covers_a_canary(self) -> ModelHealthSettings:
        if self.stale_after_seconds <= self.canary_interval_seconds + self.canary_timeout_seconds:
            raise ValueError(
                f"stale_after_seconds ({self.stale_after_seconds:g}) must be greater than canary_interval_seconds "
                f"({self.canary_interval_seconds:g}) + canary_timeout_seconds ({self.canary_timeout_seconds:g}): "
                "a healthy but slow canary would turn /ping 503"
            )
        return self


class LiveSessionSettings(BaseSettings):
    """Live transcription sessions on ``/v1/realtime`` (docs/gateway.md, "Live transcription")."""

    model_config = _FLAT

    realtime_max_sessions: int = Field(
        64,
        ge=0,
        description="open live transcription sessions per pod (split between workers); beyond it -> close 1013",
    )
    realtime_update_seconds: float = Field(1.0, gt=0, description="turn audio between two live updates, seconds")
    realtime_call_timeout_seconds: float = Field(
        30.0, gt=0, description="deadline of one live model call (a final decode past it is retried once)"
    )
    realtime_max_event_bytes: int = Field(
        8 * 1024 * 1024,
        gt=0,
        le=16 * 1024 * 1024,
        description="largest live client event, bytes (the WebSocket message limit); larger -> an error event, "
        "the session stays open",
    )
    realtime_idle_audio_seconds: float = Field(
        300.0, gt=0, description="a live session receiving no audio this long is closed"
    )
    realtime_load_test_confirmation: bool = Field(
        False,
        description="LOAD TESTS ONLY (random weights): each live update confirms its first two new words "
        "instead of LocalAgreement-2; never on for real traffic, no client can select it",
    )


class ApiKeySettings(BaseSettings):
    """Where the API keys come from (auth.py): a local list or a Secrets Manager secret, never both."""

    model_config = _FLAT

    api_keys: SecretStr | None = Field(
        None, description="comma-separated API keys (local runs); unset with no secret = authentication off"
    )
    api_keys_secret: str | None = Field(
        None, description="Secrets Manager secret ARN/name holding the API keys as JSON (deployed pods)"
    )
    api_keys_refresh_seconds: float = Field(
        float(endpoint_auth.REFRESH_SECONDS),
        gt=0,
        description="how often the API keys secret is re-read (rotation without restart)",
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> ApiKeySettings:
        if self.api_keys is not None and self.api_keys_secret is not None:
            raise ValueError("set WHISPER_GATEWAY_API_KEYS (local) or WHISPER_GATEWAY_API_KEYS_SECRET, not both")
        if self.api_keys is not None and not self.api_keys.get_secret_value().strip(", "):
            raise ValueError("WHISPER_GATEWAY_API_KEYS is set but holds no key (comma-separated keys)")
        return self


GROUPS: dict[str, type[BaseSettings]] = {
    "server": ServerSettings,
    "admission": AdmissionSettings,
    "requests": RequestSettings,
    "uploads": UploadSettings,
    "health": ModelHealthSettings,
    "live": LiveSessionSettings,
    "auth": ApiKeySettings,
}
"""The groups of :class:`GatewaySettings`, by attribute; each field of each is ``WHISPER_GATEWAY_<FIELD>``."""


class GatewaySettings(BaseSettings):
    """Everything the gateway needs: the served model here, the rest in one group per concern.

    Each field, top-level or in a group, is ``WHISPER_GATEWAY_<FIELD>`` in the environment (:data:`GROUPS`).
    Ports follow docs/contracts.md §6 (gateway HTTP 8080, Triton gRPC 8001).
    """

    model_config = _FLAT

    triton_url: str = Field("127.0.0.1:8001", description="Triton gRPC endpoint host:port")
    triton_metrics_url: str = Field(
        "",
        description="Triton's Prometheus metrics, http://host:port/metrics of the Triton at triton_url (the charts "
        "and make serve set it), read when a canary times out to tell another client's work from a hang "
        "(triton_load.py); empty = not read: such a canary counts as failed",
    )
    model_name: str = Field("whisper", description="Triton model to call (contract §5); the OpenAI model id")
    model_aliases: list[str] = Field(
        default_factory=lambda: ["whisper-1"],
        description="other OpenAI `model` values accepted for the served model (JSON list), e.g. OpenAI's whisper-1",
    )
    subtitle_line_chars: int = Field(
        0, ge=0, description="SRT/VTT cue lines wrap at this many characters (0 = one line per cue)"
    )
    retry_after_seconds: int = Field(1, ge=0, description="Retry-After header on 429/503")
    server: ServerSettings = Field(default_factory=ServerSettings)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)
    requests: RequestSettings = Field(default_factory=RequestSettings)
    uploads: UploadSettings = Field(default_factory=UploadSettings)
    health: ModelHealthSettings = Field(default_factory=ModelHealthSettings)
    live: LiveSessionSettings = Field(default_factory=LiveSessionSettings)
    auth: ApiKeySettings = Field(default_factory=ApiKeySettings)

    @model_validator(mode="before")
    @classmethod
    def _flat_names_to_groups(cls, data: Any) -> Any:
        """``capacity=2`` means ``admission.capacity``, as ``WHISPER_GATEWAY_CAPACITY=2`` does."""
        return route_flat_names(data, GROUPS)

    @field_validator("triton_metrics_url")
    @classmethod
    def _http_metrics_url(cls, url: str) -> str:
        return require_http_url(url, "triton_metrics_url (or empty)") if url else url

    @model_validator(mode="after")
    def _a_slot_per_worker(self) -> GatewaySettings:
        if self.server.workers > self.admission.capacity:
            raise ValueError(
                f"workers ({self.server.workers}) must not exceed capacity ({self.admission.capacity}): each worker "
                "process admits at least one request (WHISPER_GATEWAY_WORKERS <= WHISPER_GATEWAY_CAPACITY)"
            )
        return self

    @property
    def served_ids(self) -> list[str]:
        """Model ids this gateway answers to: the served model name, then its aliases."""
        return [self.model_name, *(a for a in self.model_aliases if a != self.model_name)]

    @property
    def upload_slots(self) -> int:
        """Bodies received at once: 4 × (capacity + queue_size), beside the requests they become."""
        return 4 * (self.admission.capacity + self.admission.queue_size)

    @property
    def buffered_bytes_budget(self) -> int:
        """Bytes all bodies may hold together: (capacity + queue_size) full-size bodies."""
        return (self.admission.capacity + self.admission.queue_size) * self.uploads.max_body_bytes

    @property
    def effective_audio_budget_seconds(self) -> float:
        """``audio_budget_seconds``, or 2 × ``max_audio_seconds`` when unset."""
        budget = self.admission.audio_budget_seconds
        return budget if budget is not None else 2 * self.requests.max_audio_seconds
