"""Speakers in a live session, against a fake speaker model with the real one's contract.

The fake hears a "voice" as a constant sample value: each run of one value is a turn, a reference clip
names the voice of its value (as the real model's CAM++ match does), and the other voices are numbered
by first appearance and lettered by ``name_turns``, as ``TritonBackend.diarize`` names them. So labels
restart at ``A`` on every call, as the real model's do: the session must keep them stable itself.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from whisper_build.serving.diarization.speakers import SpeakerOptions, Turn, name_turns
from whisper_build.serving.realtime.events import SessionConfig, merge
from whisper_build.serving.realtime.limits import speakers_requested, validate_transcription
from whisper_build.serving.realtime.speakers import LiveSpeakers
from whisper_build.serving.transcription.backend import BackendUnavailable
from whisper_build.serving.transcription.speakers import SessionSpeakers

RATE = 16_000


def voice(value: float, seconds: float) -> npt.NDArray[np.float32]:
    return np.full(int(seconds * RATE), value, dtype=np.float32)


class FakeSpeakerModel:
    def __init__(self) -> None:
        self.calls: list[SpeakerOptions] = []
        self.error: Exception | None = None

    async def diarize(self, samples: npt.NDArray[np.float32], options: SpeakerOptions, timeout: float) -> list[Turn]:
        self.calls.append(options)
        if self.error is not None:
            raise self.error
        known = {round(float(clip[0]), 3): i for i, (_, clip) in enumerate(options.known)}
        rows: list[tuple[float, float, int]] = []
        numbers: dict[float, int] = {}
        edges = [0, *np.flatnonzero(np.diff(samples)) + 1, len(samples)]
        for start, end in zip(edges, edges[1:], strict=False):
            value = round(float(samples[start]), 3)
            if value == 0.0:
                continue  # silence
            if value not in known and value not in numbers:
                numbers[value] = len(options.known) + len(numbers)
            rows.append((start / RATE, end / RATE, known.get(value, numbers.get(value, -1))))
        return name_turns(rows, [name for name, _ in options.known])


def test_the_same_voice_keeps_its_label_and_a_new_voice_gets_a_new_one() -> None:
    model = FakeSpeakerModel()
    speakers = SessionSpeakers(model, timeout=5)  # type: ignore[arg-type]

    async def turns() -> list[str]:
        said = [voice(0.1, 2), voice(0.2, 3), voice(0.1, 1.5), voice(0.3, 2), voice(0.2, 0.8), voice(0.3, 1)]
        return [(await speakers.label(audio)).speaker for audio in said]

    assert asyncio.run(turns()) == ["A", "B", "A", "C", "B", "C"]
    assert [name for name, _ in model.calls[-1].known] == ["A", "B", "C"]  # every voice heard goes with each turn
    assert all(len(clip) <= 8 * RATE for _, clip in speakers.references())


def test_a_voice_heard_too_briefly_is_not_sent_as_a_reference_yet() -> None:
    model = FakeSpeakerModel()
    speakers = SessionSpeakers(model, timeout=5)  # type: ignore[arg-type]

    async def scenario() -> list[str]:
        return [(await speakers.label(a)).speaker for a in (voice(0.1, 0.5), voice(0.2, 2), voice(0.1, 0.6))]

    # the first voice had no reference yet when it spoke again: a new label, never another voice's
    assert asyncio.run(scenario()) == ["A", "B", "C"]
    assert [name for name, _ in model.calls[-1].known] == ["B"]


def test_a_turn_the_model_hears_no_voice_in_takes_the_last_voice_heard() -> None:
    model = FakeSpeakerModel()
    speakers = SessionSpeakers(model, timeout=5)  # type: ignore[arg-type]

    async def scenario() -> list[str]:
        said = (voice(0.1, 2), voice(0.2, 2), voice(0.1, 2), voice(0.0, 1))  # the last: too short to embed
        return [(await speakers.label(a)).speaker for a in said]

    assert asyncio.run(scenario()) == ["A", "B", "A", "A"]


def test_known_speakers_keep_their_names_and_the_rest_are_lettered() -> None:
    model = FakeSpeakerModel()
    speakers = SessionSpeakers(model, timeout=5, known=[("Ana", voice(0.2, 3))])  # type: ignore[arg-type]

    async def scenario() -> list[str]:
        return [(await speakers.label(a)).speaker for a in (voice(0.1, 2), voice(0.2, 2), voice(0.1, 2))]

    assert asyncio.run(scenario()) == ["A", "Ana", "A"]


def test_a_turn_of_two_voices_takes_the_voice_covering_most_of_it() -> None:
    model = FakeSpeakerModel()
    speakers = SessionSpeakers(model, timeout=5)  # type: ignore[arg-type]
    result = asyncio.run(speakers.label(np.concatenate([voice(0.1, 1), voice(0.2, 3)])))
    assert result.speaker == "B" and [t.speaker for t in result.turns] == ["A", "B"]


def test_a_missing_speaker_model_says_how_to_enable_it() -> None:
    model = FakeSpeakerModel()
    model.error = BackendUnavailable("Triton is unavailable: Request for unknown model: 'speaker' is not found")
    with pytest.raises(BackendUnavailable, match="WHISPER_TRITON_SPEAKER__ENABLED=true"):
        asyncio.run(SessionSpeakers(model, timeout=5).label(voice(0.1, 2)))  # type: ignore[arg-type]


def _config(model: str, **transcription: Any) -> SessionConfig:
    return merge(SessionConfig(), {"type": "transcription", "audio": {"input": {"transcription": {"model": model,
                                                                                                  **transcription}}}})  # fmt: skip


def test_diarize_model_turns_speakers_on_and_plain_model_leaves_them_off() -> None:
    validate_transcription(_config("whisper-1-diarize", language="en"), ["whisper", "whisper-1"])
    assert speakers_requested(_config("whisper-1-diarize"))
    assert not speakers_requested(_config("whisper-1"))


def test_a_session_sends_a_segment_and_a_speaker_on_completed_and_nothing_when_off() -> None:
    model = FakeSpeakerModel()
    sent: list[dict[str, Any]] = []

    async def send(event: dict[str, Any]) -> None:
        sent.append(event)

    async def scenario() -> tuple[str | None, str | None]:
        live = LiveSpeakers(model, 5, send)  # type: ignore[arg-type]
        await live.configure(_config("whisper-1"))
        off = await live.finish(live.start(voice(0.1, 2)), "item_1", 0, "hi", 2.0)
        await live.configure(_config("whisper-1-diarize"))
        on = await live.finish(live.start(voice(0.1, 2)), "item_2", 32_000, "hello there", 2.0)
        return off, on

    off, on = asyncio.run(scenario())
    assert off is None and len(model.calls) == 1  # off: no speaker-model call
    assert on == "A"
    (segment,) = sent
    assert segment["type"] == "conversation.item.input_audio_transcription.segment"
    assert (segment["start"], segment["end"], segment["speaker"], segment["text"]) == (2.0, 4.0, "A", "hello there")
    json.dumps(segment)


def test_a_turn_of_two_voices_sends_one_segment_per_voice_with_its_share_of_the_words() -> None:
    """A reply that follows within the VAD's silence joins the turn before it: the words, spread over the
    speech, go to the voice speaking then (1 s of A, a 0.5 s gap, 3 s of B; four words, one a second)."""
    sent: list[dict[str, Any]] = []

    async def send(event: dict[str, Any]) -> None:
        sent.append(event)

    async def scenario() -> str | None:
        live = LiveSpeakers(FakeSpeakerModel(), 5, send)  # type: ignore[arg-type]
        await live.configure(_config("whisper-1-diarize"))
        audio = np.concatenate([voice(0.1, 1), voice(0.0, 0.5), voice(0.2, 3)])
        return await live.finish(live.start(audio), "item_1", 16_000, "yes. so we agree", 4.5)

    assert asyncio.run(scenario()) == "B"  # completed: the voice covering most of the turn
    assert [(s["start"], s["end"], s["speaker"], s["text"]) for s in sent] == [
        (1.0, 2.0, "A", "yes."), (2.5, 5.5, "B", "so we agree")]  # fmt: skip
    assert len({s["id"] for s in sent}) == 2


def test_a_failed_speaker_call_is_reported_once_in_words_and_the_turn_still_completes() -> None:
    model = FakeSpeakerModel()
    model.error = BackendUnavailable("no speaker model")
    sent: list[dict[str, Any]] = []

    async def send(event: dict[str, Any]) -> None:
        sent.append(event)

    async def scenario() -> list[str | None]:
        live = LiveSpeakers(model, 5, send)  # type: ignore[arg-type]
        await live.configure(_config("whisper-1-diarize"))
        return [await live.finish(live.start(voice(0.1, 2)), f"item_{i}", 0, "hi", 2.0) for i in range(2)]

    assert asyncio.run(scenario()) == [None, None]
    (error,) = sent
    assert error["type"] == "error" and "WHISPER_TRITON_SPEAKER__ENABLED=true" in error["error"]["message"]


def test_known_speakers_without_diarize_are_refused_with_the_field() -> None:
    from whisper_build.serving.realtime.events import ProtocolError

    live = LiveSpeakers(FakeSpeakerModel(), 5, lambda e: asyncio.sleep(0))  # type: ignore[arg-type]
    with pytest.raises(ProtocolError) as refused:
        asyncio.run(live.configure(_config("whisper-1", known_speaker_names=["Ana"], known_speaker_references=["x"])))
    assert refused.value.param == "session.audio.input.transcription.model"
