"""Audio input for the serving path: whatever users send -> 16 kHz mono float32 windows.

Public surface:
- :func:`decode_base64` — base64 text (optionally a ``data:audio/...;base64,`` URI) -> bytes.
- :func:`decode_audio` — container bytes (WAV/FLAC/OGG/Opus/MP3/M4A...) -> :class:`Audio`.
- :func:`split_windows` — long audio -> ≤ 30 s :class:`Window` s cut at quiet points.
- :func:`is_silent` — does a window hold no signal worth transcribing.
- :class:`AudioError` and its subclasses name what the caller must fix.
"""

from whisper_build.serving.audio.b64 import decode_base64
from whisper_build.serving.audio.decode import SAMPLE_RATE, Audio, decode_audio
from whisper_build.serving.audio.errors import (
    AudioError,
    AudioTooLongError,
    EmptyAudioError,
    InvalidBase64Error,
    NotAudioError,
)
from whisper_build.serving.audio.windows import Window, is_silent, split_windows

__all__ = [
    "SAMPLE_RATE",
    "Audio",
    "AudioError",
    "AudioTooLongError",
    "EmptyAudioError",
    "InvalidBase64Error",
    "NotAudioError",
    "Window",
    "decode_audio",
    "decode_base64",
    "is_silent",
    "split_windows",
]
