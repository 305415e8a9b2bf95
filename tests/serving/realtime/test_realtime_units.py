"""Live transcription's pieces without a server: G.711 tables, the streamed VAD and turns, LocalAgreement-2, session updates."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile
import soxr
import speech_samples as samples
from live_fakes import speech_pcm24k
from prometheus_client import CollectorRegistry

from whisper_build.serving.realtime.agreement import HypothesisBuffer
from whisper_build.serving.realtime.audio import SessionAudio, alaw_table, ulaw_table
from whisper_build.serving.realtime.events import ProtocolError, SessionConfig, legacy_to_ga, merge
from whisper_build.serving.realtime.ports import LiveMetrics
from whisper_build.serving.realtime.session import LiveLimits, TranscriptionSession, vad_params
from whisper_build.serving.realtime.vad import TurnDetector, VadParams
from whisper_build.serving.transcription.backend import BackendRejected, BackendTimeout, BackendUnavailable


class _Health:
    """The session's health recorder: collects the failures it is told of."""

    def __init__(self) -> None:
        self.failures: list[Exception] = []

    def record_success(self) -> None: ...

    def record_failure(self, source: str, error: Exception) -> None:
        self.failures.append(error)


def _session(backend: object, events: list[dict], health: _Health | None = None) -> TranscriptionSession:
    """A session of the default limits on ``backend``; the events it sends are appended to ``events``."""

    async def send(event: dict) -> None:
        events.append(event)

    metrics = LiveMetrics(CollectorRegistry())
    return TranscriptionSession(backend, send, ["whisper-1"], LiveLimits(), metrics, health or _Health())  # type: ignore[arg-type]


@pytest.mark.skipif(shutil.which("sox") is None, reason="needs sox")
@pytest.mark.parametrize(("encoding", "table"), [("u-law", ulaw_table), ("a-law", alaw_table)])
def test_g711_tables_decode_every_byte_as_sox_does(tmp_path: Path, encoding: str, table) -> None:
    every = tmp_path / "every.raw"
    every.write_bytes(bytes(range(256)))
    out = subprocess.run(
        ["sox", "-t", "raw", "-r", "8000", "-e", encoding, "-c", "1", str(every), "-t", "raw", "-e", "signed", "-b", "16", "-"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    assert np.array_equal(table(), np.frombuffer(out, "<i2") / 32768.0)


def test_pcm16_odd_byte_counts_and_resampling_to_16k() -> None:
    tone = (samples.tone(1.0, 24000) * 32767).astype("<i2").tobytes()
    audio = SessionAudio("audio/pcm")
    parts = [audio.decode(tone[i : i + 4801]) for i in range(0, len(tone), 4801)]  # odd chunks split samples
    out = np.concatenate([*parts, audio.flush()])
    assert abs(len(out) - 16000) <= 2
    spectrum = np.abs(np.fft.rfft(out[2000:14000]))
    assert abs(np.argmax(spectrum) * 16000 / 12000 - 440) < 3


@pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox")
def test_turns_are_the_same_whatever_the_append_size(tmp_path: Path) -> None:
    wav = samples.speak(samples.SENTENCES[0], tmp_path / "s.wav")
    speech, _ = soundfile.read(str(wav), dtype="float32")
    silence = np.zeros(16000, dtype=np.float32)
    audio = np.concatenate([silence, speech, silence, speech, silence]).astype(np.float32)

    def turns(step: int) -> list[tuple[str, int]]:
        detector = TurnDetector(VadParams(silence_duration_ms=500))
        return [(e.kind, e.ms) for i in range(0, len(audio), step) for e in detector.feed(audio[i : i + step])]

    whole, small = turns(len(audio)), turns(333)
    assert whole == small
    assert [kind for kind, _ in whole] == ["started", "stopped", "started", "stopped"]
    assert 1000 - 300 - 100 <= whole[0][1] <= 1000  # speech at 1 s, reported with its 300 ms prefix padding


def test_noise_and_silence_start_no_turn() -> None:
    rng = np.random.default_rng(1)
    detector = TurnDetector(VadParams(idle_timeout_ms=5000))
    events = detector.feed(np.concatenate([np.zeros(16000 * 6), rng.normal(0, 0.02, 16000 * 6)]).astype(np.float32))
    assert [e.kind for e in events] == ["timeout", "timeout"]
    assert detector.speech_chunks == 0


def test_local_agreement_confirms_what_two_decodes_agree_on_and_never_retracts() -> None:
    buffer = HypothesisBuffer()
    deltas = [
        buffer.insert("The quick"),
        buffer.insert("The quick brown fax"),
        buffer.insert("the quick brown fox jumps"),
        buffer.insert("A quick brown fox jumps over"),  # disagrees with confirmed words: nothing new
    ]
    assert deltas == ["", "The quick", " brown", ""]
    tail = buffer.finish("The quick brown fox jumps over the lazy dog.")
    assert tail == " fox jumps over the lazy dog."
    assert "".join([*deltas, tail]) == buffer.text == "The quick brown fox jumps over the lazy dog."
    edge = HypothesisBuffer()  # agreed up to the decode's last word: that word may be cut by the audio's end
    assert [edge.insert("Good morn"), edge.insert("Good morn"), edge.insert("Good morning everyone")] == [
        "",
        "Good",
        "",
    ]


def test_session_update_merges_partially_and_maps_legacy_and_semantic_vad() -> None:
    config = merge(
        SessionConfig(), {"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcmu", "rate": None}}}}
    )
    config = merge(config, {"audio": {"input": {"transcription": {"language": "en"}}}})
    assert config.audio.input.format.type == "audio/pcmu" and config.audio.input.transcription.language == "en"
    assert vad_params(config) == VadParams()
    assert vad_params(merge(config, {"audio": {"input": {"turn_detection": None}}})) is None
    semantic = merge(config, {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}}}})
    assert vad_params(semantic) == VadParams(silence_duration_ms=1200)
    legacy = merge(SessionConfig(), legacy_to_ga({"input_audio_format": "g711_alaw", "turn_detection": None}))
    assert legacy.audio.input.format.type == "audio/pcma" and legacy.audio.input.turn_detection is None
    with pytest.raises(ProtocolError) as refused:
        merge(config, {"type": "realtime"})
    assert refused.value.param == "session.type"


@pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox")
def test_drain_finishes_the_open_turn_then_closes_1012_and_refuses_new_sessions(tmp_path: Path) -> None:
    import base64

    from fake_backend import FakeBackend
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from whisper_build.serving.gateway.app import create_app
    from whisper_build.serving.gateway.settings import GatewaySettings

    pcm = speech_pcm24k(samples.SENTENCES[1], tmp_path / "s.wav")
    app = create_app(GatewaySettings(), lambda _: FakeBackend())
    manual = {"type": "transcription", "audio": {"input": {"turn_detection": None}}}
    with TestClient(app) as client, client.websocket_connect("/v1/realtime?intent=transcription") as ws:
        assert ws.receive_json()["type"] == "session.created"
        ws.send_json({"type": "session.update", "session": manual})
        assert ws.receive_json()["type"] == "session.updated"
        for i in range(0, len(pcm), 9600):
            ws.send_json({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[i : i + 9600]).decode()})
        app.state.runtime.start_drain()  # what SIGTERM does (DrainingServer)
        events = []
        with pytest.raises(WebSocketDisconnect) as closed:
            while True:
                events.append(ws.receive_json())
        with (
            client.websocket_connect("/v1/realtime?intent=transcription") as late,
            pytest.raises(WebSocketDisconnect) as refused,
        ):
            late.receive_json()
    assert closed.value.code == 1012 and refused.value.code == 1012
    completed = [e for e in events if e["type"].endswith(".completed")]
    assert [e["type"] for e in events][-2:] == [
        "conversation.item.input_audio_transcription.delta",
        completed[0]["type"],
    ]
    assert completed[0]["transcript"] == f"w0:{len(pcm) / 48000:.1f}"  # the fake model's answer for the whole turn


def test_a_session_without_audio_is_closed_after_the_idle_timeout() -> None:
    from fake_backend import FakeBackend
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from whisper_build.serving.gateway.app import create_app
    from whisper_build.serving.gateway.settings import GatewaySettings

    app = create_app(GatewaySettings(realtime_idle_audio_seconds=0.5), lambda _: FakeBackend())
    with TestClient(app) as client, client.websocket_connect("/v1/realtime?intent=transcription") as ws:
        assert ws.receive_json()["type"] == "session.created"
        assert ws.receive_json()["error"]["code"] == "idle_timeout"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    assert closed.value.code == 1000
    assert app.state.runtime.live.open == 0  # the slot is given back


@pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox")
@pytest.mark.parametrize(
    ("error", "openai_type", "code", "counts"),
    [
        (BackendTimeout("deadline exceeded"), "server_error", "timeout", False),
        (BackendUnavailable("model server unreachable"), "server_error", "unavailable", True),
        (BackendRejected("this model is English-only (.en): language 'de' is not supported"),
         "invalid_request_error", "invalid_field", False),
    ],
    ids=["timeout", "unavailable", "rejected"],
)  # fmt: skip
def test_a_failed_turn_reports_what_the_file_endpoint_answers_for_the_same_failure(
    tmp_path: Path, error: Exception, openai_type: str, code: str, counts: bool
) -> None:
    import asyncio
    import base64

    from fake_backend import FakeBackend

    from whisper_build.serving.gateway.errors import openai_error_body
    from whisper_build.serving.gateway.pipeline import Pipeline
    from whisper_build.serving.gateway.settings import GatewaySettings

    http = Pipeline(GatewaySettings(), None).to_api_error(error)  # type: ignore[arg-type]
    http_error = openai_error_body(http.status, http.code, http.message, http.param)["error"]
    pcm = speech_pcm24k(samples.SENTENCES[0], tmp_path / "s.wav")
    backend, events, health = FakeBackend(), [], _Health()
    backend.error = error

    async def run() -> None:
        session = _session(backend, events, health)
        session.configure(merge(SessionConfig(), {"audio": {"input": {"turn_detection": None}}}))
        await session.append(base64.b64encode(pcm).decode())
        await session.commit()
        await session.settle()  # the turn completes beside the session

    asyncio.run(run())
    failed = events[-1]
    assert failed["type"] == "conversation.item.input_audio_transcription.failed"
    assert (failed["error"]["type"], failed["error"]["code"]) == (http_error["type"], http_error["code"])
    assert (failed["error"]["type"], failed["error"]["code"]) == (openai_type, code)
    expected_param = "session.audio.input.transcription.language" if http.param == "language" else None
    assert failed["error"]["param"] == expected_param
    assert bool(health.failures) == counts  # a timeout or a refusal does not count against the model's health


def test_the_idle_timeout_commits_the_idle_audio_as_an_empty_item_as_openai_documents() -> None:
    """openai-python ``types/realtime/input_audio_buffer_timeout_triggered.py``: "The empty audio will be
    committed to the conversation as an ``input_audio`` item (there will be a ``input_audio_buffer.committed``
    event)"; a transcription session then transcribes it: silence gives an empty transcript, no decode."""
    import asyncio
    import base64

    from fake_backend import FakeBackend

    backend, events = FakeBackend(), []

    async def run() -> None:
        session = _session(backend, events)
        turns = {"type": "server_vad", "idle_timeout_ms": 1000}
        session.configure(merge(SessionConfig(), {"audio": {"input": {"turn_detection": turns}}}))
        silence = bytes(24000 * 2 * 5 // 2)  # 2.5 s of 24 kHz PCM16
        for start in range(0, len(silence), 9600):
            await session.append(base64.b64encode(silence[start : start + 9600]).decode())
        await session.settle()

    asyncio.run(run())
    items: dict[str, list[dict]] = {}
    for event in events:  # an ended turn completes beside the session: items may interleave, each in order
        items.setdefault(event["item_id"], []).append(event)
    assert [[e["type"] for e in item] for item in items.values()] == [
        [
            "input_audio_buffer.timeout_triggered",
            "input_audio_buffer.committed",
            "conversation.item.input_audio_transcription.completed",
        ]
    ] * 2
    (first, committed, completed), (_, second_committed, _) = items.values()
    assert abs(first["audio_end_ms"] - 1000) <= 32 and first["audio_end_ms"] - first["audio_start_ms"] == 1000
    assert committed["previous_item_id"] is None and second_committed["previous_item_id"] == first["item_id"]
    assert completed["transcript"] == "" and backend.requests == []  # no decode on silence


def test_a_session_update_of_the_prompt_mid_turn_keeps_the_turn_audio() -> None:
    import asyncio
    import base64

    from fake_backend import FakeBackend

    backend, events = FakeBackend(), []

    async def run() -> None:
        session = _session(backend, events)
        session.configure(merge(SessionConfig(), {"audio": {"input": {"turn_detection": None}}}))
        second = base64.b64encode(bytes(48000)).decode()  # 1 s of 24 kHz PCM16
        await session.append(second)
        session.configure(merge(session.config, {"audio": {"input": {"transcription": {"prompt": "Triton"}}}}))
        await session.append(second)
        session.detector.speech_chunks = 10  # silence stands in for speech: the fake model answers any audio
        await session.commit()
        await session.settle()  # the turn completes beside the session
        await session.append(base64.b64encode(bytes(72000)).decode())  # a second turn (1.5 s)
        session.detector.speech_chunks = 10
        await session.commit()
        await session.settle()  # the turn completes beside the session

    asyncio.run(run())
    completed = [e["transcript"] for e in events if e["type"].endswith(".completed")]
    assert completed[0] == "w0:2.0"  # both seconds, not only the one after the update
    # the second turn is decoded after the first (English-only model): its audio in front, its text forced
    first, second = backend.requests[-2:]
    assert (first.prompt.previous_text, first.prompt.prefix) == ("Triton", "")
    assert (second.prompt.previous_text, second.prompt.prefix) == ("Triton", "w0:2.0")
    assert backend.calls[-1][1] == [32000 + 24000] and completed[1] == "w0:3.5"  # the fake answers the window


def test_clear_drops_the_resamplers_leftovers_too() -> None:
    import asyncio
    import base64

    from fake_backend import FakeBackend

    backend, events = FakeBackend(), []
    rng = np.random.default_rng(0)
    noise = (rng.uniform(-0.5, 0.5, 7201) * 32767).astype("<i2").tobytes()[:-1]  # 0.3 s and an odd byte

    async def run() -> None:
        session = _session(backend, events)
        session.configure(merge(SessionConfig(), {"audio": {"input": {"turn_detection": None}}}))
        await session.append(base64.b64encode(noise).decode())
        await session.clear()
        await session.append(base64.b64encode(bytes(57600)).decode())  # 1.2 s of silence at 24 kHz
        session.detector.speech_chunks = 10  # silence stands in for speech: the fake model answers any audio
        await session.commit()
        await session.settle()  # the turn completes beside the session

    asyncio.run(run())
    assert [e["type"] for e in events][:1] == ["input_audio_buffer.cleared"]
    assert backend.calls[-1][1] == [19200]  # exactly the 1.2 s appended after the clear


def test_the_load_test_confirmation_rule_confirms_two_new_words_per_update_and_only_by_server_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from whisper_build.serving.gateway.settings import GatewaySettings
    from whisper_build.serving.realtime.agreement import FirstWordsBuffer

    buffer = FirstWordsBuffer()  # random weights: no two decodes agree, yet every update confirms words
    deltas = [buffer.insert("zq fo ba xu"), buffer.insert("mm nn oo pp qq"), buffer.insert("a b c d e f")]
    assert deltas == ["zq fo", " oo pp", " e f"]
    assert buffer.finish("a b c d e f g h") == " g h" and buffer.text == "zq fo oo pp e f g h"
    assert GatewaySettings().live.realtime_load_test_confirmation is False
    monkeypatch.setenv("WHISPER_GATEWAY_REALTIME_LOAD_TEST_CONFIRMATION", "true")
    assert GatewaySettings().live.realtime_load_test_confirmation is True
    session = _session(object(), [])
    assert type(session._new_turn(0).hypothesis) is HypothesisBuffer  # the default: LocalAgreement-2
    session.limits = LiveLimits(load_test_confirmation=True)
    assert type(session._new_turn(0).hypothesis) is FirstWordsBuffer


def test_a_turn_is_decoded_after_the_earlier_turns_that_fit_in_30_s_with_their_text_forced() -> None:
    from whisper_build.serving.realtime.context import TurnContext

    context, second = TurnContext(), np.ones(16000, np.float32)
    for seconds, text in ((20, "first."), (6, ""), (8, "second."), (5, "third.")):  # the silent turn is left out
        context.add(np.full(seconds * 16000, seconds, np.float32), text)
    audio, prompt = context.window(second, ["so", "far"], "Triton", "en", 30.0)
    # 8 + 5 + 1 s fit; the 20 s turn does not: its text is the previous-text prompt, after the client's
    assert len(audio) == 14 * 16000 and audio[0] == 8 and audio[-1] == 1
    assert (prompt.previous_text, prompt.prefix, prompt.language) == ("Triton first.", "second. third. so far", "en")
    audio, prompt = context.window(second, [], None, None, 10.0)  # at most 10 s of earlier audio: the last turn
    assert len(audio) == 6 * 16000 and (prompt.previous_text, prompt.prefix) == ("first. second.", "third.")
    audio, prompt = context.window(second, [], None, None, 0.0)  # the language is not fixed: no earlier audio
    assert len(audio) == 16000 and (prompt.previous_text, prompt.prefix) == ("first. second. third.", "")


def test_server_events_go_out_in_openais_shapes_type_and_event_id_first() -> None:
    import json

    from whisper_build.serving.realtime import server_events as ev

    usage = ev.DurationUsage(seconds=1.5)
    completed = ["item_id", "content_index", "transcript", "usage"]
    shapes = [
        (ev.BufferCleared(), []),
        (ev.SpeechStarted(item_id="i", audio_start_ms=0), ["item_id", "audio_start_ms"]),
        (ev.SpeechStopped(item_id="i", audio_end_ms=9), ["item_id", "audio_end_ms"]),
        (ev.TimeoutTriggered(item_id="i", audio_start_ms=0, audio_end_ms=9), ["item_id", "audio_start_ms", "audio_end_ms"]),
        (ev.BufferCommitted(item_id="i", previous_item_id=None), ["item_id", "previous_item_id"]),
        (ev.TranscriptDelta(item_id="i", delta=" hi"), ["item_id", "content_index", "delta"]),
        (ev.TranscriptCompleted(item_id="i", transcript="hi", usage=usage), completed),
        (ev.TranscriptCompleted(item_id="i", transcript="hi", usage=usage, speaker="A"), [*completed, "speaker"]),
        (ev.SessionEvent(type="session.created", session={"id": "s"}), ["session"]),
    ]  # fmt: skip
    for event, fields in shapes:
        wire = json.loads(json.dumps(event.wire()))
        assert list(wire) == ["type", "event_id", *fields] and wire["event_id"].startswith("event_")
    completed = ev.TranscriptCompleted(item_id="i", transcript="hi", usage=usage).wire()
    assert (
        completed["type"] == "conversation.item.input_audio_transcription.completed" and completed["content_index"] == 0
    )
    assert completed["usage"] == {"type": "duration", "seconds": 1.5} and list(completed["usage"]) == [
        "type",
        "seconds",
    ]
    error = ev.error_event("too big", "event_too_large", client_event_id="c1").wire()
    assert list(error) == ["type", "event_id", "error"] and error["type"] == "error"
    assert error["error"] == {"type": "invalid_request_error", "code": "event_too_large", "message": "too big",
                              "param": None, "event_id": "c1"}  # fmt: skip
    assert list(error["error"]) == ["type", "code", "message", "param", "event_id"]


def test_a_decode_takes_the_models_verdict_on_silence_not_a_threshold_of_its_own() -> None:
    """The model's no-speech thresholds are the operator's (``no_speech_threshold`` raised to 0.8 here): a window
    it kept words for is a turn's words, whatever its no-speech probability and log-prob."""
    import asyncio

    from whisper_build.serving.realtime.context import TurnContext
    from whisper_build.serving.realtime.decoder import TurnDecoder
    from whisper_build.serving.realtime.events import TranscriptionConfig
    from whisper_build.serving.results import WindowResult

    class Unsure:
        async def infer(self, windows: object, request: object, timeout: float) -> list[WindowResult]:
            return [WindowResult("quiet words", no_speech_prob=0.7, avg_logprob=-1.5)]

    metrics = LiveMetrics(CollectorRegistry())
    decoder = TurnDecoder(Unsure(), LiveLimits(), metrics, _Health(), TurnContext(), TranscriptionConfig)  # type: ignore[arg-type]
    assert asyncio.run(decoder.decode(np.zeros(16000, np.float32), [])) == "quiet words"


class _LoudIsSpeech:
    """A VAD stream whose speech probability is 1 for a chunk with any sample above 0.05, else 0."""

    def probability(self, chunk: np.ndarray) -> float:
        return float(np.abs(chunk).max() > 0.05)


def test_a_turn_that_starts_in_the_audio_that_stopped_the_last_keeps_both_turns(monkeypatch) -> None:
    """A stop and the next start in one 200 ms step (a reply 448 ms after the last word, 400 ms silence):
    the stopped turn is judged on its own speech and the started one stays the detector's turn, so both
    are decoded, one ``speech_started`` each (seen live: the first came back empty, the second was lost)."""
    import asyncio
    import base64

    from fake_backend import FakeBackend

    from whisper_build.serving.realtime import vad
    from whisper_build.serving.realtime.vad import CHUNK_SAMPLES

    monkeypatch.setattr(vad, "SileroStream", _LoudIsSpeech)

    def chunks(count: int, level: float) -> np.ndarray:
        return np.full(count * CHUNK_SAMPLES, level, dtype=np.float32)

    # speech in chunks 10-49 and 64-103: the 13th silent chunk stops, 64 starts, both in the 11th step
    audio16k = np.concatenate([chunks(10, 0), chunks(40, 0.2), chunks(14, 0), chunks(40, 0.2), chunks(40, 0)])
    pcm24k = (soxr.resample(audio16k, 16000, 24000) * 32767).astype("<i2").tobytes()
    backend, events = FakeBackend(), []

    async def run() -> None:
        session = _session(backend, events)
        turns = {"type": "server_vad", "silence_duration_ms": 400, "prefix_padding_ms": 0}
        session.configure(merge(SessionConfig(), {"audio": {"input": {"turn_detection": turns}}}))
        await session.append(base64.b64encode(pcm24k).decode())
        await session.settle()

    asyncio.run(run())
    started = [e for e in events if e["type"].endswith("speech_started")]
    completed = [e for e in events if e["type"].endswith("transcription.completed")]
    assert [e["item_id"] for e in started] == [e["item_id"] for e in completed]  # each started turn completes
    assert len(completed) == 2 and all(e["transcript"] for e in completed)
    assert abs(started[1]["audio_start_ms"] - 64 * 32) <= 32
