"""The model server as every front end sees it: one Protocol, its errors and the wrapper base.

:class:`TranscriptionBackend` is what the window pipeline needs (one verb per operation: ``infer``
a window batch, ``diarize`` a whole file, ``served_model``, ``reload``, ``close``); one window batch crosses it as one
:class:`~whisper_build.serving.transcription.request.WindowRequest`.
:class:`~whisper_build.serving.transcription.triton.TritonBackend` implements it over gRPC;
:class:`DelegatingBackend` is the base of the wrappers (recovery, bulk admission, yielding), which
forward the request unchanged. Docs: docs/contracts.md §5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from settings.engines import ENGINE_PROFILES, profile
from whisper_build.serving.diarization.speakers import SpeakerOptions, Turn
from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.request import WindowRequest

__all__ = [
    "BackendError",
    "BackendRejected",
    "BackendTimeout",
    "BackendUnavailable",
    "CoreRestarting",
    "DelegatingBackend",
    "ModelFailed",
    "ModelRestarting",
    "ServedModel",
    "TranscriptionBackend",
    "WindowRequest",
]


class BackendError(Exception):
    """The model server failed the request (answered as 502)."""


class BackendUnavailable(BackendError):
    """The model server cannot be reached or the model is not loaded (answered as 503)."""


class ModelRestarting(BackendUnavailable):
    """The model's python stub process died (Triton: "Stub process '…' is not healthy"); 503 until it is loaded again.

    A window's inference is idempotent, so the gateway retries it once on the reloaded model
    (:mod:`whisper_build.serving.transcription.recovery`).
    """


class CoreRestarting(BackendUnavailable):
    """The model's engine-core process died and the model is starting a new one (503, retry after a pause).

    The model restarts its core itself, so the gateway reports it on /ping at once and does not reload.
    """


class ModelFailed(BackendUnavailable):
    """A model that died on every load was marked failed (the ``speaker`` model: ``diarization.self_test``).

    Answered 503 at once with the cause and ``x-should-retry: false``: retrying cannot help until the
    pod is fixed. Does not count against the ``whisper`` model's health.
    """


class BackendTimeout(BackendError):
    """The model server did not answer within the deadline (answered as 504)."""


class BackendRejected(BackendError):
    """The model refused the request as invalid for it (Triton INVALID_ARG; answered as 400).

    E.g. a non-English language on an English-only model, or word timestamps on tensorrt_llm.
    """


@dataclass(frozen=True)
class ServedModel:
    """What the model server's config says about the served model (docs/contracts.md §5).

    Attributes:
        name: the model's name (Triton config ``name``, e.g. ``whisper``).
        max_batch_size: most windows one request may carry.
        multilingual: the ``multilingual`` parameter; ``None`` when the config does not say.
        engine: the ``engine`` parameter (``ctranslate2``, ``tensorrt_llm``, ``torch``), if any.
    """

    name: str
    max_batch_size: int
    multilingual: bool | None = None
    engine: str | None = None

    @property
    def word_timings(self) -> bool:
        """Whether the served engine gives word timings (its profile's; ``True`` when the config names none)."""
        return self.engine not in ENGINE_PROFILES or profile(self.engine).word_timings

    @classmethod
    def from_triton_config(cls, config: dict[str, Any]) -> ServedModel:
        """From Triton's model config as JSON (``get_model_config(..., as_json=True)["config"]``).

        Raises:
            BackendError: the config lacks a name.
        """
        parameters = {k: (v or {}).get("string_value") for k, v in (config.get("parameters") or {}).items()}
        multilingual = parameters.get("multilingual")
        if not config.get("name"):
            raise BackendError("Triton returned a model config without a name")
        return cls(
            name=str(config["name"]),
            max_batch_size=max(1, int(config.get("max_batch_size", 1))),
            multilingual=None if multilingual not in ("true", "false") else multilingual == "true",
            engine=parameters.get("engine"),
        )


class TranscriptionBackend(Protocol):
    """What the window pipeline needs from a model server."""

    async def served_model(self, timeout: float) -> ServedModel:
        """The served model's config (read once, then cached until :meth:`reload`).

        Raises: BackendUnavailable, BackendTimeout, BackendError.
        """
        ...

    async def infer(
        self, windows: Sequence[npt.NDArray[np.float32]], request: WindowRequest, timeout: float
    ) -> list[WindowResult]:
        """Decode each window (16 kHz mono float32, ≤ 30 s) with ``request``'s prompt and options.

        Args:
            windows: the batch, in audio order.
            request: prompt, repetition penalty and options, the same for every window.
            timeout: deadline of the whole batch, seconds.

        Returns: one :class:`WindowResult` per window, in order.
        Raises: BackendRejected, BackendUnavailable, BackendTimeout, BackendError.
        """
        ...

    async def diarize(self, samples: npt.NDArray[np.float32], options: SpeakerOptions, timeout: float) -> list[Turn]:
        """Speaker turns of a whole file (16 kHz mono float32 ``[n]``) from the speaker model, in time order.

        Cancelling the awaiting task cancels the call (the model skips a request cancelled while queued).
        Raises: BackendRejected (bad counts or a reference without speech), BackendUnavailable (no
        speaker model loaded), BackendTimeout, BackendError.
        """
        ...

    async def speakers_served(self, timeout: float) -> bool:
        """Whether the model server has the speaker model at all (read once, then cached).

        False means speakers are off on this server (a repository rendered without it: the speakers
        install set is missing, or ``WHISPER_TRITON_SPEAKER__ENABLED=false``), a state a request cannot
        change; a speaker model that is there but not ready yet still answers True.
        Raises: BackendUnavailable, BackendTimeout, BackendError.
        """
        ...

    async def speaker_problem(self, timeout: float) -> str | None:
        """Why the speaker model refuses every request (it was marked failed), else ``None`` (serving, off or busy).

        A probe with no audio: a serving model refuses it as invalid at once.
        """
        ...

    async def reload(self, timeout: float) -> None:
        """Ask the model server to load the model again (repair after its runtime died).

        Raises: BackendUnavailable, BackendTimeout, BackendError.
        """
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class DelegatingBackend:
    """A :class:`TranscriptionBackend` that forwards every call to ``backend``; wrappers override what they add to."""

    def __init__(self, backend: TranscriptionBackend) -> None:
        self.backend = backend

    async def served_model(self, timeout: float) -> ServedModel:
        """The wrapped backend's."""
        return await self.backend.served_model(timeout)

    async def infer(
        self, windows: Sequence[npt.NDArray[np.float32]], request: WindowRequest, timeout: float
    ) -> list[WindowResult]:
        """The wrapped backend's, with ``request`` unchanged."""
        return await self.backend.infer(windows, request, timeout)

    async def diarize(self, samples: npt.NDArray[np.float32], options: SpeakerOptions, timeout: float) -> list[Turn]:
        """The wrapped backend's."""
        return await self.backend.diarize(samples, options, timeout)

    async def speakers_served(self, timeout: float) -> bool:
        """The wrapped backend's."""
        return await self.backend.speakers_served(timeout)

    async def speaker_problem(self, timeout: float) -> str | None:
        """The wrapped backend's."""
        return await self.backend.speaker_problem(timeout)

    async def reload(self, timeout: float) -> None:
        """The wrapped backend's."""
        await self.backend.reload(timeout)

    async def close(self) -> None:
        """The wrapped backend's."""
        await self.backend.close()
