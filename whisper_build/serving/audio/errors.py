"""Errors raised by :mod:`whisper_build.serving.audio`; each message tells the caller what to fix.

Docs: docs/gateway.md, "Errors".
"""


class AudioError(ValueError):
    """Base class: the audio a caller sent cannot be used."""


class InvalidBase64Error(AudioError):
    """The text is not valid base64 (standard or URL-safe alphabet, optional data URI)."""


class NotAudioError(AudioError):
    """The bytes are not a container/codec FFmpeg can decode, or hold no audio stream."""


class EmptyAudioError(AudioError):
    """The payload is empty or decodes to zero samples."""


class AudioTooShortError(AudioError):
    """The audio decodes to fewer seconds than the configured minimum (OpenAI's ``audio_too_short``).

    Attributes: ``min_seconds`` (the minimum that was not reached).
    """

    def __init__(self, message: str, min_seconds: float) -> None:
        super().__init__(message)
        self.min_seconds = min_seconds


class AudioTooLongError(AudioError):
    """The audio is longer than the configured limit.

    Attributes: ``limit_seconds`` (the limit that was exceeded).
    """

    def __init__(self, message: str, limit_seconds: float) -> None:
        super().__init__(message)
        self.limit_seconds = limit_seconds
