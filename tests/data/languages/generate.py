"""Regenerate the multilingual speech corpus (run once; the FLACs are committed).

``python tests/data/languages/generate.py`` says every sentence of ``corpus.json`` with espeak-ng
(its voice, 130 words per minute) and converts it with sox to 16 kHz mono FLAC beside this file.
The files are committed so that an espeak-ng upgrade cannot change a test's input. The sentences
were picked because Whisper base (CTranslate2, beam 5) detects their language with probability
≥ 0.88 and transcribes them nearly word for word; other espeak-ng sentences came back as Thai,
Yiddish or English (espeak-ng's French and German are hard for the base model).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).parent


def main() -> None:
    corpus = json.loads((HERE / "corpus.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for name, entry in corpus.items():
            raw = Path(tmp) / f"{name}.wav"
            subprocess.run(["espeak-ng", "-v", entry["voice"], "-s", "130", "-w", str(raw), entry["text"]], check=True)
            subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", str(HERE / f"{name}.flac")], check=True)


if __name__ == "__main__":
    main()
