"""Integration: real tritonserver + the ``whisper`` python-backend model + CPU tiny.en, fed real
speech synthesized with espeak-ng at test time, over the gateway's client (``stream_request``: one gRPC
stream per request, the model is decoupled)."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import speech_samples
from fixtures_triton import cpu_triton_settings
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.grpc import InferInput
from tritonclient.grpc.aio import InferenceServerClient
from tritonclient.utils import InferenceServerException

from whisper_build.serving import contract
from whisper_build.serving.transcription.triton import stream_request
from whisper_build.serving.triton_model.repository import BatchingConfig
from whisper_build.workstation.local_triton import LocalTriton

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not speech_samples.speech_tools_available(), reason="needs espeak-ng and sox"),
]

SENTENCES = [
    "The weather today is sunny with a light breeze from the west.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "We deploy the speech model on a cluster of graphics cards.",
]
MAX_WER = 0.3

wer = speech_samples.wer


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    """Each of SENTENCES spoken by espeak-ng, 16 kHz mono float32."""
    folder: Path = tmp_path_factory.mktemp("speech")
    samples = []
    for i, sentence in enumerate(SENTENCES):
        path = speech_samples.speak(sentence, folder / f"s{i}.wav", rate=16000)
        audio, rate = sf.read(path, dtype="float32")
        assert rate == 16000 and audio.ndim == 1
        samples.append(audio)
    return samples


def _inputs(
    windows: list[np.ndarray], text_prefix: str | None = None, penalty: float | None = None
) -> list[InferInput]:
    """WAV [B, T] zero-padded + WAV_LENS [B, 1], optional TEXT_PREFIX / REPETITION_PENALTY."""
    batch, longest = len(windows), max(len(w) for w in windows)
    wav = np.zeros((batch, longest), dtype=np.float32)
    for i, window in enumerate(windows):
        wav[i, : len(window)] = window
    tensors = [
        ("WAV", "FP32", wav),
        ("WAV_LENS", "INT32", np.array([[len(w)] for w in windows], dtype=np.int32)),
    ]
    if text_prefix is not None:
        tensors.append(("TEXT_PREFIX", "BYTES", np.array([[text_prefix.encode()]] * batch, dtype=object)))
    if penalty is not None:
        tensors.append(("REPETITION_PENALTY", "FP32", np.full((batch, 1), penalty, dtype=np.float32)))
    inputs = []
    for name, dtype, array in tensors:
        tensor = InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


async def _transcribe(server: LocalTriton, inputs: list[InferInput]) -> list[str]:
    async with InferenceServerClient(server.settings.grpc_url) as client:
        result = await stream_request(client, "whisper", inputs, 300)
    return [row[0].decode() for row in result.as_numpy("TRANSCRIPTS")]


def _counters(server: LocalTriton) -> dict[str, float]:
    """Triton's nv_inference_count and the model scheduler's batches (whisper_scheduler_steps_total)."""
    with urllib.request.urlopen(server.settings.metrics_url, timeout=10) as response:  # noqa: S310
        text = response.read().decode()
    wanted = {"nv_inference_count", "whisper_scheduler_steps"}
    # The parser reports counter samples as <family>_total, so match on the family name.
    return {
        family.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if family.name in wanted and sample.labels.get("model") == "whisper" and not sample.name.endswith("_created")
    }


def test_single_window_is_transcribed(triton_server: LocalTriton, speech: list[np.ndarray]) -> None:
    # GIVEN one spoken sentence WHEN it is sent without optional inputs
    [text] = asyncio.run(_transcribe(triton_server, _inputs([speech[0]])[:1]))
    # THEN the transcript matches the spoken words
    assert wer(SENTENCES[0], text) <= MAX_WER, text


def test_each_execution_reports_where_its_time_went(triton_server: LocalTriton, speech: list[np.ndarray]) -> None:
    # GIVEN the model's stage counters (Triton custom metrics) WHEN one window is transcribed
    def stages() -> dict[str, float]:
        with urllib.request.urlopen(triton_server.settings.metrics_url, timeout=10) as response:  # noqa: S310
            text = response.read().decode()
        return {
            sample.labels["stage"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if family.name == "whisper_model_stage_seconds" and "stage" in sample.labels
        }

    before = stages()
    asyncio.run(_transcribe(triton_server, _inputs([speech[0]])[:1]))
    after = stages()
    # THEN every stage is counted, and the engine (CTranslate2 on the CPU) took most of the time
    grown = {stage: after[stage] - before.get(stage, 0.0) for stage in ("parse", "engine", "decoding", "response")}
    assert all(seconds >= 0 for seconds in grown.values()), grown
    assert grown["engine"] > 0 and grown["engine"] > grown["parse"] + grown["response"], grown


def test_batched_request_returns_one_transcript_per_window_in_order(
    triton_server: LocalTriton, speech: list[np.ndarray]
) -> None:
    # GIVEN three windows of different lengths in ONE request (zero-padded, with WAV_LENS)
    texts = asyncio.run(_transcribe(triton_server, _inputs(speech)))
    # THEN three transcripts come back, each matching its own window
    assert len(texts) == 3
    for sentence, text in zip(SENTENCES, texts, strict=True):
        assert wer(sentence, text) <= MAX_WER, (sentence, text)


def test_silence_returns_empty_transcript(triton_server: LocalTriton) -> None:
    rng = np.random.default_rng(0)
    silence = np.zeros(16000 * 5, dtype=np.float32)
    hiss = (rng.standard_normal(16000 * 5) * 1e-4).astype(np.float32)  # about -80 dBFS
    assert asyncio.run(_transcribe(triton_server, _inputs([silence, hiss]))) == ["", ""]


def test_prompt_and_repetition_penalty_are_accepted(triton_server: LocalTriton, speech: list[np.ndarray]) -> None:
    prefix = "<|startofprev|>Weather report.<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
    [text] = asyncio.run(_transcribe(triton_server, _inputs([speech[0]], text_prefix=prefix, penalty=1.1)))
    assert wer(SENTENCES[0], text) <= MAX_WER, text
    assert not text.lower().startswith("weather report")  # the previous text is not echoed


def test_bad_request_is_rejected_alone_and_server_keeps_serving(
    triton_server: LocalTriton, speech: list[np.ndarray]
) -> None:
    async def scenario() -> tuple[str, list[str]]:
        bad = _inputs([speech[2]], text_prefix="<|startoftranscript|><|xx|>")
        outcomes = await asyncio.gather(
            _transcribe(triton_server, bad),
            _transcribe(triton_server, _inputs([speech[2]])),
            return_exceptions=True,
        )
        error, good = outcomes
        assert isinstance(error, InferenceServerException), error
        assert error.status() == "StatusCode.INVALID_ARGUMENT", error  # the status a unary call carries
        return str(error), good  # type: ignore[return-value]

    message, [text] = asyncio.run(scenario())
    assert "unknown language 'xx'" in message
    assert wer(SENTENCES[2], text) <= MAX_WER, text


def test_concurrent_requests_are_batched(triton_server: LocalTriton, speech: list[np.ndarray]) -> None:
    # GIVEN 8 single-window requests sent at once
    before = _counters(triton_server)
    requests = [_inputs([speech[i % 3]]) for i in range(8)]

    async def send_all() -> list[list[str]]:
        return list(await asyncio.gather(*(_transcribe(triton_server, r) for r in requests)))

    texts = asyncio.run(send_all())
    after = _counters(triton_server)
    # THEN every request gets its own correct transcript
    for i, [text] in enumerate(texts):
        assert wer(SENTENCES[i % 3], text) <= MAX_WER, (i, text)
    # AND the model's scheduler ran fewer batches than requests: batches larger than 1 were formed
    inferences = after["nv_inference_count"] - before["nv_inference_count"]
    batches = after["whisper_scheduler_steps"] - before["whisper_scheduler_steps"]
    assert inferences == 8
    assert batches < inferences


def _scheduler(server: LocalTriton) -> dict[str, float]:
    """The whisper model scheduler's finished windows and its windows dropped as cancelled or timed out."""
    with urllib.request.urlopen(server.settings.metrics_url, timeout=10) as response:  # noqa: S310
        text = response.read().decode()
    totals = {"finished": 0.0, "dropped": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != "whisper" or sample.name.endswith("_created"):
                continue
            if sample.name == contract.SCHEDULER_FINISHED:
                totals["finished"] += sample.value
            elif sample.name == contract.SCHEDULER_REJECTED and sample.labels.get("reason") in ("cancelled", "timeout"):
                totals["dropped"] += sample.value
    return totals


def test_a_stream_past_its_timeout_or_cancelled_cancels_its_request(triton_server: LocalTriton) -> None:
    # GIVEN the model busy with a 30 s window of noise (a full decode, over a second on the CPU)
    noise = (np.random.default_rng(1).standard_normal(16000 * 30) * 0.1).astype(np.float32)
    before = _scheduler(triton_server)

    async def scenario() -> InferenceServerException:
        async with InferenceServerClient(triton_server.settings.grpc_url) as client:
            busy = asyncio.ensure_future(stream_request(client, "whisper", _inputs([noise]), 300))
            await asyncio.sleep(0.2)
            # WHEN a request queued behind it has a 0.3 s stream, and another's awaiting task is cancelled
            late = asyncio.ensure_future(stream_request(client, "whisper", _inputs([noise]), 0.3))
            left = asyncio.ensure_future(stream_request(client, "whisper", _inputs([noise]), 300))
            await asyncio.sleep(0.3)
            left.cancel()
            outcomes = await asyncio.gather(busy, late, left, return_exceptions=True)
        assert isinstance(outcomes[2], asyncio.CancelledError), outcomes
        assert isinstance(outcomes[1], InferenceServerException), outcomes
        return outcomes[1]

    late = asyncio.run(scenario())
    # THEN the first fails as a unary call past its deadline does; both reached the model (decoupled:
    # Triton hands requests over at once) and its scheduler dropped them undecoded, decoding only the busy one
    assert late.status() == "StatusCode.DEADLINE_EXCEEDED", late
    for _ in range(50):  # the scheduler drops a cancelled request when its poll next sees it
        if _scheduler(triton_server)["dropped"] - before["dropped"] >= 2:
            break
        time.sleep(0.2)
    after = _scheduler(triton_server)
    assert after["dropped"] - before["dropped"] == 2
    assert after["finished"] - before["finished"] == 1


def test_overload_is_rejected_at_once_not_queued(speech: list[np.ndarray]) -> None:
    # GIVEN a server whose queue holds 1 request and whose batches hold 2 windows
    settings = cpu_triton_settings()
    settings = settings.model_copy(
        update={
            "engine": settings.engine.model_copy(update={"beam_size": 1}),
            "batching": BatchingConfig(max_batch_size=2, max_queue_delay_us=0, max_queue_size=1),
        }
    )
    with LocalTriton(settings) as server:

        async def flood() -> list[object]:
            async with InferenceServerClient(server.settings.grpc_url) as client:
                calls = [stream_request(client, "whisper", _inputs([speech[0]]), 300) for _ in range(8)]
                return await asyncio.gather(*calls, return_exceptions=True)

        outcomes = asyncio.run(flood())
    # WHEN 8 requests arrive at once THEN the ones that do not fit are refused with UNAVAILABLE
    rejected = [o for o in outcomes if isinstance(o, InferenceServerException)]
    served = [o for o in outcomes if not isinstance(o, BaseException)]
    assert rejected and served, outcomes
    assert all(
        e.status() == "StatusCode.UNAVAILABLE" and e.message() == "Exceeds maximum queue size" for e in rejected
    ), rejected
