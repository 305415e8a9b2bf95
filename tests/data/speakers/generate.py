"""Regenerate the speaker-diarization dialogues (run once; the FLACs and ``truth.json`` are committed).

``python tests/data/speakers/generate.py`` needs Festival and the Debian voices ``festvox-kallpc16k``
(``kal_diphone``, US male), ``festvox-kdlpc16k`` (``ked_diphone``, US male) and ``festvox-us-slt-hts``
(``cmu_us_slt_arctic_hts``, US female), plus sox. Each turn is synthesised alone, trimmed of its
leading/trailing silence, converted to 16 kHz mono, joined with 0.5 s pauses and stored as 8-bit FLAC (size); ``truth.json``
records each turn's speaker, start, end (seconds, the trimmed speech) and words, so DER and word
attribution are scored against what was actually said. ``ref_<voice>.flac`` are 4 s-ish reference
clips (other sentences) for known-speaker tests. espeak-ng voices are not used: speaker models
cannot tell them apart. Voice licences: the packages' copyright files (kal/ked free to use and
redistribute; slt CMU EST-2003 + BSD-3-clause).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import wave
from pathlib import Path

HERE = Path(__file__).parent
PAUSE_SECONDS = 0.5
VOICES = {"kal": "kal_diphone", "ked": "ked_diphone", "slt": "cmu_us_slt_arctic_hts"}

LINES = [
    "Good morning, thanks for joining the call today.",
    "Happy to be here. Shall we start with the budget?",
    "Yes. The hardware order arrived last week and it was cheaper than planned.",
    "That is good news. What about the software licences for the new team?",
    "We renewed them on Monday, so nothing is due before next spring.",
    "Then the only open question is the travel plan for the conference.",
    "I will book the flights tomorrow and send everyone the details.",
    "Perfect. Let us meet again on Thursday to check the progress.",
]
DIALOGUES = {
    "male_female": ["kal", "slt"],
    "male_male": ["kal", "ked"],
    "three_speakers": ["kal", "slt", "ked"],
}
REFERENCE = "The quick brown fox jumps over the lazy dog while the children watch from the garden."


def synth(voice: str, text: str, out: Path, tmp: Path) -> None:
    """``text`` in Festival ``voice`` → 16 kHz mono 16-bit WAV ``out``, silence trimmed at both ends."""
    raw = tmp / "raw.wav"
    escaped = text.replace('"', '\\"')
    script = f'(utt.save.wave (utt.synth (Utterance Text "{escaped}")) "{raw}" (quote riff))'
    subprocess.run(["festival", "-b", f"(voice_{voice})", script], check=True)
    trim = ["silence", "1", "0.02", "0.5%", "reverse", "silence", "1", "0.02", "0.5%", "reverse"]
    subprocess.run(["sox", "-D", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(out), *trim], check=True)


def seconds(path: Path) -> float:
    with wave.open(str(path)) as w:
        return w.getnframes() / w.getframerate()


def main() -> None:
    truth: dict[str, list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        silence = tmp / "pause.wav"
        pause = ["trim", "0", str(PAUSE_SECONDS)]
        subprocess.run(["sox", "-n", "-r", "16000", "-c", "1", "-b", "16", str(silence), *pause], check=True)
        for dialogue, speakers in DIALOGUES.items():
            parts: list[Path] = []
            turns: list[dict[str, object]] = []
            t = 0.0
            for i, line in enumerate(LINES):
                speaker = speakers[i % len(speakers)]
                part = tmp / f"{dialogue}_{i}.wav"
                synth(VOICES[speaker], line, part, tmp)
                length = seconds(part)
                turns.append({"speaker": speaker, "start": round(t, 3), "end": round(t + length, 3), "text": line})
                parts += [part, silence]
                t += length + PAUSE_SECONDS
            joined = tmp / f"{dialogue}.wav"
            subprocess.run(["sox", *map(str, parts[:-1]), str(joined)], check=True)
            subprocess.run(["sox", str(joined), "-b", "8", "-C", "8", str(HERE / f"{dialogue}.flac")], check=True)
            truth[dialogue] = turns
        for speaker, voice in VOICES.items():
            part = tmp / f"ref_{speaker}.wav"
            synth(voice, REFERENCE, part, tmp)
            subprocess.run(["sox", str(part), "-b", "8", "-C", "8", str(HERE / f"ref_{speaker}.flac")], check=True)
    (HERE / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
