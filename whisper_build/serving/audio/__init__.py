"""Audio input for the serving path: whatever users send -> 16 kHz mono float32 windows.

Public surface:
- :func:`decode_base64` — base64 text (optionally a ``data:audio/...;base64,`` URI) -> bytes.
- :func:`open_audio` — container bytes (WAV/FLAC/OGG/Opus/MP3/M4A...) -> :class:`AudioStream`: the
  header's duration checked at once, then 16 kHz chunks decoded on demand (memory flat in length).
- :func:`open_audio_file` — the same for a file on disk, read as it decodes (bulk jobs).
- :func:`iter_windows` — a stream of chunks -> ≤ 30 s :class:`Window` s cut at quiet points, as it flows.
- :func:`decode_audio` / :func:`split_windows` — the same for a whole clip held in memory.
- :func:`is_silent` — does a window hold no signal worth transcribing.
- :class:`AudioError` and its subclasses name what the caller must fix.
Modules: ``b64``, ``decode`` (the stream) over ``readers`` (libsndfile, PyAV), ``windows``, ``errors``.
Docs: docs/gateway.md, "What happens to a request".
"""

from whisper_build.serving.audio.b64 import decode_base64
from whisper_build.serving.audio.decode import (
    SAMPLE_RATE,
    Audio,
    AudioStream,
    decode_audio,
    open_audio,
    open_audio_file,
)
from whisper_build.serving.audio.errors import (
    AudioError,
    AudioTooLongError,
    AudioTooShortError,
    EmptyAudioError,
    InvalidBase64Error,
    NotAudioError,
)
from whisper_build.serving.audio.windows import Window, is_silent, iter_windows, split_windows

__all__ = [
    "SAMPLE_RATE",
    "Audio",
    "AudioStream",
    "AudioError",
    "AudioTooLongError",
    "AudioTooShortError",
    "EmptyAudioError",
    "InvalidBase64Error",
    "NotAudioError",
    "Window",
    "decode_audio",
    "decode_base64",
    "is_silent",
    "iter_windows",
    "open_audio",
    "open_audio_file",
    "split_windows",
]
