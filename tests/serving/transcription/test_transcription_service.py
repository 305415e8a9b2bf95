"""The transcription core's service, wired as a front end other than the HTTP gateway would: no gateway module.

Admission, the in-flight gauge, the predicted-timeout refusal, failure accounting (which failures count
against the model's health) and the success count, with the core's own exceptions (never HTTP answers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import pytest
import speech_samples as samples
from fake_backend import FakeBackend

from whisper_build.serving.audio import AudioTooLongError
from whisper_build.serving.prompt import parse_prompt
from whisper_build.serving.transcription.admission import AdmissionController, Rejected
from whisper_build.serving.transcription.backend import BackendError, BackendRejected, BackendTimeout
from whisper_build.serving.transcription.health import ModelHealth
from whisper_build.serving.transcription.service import SERVICE_ERRORS, PredictedTimeout, TranscriptionService
from whisper_build.serving.transcription.windows import Transcriber, WindowPlan, WindowRequest


@dataclass
class Settings:
    """A front end's own settings: only the fields the core's protocols name."""

    request_timeout_seconds: float = 60.0
    max_audio_seconds: float = 120.0
    predicted_rtf: float = 0.1
    stream_window_group_size: int = 1
    stream_group_timeout_seconds: float = 30.0
    model_name: str = "whisper"
    canary_interval_seconds: float = 2.0
    canary_timeout_seconds: float = 5.0
    hang_after_seconds: float = 60.0
    stale_after_seconds: float = 8.0
    unhealthy_after_failures: int = 2
    reload_after_failures: int = 3


@dataclass
class Metrics:
    """Records every call of the core's metrics interface."""

    inflight: int = 0
    most_inflight: int = 0
    counted: list[tuple[str, float, list[float]]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    healthy: list[bool] = field(default_factory=list)

    def request_started(self) -> None:
        self.inflight += 1
        self.most_inflight = max(self.most_inflight, self.inflight)

    def request_finished(self) -> None:
        self.inflight -= 1

    def transcribed(self, route: str, audio_seconds: float, temperatures: Sequence[float]) -> None:
        self.counted.append((route, audio_seconds, list(temperatures)))

    def model_health(self, healthy: bool, busy_with_others: bool) -> None:
        self.healthy.append(healthy)

    def backend_failed(self, source: str) -> None:
        self.failures.append(source)

    def speaker_model_failed(self, failed: bool) -> None:
        pass


def _service(settings: Settings | None = None) -> tuple[TranscriptionService, FakeBackend, Metrics]:
    settings = settings or Settings()
    backend, metrics = FakeBackend(), Metrics()
    admission = AdmissionController(capacity=1, queue_size=0, queue_timeout=1.0, audio_budget_seconds=240.0)
    health = ModelHealth(
        settings, metrics, model_name=settings.model_name, request_timeout_seconds=settings.request_timeout_seconds
    )
    plan = WindowPlan(30.0, 0.0, 0.0, 16, settings.max_audio_seconds, settings.request_timeout_seconds)
    return TranscriptionService(settings, metrics, admission, health, Transcriber(backend, plan)), backend, metrics


def _reader(seconds: float) -> Callable[[], Awaitable[bytes]]:
    audio = samples.encode(samples.tone(seconds, 16000), 16000, "wav_s16")

    async def read() -> bytes:
        return audio

    return read


REQUEST = WindowRequest(parse_prompt("", None))


def test_a_front_end_without_the_gateway_transcribes_and_counts() -> None:
    # GIVEN the service over a fake model, with a front end's own settings and metrics
    service, backend, metrics = _service()
    # WHEN 40 s of audio are transcribed whole on route "live"
    result = asyncio.run(service.transcribe("live", _reader(40.0), REQUEST))
    # THEN two windows were decoded, counted once, the slot given back and the model's success recorded
    assert result.text == "w0:30.0 w1:10.0" and len(backend.calls) == 1
    assert metrics.counted == [("live", pytest.approx(40.0), [0.0, 0.0])]
    assert metrics.inflight == 0 and metrics.most_inflight == 1 and service.admission.running == 0
    assert service.health.last_success is not None and metrics.healthy[-1] is True


@pytest.mark.parametrize(
    ("error", "counts"),
    [
        (BackendError("stub died"), True),  # the model server's fault
        (BackendTimeout("took too long"), False),  # may be the request's own length
        (BackendRejected("language 'xx' is not supported"), False),  # the request's own fault
    ],
    ids=["backend-error", "timeout", "refusal"],
)
def test_only_the_model_servers_own_failures_count_against_its_health(error: BackendError, counts: bool) -> None:
    # GIVEN a model that fails every call with ``error``
    service, backend, metrics = _service()
    backend.error = error
    # WHEN a request is transcribed THEN the core's own exception leaves, unchanged
    with pytest.raises(type(error)) as raised:
        asyncio.run(service.transcribe("live", _reader(5.0), REQUEST))
    assert raised.value is error and isinstance(raised.value, SERVICE_ERRORS)
    # ... it counts against the model's health only when the model server is at fault
    assert metrics.failures == (["request"] if counts else [])
    assert service.health.consecutive_failures == int(counts)
    assert metrics.inflight == 0 and service.admission.running == 0 and metrics.counted == []


def test_audio_predicted_to_outlast_the_timeout_is_refused_before_admission_unless_streamed() -> None:
    # GIVEN a request timeout of 10 s at a conservative RTF of 0.5
    service, backend, metrics = _service(Settings(request_timeout_seconds=10.0, predicted_rtf=0.5))

    async def run(predict: bool) -> None:
        async with service.admitted(_reader(30.0), predict_timeout=predict):
            assert service.admission.running == 1

    # WHEN 30 s of audio arrive (predicted 15 s) THEN PredictedTimeout names the figures; nothing was admitted
    with pytest.raises(PredictedTimeout) as raised:
        asyncio.run(run(predict=True))
    assert (raised.value.audio_seconds, raised.value.predicted_seconds, raised.value.timeout_seconds) == (30, 15, 10)
    assert service.admission.running == 0 and metrics.inflight == 0 and backend.calls == []
    # ... while results sent as they are made are exempt
    asyncio.run(run(predict=False))
    assert service.admission.running == 0 and metrics.most_inflight == 1


def test_admission_and_audio_errors_leave_as_the_cores_exceptions() -> None:
    # GIVEN audio over the limit, then a draining worker
    service, _, metrics = _service(Settings(max_audio_seconds=20.0))
    with pytest.raises(AudioTooLongError):
        asyncio.run(service.transcribe("live", _reader(25.0), REQUEST))
    service.admission.start_drain()
    with pytest.raises(Rejected) as raised:
        asyncio.run(service.transcribe("live", _reader(5.0), REQUEST))
    # THEN neither counted against the model, and the in-flight gauge came back to 0 each time
    assert raised.value.reason == "draining" and metrics.failures == [] and metrics.inflight == 0


def test_the_stream_transcriber_narrows_the_groups_and_their_deadline() -> None:
    service, _, _ = _service(Settings(stream_window_group_size=2, stream_group_timeout_seconds=7.0))
    plan = service.stream_transcriber().plan
    assert (plan.group_size, plan.call_timeout_seconds) == (2, 7.0)
    assert service.transcriber.plan.group_size == 16  # the whole-request pipeline is unchanged
