"""Integration: the decoupled ``whisper`` model over gRPC streaming, on the session's real tritonservers
(CPU tiny.en): one stream per request, unary refused, results equal to the batch path's, the model's
scheduler honouring priority, deadlines and cancellation, and its gauges on the metrics port."""

from __future__ import annotations

import asyncio
import gc
import re
import time

import httpx
import numpy as np
import pytest
from slow_engine import SlowEngineControl, wait_until_idle
from triton_stream import stream_infer, tensors, texts
from tritonclient.grpc import InferenceServerClient as GrpcClient
from tritonclient.http import InferenceServerClient as HttpClient
from tritonclient.utils import InferenceServerException

from whisper_build.serving import contract
from whisper_build.serving.engine_core.wire import from_pcm16, to_pcm16
from whisper_build.serving.engines import load_engine
from whisper_build.serving.results import WindowResult
from whisper_build.serving.triton_model.batching import parse_request, run_batch
from whisper_build.serving.triton_model.decoding import DecodingPolicy
from whisper_build.workstation.local_triton import LocalTriton

pytestmark = pytest.mark.integration

LIVE, BULK = (
    {contract.PRIORITY_PARAMETER: contract.LIVE_PRIORITY},
    {contract.PRIORITY_PARAMETER: contract.BULK_PRIORITY},
)
SECONDS_PER_WINDOW = 1.0
"""The slowed engine's added time per window: the first batch (one loud window) decodes for over 1 s."""
SILENT = np.zeros(8000, np.float32)
"""Half a second of silence: counts in a batch, skipped by the silence gate (no engine time on a busy CPU)."""


def _tone(seconds: float = 1.0, hz: float = 440.0) -> np.ndarray:
    """A loud tone: never silent, so every window reaches the engine."""
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _speechlike(seed: int) -> np.ndarray:
    """2 s of a chirp over noise: deterministic audio that decodes through the whole layer."""
    rng = np.random.default_rng(seed)
    t = np.arange(32000) / 16000
    return (0.2 * np.sin(2 * np.pi * (200 + 300 * t) * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def _metric(server: LocalTriton, name: str, **labels: str) -> float:
    text = httpx.get(server.settings.metrics_url, timeout=10).text
    wanted = {"model": "whisper", **labels}
    for line in text.splitlines():
        match = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if match and dict(re.findall(r'(\w+)="([^"]*)"', match.group(1))) == wanted:
            return float(match.group(2))
    raise AssertionError(f"{name}{wanted} not on Triton's metrics port")


def _decode_here(server: LocalTriton, windows: list[np.ndarray]) -> list[WindowResult]:
    """The windows decoded in this process by ``run_batch`` with the server's engine settings (one request).

    The audio is quantized to 16-bit PCM first, as it crosses to the model's engine core.
    """
    engine = load_engine(server.settings.engine)
    try:
        lens = np.array([[len(w)] for w in windows], np.int32)
        wav = from_pcm16(to_pcm16(_padded(windows)))
        request = parse_request({contract.WAV.name: wav, contract.WAV_LENS.name: lens})
        [result] = run_batch(engine, [request], DecodingPolicy.from_params(server.settings.engine))
    finally:
        del engine  # its CPU threads would slow the server's later stop
        gc.collect()
    assert not isinstance(result, Exception), result
    return result


def _padded(windows: list[np.ndarray]) -> np.ndarray:
    wav = np.zeros((len(windows), max(len(w) for w in windows)), np.float32)
    for row, window in enumerate(windows):
        wav[row, : len(window)] = window
    return wav


def test_stream_results_equal_the_batch_path_and_gauges_count_them(triton_server: LocalTriton) -> None:
    windows = [_speechlike(1), SILENT]
    before = _metric(triton_server, contract.SCHEDULER_FINISHED)
    steps = _metric(triton_server, contract.SCHEDULER_STEPS)
    result = asyncio.run(stream_infer(triton_server.settings.grpc_url, tensors(windows), LIVE))
    served = [WindowResult.from_json(v) for v in result.as_numpy(contract.RESULT.name).reshape(-1)]
    # THEN the windows decode exactly as run_batch decodes them in this process with the same engine
    assert [w.to_json() for w in served] == [w.to_json() for w in _decode_here(triton_server, windows)]
    assert texts(result)[1] == ""
    # AND the scheduler's counters moved by this request's windows and its batch
    assert _metric(triton_server, contract.SCHEDULER_FINISHED) - before == 2
    assert _metric(triton_server, contract.SCHEDULER_STEPS) - steps == 1
    for level in ("live", "sync", "bulk"):
        assert _metric(triton_server, contract.SCHEDULER_QUEUED, level=level) == 0
        assert _metric(triton_server, contract.SCHEDULER_REJECTED, level=level, reason="queue_full") >= 0
    assert _metric(triton_server, contract.SCHEDULER_ACTIVE_ROWS) == 0


def test_unary_and_http_inference_are_refused_for_the_decoupled_model(triton_server: LocalTriton) -> None:
    inputs = tensors([_tone()])
    with pytest.raises(InferenceServerException, match="decoupled") as grpc_error:
        GrpcClient(triton_server.settings.grpc_url).infer("whisper", inputs)
    assert grpc_error.value.status() == "StatusCode.UNIMPLEMENTED"
    from tritonclient.http import InferInput

    wav = InferInput(contract.WAV.name, [1, 16000], contract.WAV.wire_type)
    wav.set_data_from_numpy(_tone()[None, :])
    with pytest.raises(InferenceServerException, match="decoupled"):
        HttpClient(triton_server.settings.http_url.removeprefix("http://")).infer("whisper", [wav])


def test_bad_parameters_and_inputs_are_invalid_arguments(triton_server: LocalTriton) -> None:
    url = triton_server.settings.grpc_url
    for inputs, parameters, message in (
        (tensors([_tone()]), {contract.PRIORITY_PARAMETER: 9}, "whisper_priority must be an integer 1..3"),
        (tensors([_tone()]), {contract.TIMEOUT_PARAMETER: -5}, "whisper_timeout_ms must be a positive integer"),
        (
            tensors([_tone()], **{contract.TEXT_PREFIX.name: np.array([[b"<|startoftranscript|><|xx|>"]], object)}),
            {},
            "unknown language",
        ),
    ):
        with pytest.raises(InferenceServerException, match=message) as error:
            asyncio.run(stream_infer(url, inputs, parameters))
        assert error.value.status() == "StatusCode.INVALID_ARGUMENT", error.value


def test_live_work_overtakes_queued_bulk_work_and_deadlines_answer_at_once(
    slow_triton_server: tuple[LocalTriton, SlowEngineControl],
) -> None:
    server, control = slow_triton_server
    url = server.settings.grpc_url
    done: list[str] = []

    async def send(name: str, windows: list[np.ndarray], parameters: dict[str, int]) -> object:
        try:
            return await stream_infer(url, tensors(windows), parameters)
        finally:
            done.append(name)

    async def scenario() -> list[object]:
        first = asyncio.create_task(send("bulk0", [_tone()], BULK))
        while not control.busy():  # the first batch is in the engine
            await asyncio.sleep(0.01)
        queued = [asyncio.create_task(send(f"bulk{k}", [SILENT] * 8, BULK)) for k in (1, 2, 3)]
        await asyncio.sleep(0.2)
        late = asyncio.create_task(send("late", [_tone()], {contract.TIMEOUT_PARAMETER: 100}))
        live = asyncio.create_task(send("live", [_tone()], LIVE))
        return await asyncio.gather(first, *queued, late, live, return_exceptions=True)

    timeouts = _metric(server, contract.SCHEDULER_REJECTED, level="sync", reason="timeout")
    windows = control.windows_started()
    with control.delay(SECONDS_PER_WINDOW):
        outcomes = asyncio.run(scenario())
    late = outcomes[4]
    # THEN the sync request past its 100 ms deadline was answered while the first batch still decoded
    assert isinstance(late, InferenceServerException), late
    assert (late.status(), late.message()) == ("StatusCode.UNAVAILABLE", "Request timeout expired")
    assert done[0] == "late", done
    # AND the live window rode in the next batch (live + bulk1: 9 windows), before bulk2 and bulk3 (16)
    assert done.index("live") < min(done.index("bulk2"), done.index("bulk3")), done
    assert all(not isinstance(o, BaseException) for i, o in enumerate(outcomes) if i != 4), outcomes
    assert control.windows_started() - windows == 2  # the expired window never reached the engine
    assert _metric(server, contract.SCHEDULER_REJECTED, level="sync", reason="timeout") - timeouts == 1


def test_a_cancelled_stream_is_dropped_before_its_windows_decode(
    slow_triton_server: tuple[LocalTriton, SlowEngineControl],
) -> None:
    server, control = slow_triton_server
    url = server.settings.grpc_url
    cancelled = _metric(server, contract.SCHEDULER_REJECTED, level="bulk", reason="cancelled")
    windows = control.windows_started()

    async def scenario() -> None:
        first = asyncio.create_task(stream_infer(url, tensors([_tone()]), BULK))
        while not control.busy():
            await asyncio.sleep(0.01)
        waiting = asyncio.create_task(stream_infer(url, tensors([_tone(0.5)] * 4), BULK))
        await asyncio.sleep(0.3)
        waiting.cancel()  # the client goes away: its gRPC call is cancelled
        await first

    with control.delay(SECONDS_PER_WINDOW):
        asyncio.run(scenario())
    wait_until_idle(control)
    deadline = time.monotonic() + 5
    while _metric(server, contract.SCHEDULER_REJECTED, level="bulk", reason="cancelled") == cancelled:
        assert time.monotonic() < deadline, "the model never saw the cancellation"
        time.sleep(0.05)
    assert _metric(server, contract.SCHEDULER_REJECTED, level="bulk", reason="cancelled") - cancelled == 4
    assert control.windows_started() - windows == 1  # only the first request's window was decoded
