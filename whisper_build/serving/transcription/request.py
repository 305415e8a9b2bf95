"""What every window of one request is decoded with: the one value that crosses the backend seam.

:class:`WindowRequest` is built by the front end (a route, the stream, a bulk job) and travels
unchanged through :meth:`~whisper_build.serving.transcription.backend.TranscriptionBackend.infer`
and every wrapper down to the Triton inputs. Docs: docs/contracts.md §5.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.prompt import DecodePrompt

__all__ = ["WindowRequest"]


@dataclass(frozen=True)
class WindowRequest:
    """What every window of one request is decoded with.

    Attributes:
        prompt: decoder prompt, sent to every window as ``TEXT_PREFIX`` (:meth:`text_prefix`).
        repetition_penalty: ``REPETITION_PENALTY`` (1.0 = none).
        options: timestamps / words / temperature.
        priority: the model server's priority level for these windows (``contract.LIVE_PRIORITY``
            …); 0 = the backend's own (its constructor's ``priority``).
    """

    prompt: DecodePrompt = field(default_factory=DecodePrompt)
    repetition_penalty: float = 1.0
    options: DecodeOptions = field(default_factory=DecodeOptions)
    priority: int = 0

    def text_prefix(self) -> str:
        """The prompt as the special-token string of ``TEXT_PREFIX``."""
        return self.prompt.to_text_prefix()
