"""``open_audio_file``: a file on disk decodes as its bytes do, read as it goes (bulk jobs stream inputs to disk)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import speech_samples as samples

from whisper_build.serving.audio import EmptyAudioError, NotAudioError, open_audio, open_audio_file


@pytest.mark.parametrize("fmt", ["wav_s16", "flac", "mp3"])
def test_file_decodes_like_its_bytes(tmp_path: Path, fmt: str) -> None:
    data = samples.encode(samples.tone(3.0, 22050), 22050, fmt)
    path = tmp_path / f"tone.{fmt}"
    path.write_bytes(data)
    with open_audio(data) as from_bytes, open_audio_file(path) as from_file:
        expected = np.concatenate(list(from_bytes.chunks()))
        got = np.concatenate(list(from_file.chunks()))
        assert (from_file.codec, from_file.declared_seconds) == (from_bytes.codec, from_bytes.declared_seconds)
    np.testing.assert_array_equal(got, expected)


def test_empty_and_non_audio_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    with pytest.raises(EmptyAudioError):
        open_audio_file(tmp_path / "empty.wav")
    with pytest.raises(NotAudioError):
        open_audio_file(tmp_path / "x.png")
