"""A live session's model calls: a turn's decode after its context, the final decode's retry, failures.

:class:`TurnDecoder` sends one window request per decode at the live priority (the turn's audio after
earlier turns' audio and text, :class:`~.context.TurnContext`), tells the health recorder of each call's
outcome and maps a failed call to its error (:meth:`TurnDecoder.failure`). Silence is the model's verdict,
as for files: its own thresholds (``no_speech_threshold``, …; docs/serving.md) give a silent window no text.
Used by :class:`~.session.TranscriptionSession`. Docs: docs/gateway.md, "Live transcription".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from whisper_build.serving.contract import LIVE_PRIORITY, DecodeOptions
from whisper_build.serving.prompt import normalize_language
from whisper_build.serving.realtime.context import CONTEXT_SECONDS, TurnContext
from whisper_build.serving.realtime.events import TranscriptionConfig
from whisper_build.serving.realtime.limits import LiveLimits
from whisper_build.serving.realtime.ports import HealthRecorder, LiveMetrics
from whisper_build.serving.transcription.backend import BackendError, BackendTimeout, TranscriptionBackend
from whisper_build.serving.transcription.failures import Failure, counts_against_model, describe_failure
from whisper_build.serving.transcription.request import WindowRequest

__all__ = ["TurnDecoder"]


class TurnDecoder:
    """The model calls of one session.

    Args:
        backend: the model server (window requests go out with ``priority = LIVE_PRIORITY``).
        limits: the call deadline and the turn's longest audio.
        metrics: the live series (windows, final retries); health: told of model calls' outcomes.
        context: the session's completed turns, in front of each decode.
        transcription: the session's transcription settings now (model, language, prompt).
    """

    def __init__(
        self,
        backend: TranscriptionBackend,
        limits: LiveLimits,
        metrics: LiveMetrics,
        health: HealthRecorder,
        context: TurnContext,
        transcription: Callable[[], TranscriptionConfig],
    ) -> None:
        self.backend = backend
        self.limits = limits
        self.metrics = metrics
        self.health = health
        self.context = context
        self.transcription = transcription
        self._multilingual: bool | None = None  # the served model's, once asked (a language, or turn context)

    def failure(self, exc: BackendError) -> Failure:
        """A failed model call as the core maps it for every front end (the HTTP gateway's mapping)."""
        failure = describe_failure(
            exc,
            timeout_seconds=self.limits.call_timeout_seconds,
            max_audio_seconds=self.limits.max_turn_seconds,
            timeout_source="the live model-call deadline",
            timeout_advice="The server is busy: the session goes on with the next turn",
        )
        assert failure is not None  # every BackendError has a mapping
        return failure

    async def multilingual(self) -> bool | None:
        """Whether the served model is multilingual (asked once), ``None`` when the model server cannot say."""
        if self._multilingual is None:
            try:
                self._multilingual = (await self.backend.served_model(self.limits.call_timeout_seconds)).multilingual
            except BackendError:
                return None
        return self._multilingual

    async def decode(self, audio: npt.NDArray[np.float32], confirmed: list[str], final: bool = False) -> str:
        """The turn's words after ``confirmed`` (its ``audio`` decoded after earlier turns: ``context``).

        An update (``final`` false) is one decode without the temperature fallback: it is provisional,
        replaced by the next, and a fallback multiplies its cost (a 2-core CPU measured 40 s batches with
        four sessions' updates falling back); the final decode falls back as the file endpoint does.
        ``""`` when the model found no words, or silence by its own no-speech thresholds.
        """
        transcription = self.transcription()
        language = normalize_language(transcription.language)
        fixed = language is not None or (bool(self.context.turns) and await self.multilingual() is False)
        seconds = CONTEXT_SECONDS if fixed else 0.0
        window, prompt = self.context.window(audio, confirmed, transcription.prompt, language, seconds)
        request = WindowRequest(prompt=prompt, options=DecodeOptions(fallback=final), priority=LIVE_PRIORITY)
        self.metrics.windows.inc()
        try:
            results = await self.backend.infer([window], request, self.limits.call_timeout_seconds)
        except BackendError as exc:
            if counts_against_model(exc):  # a timeout or a refusal is not the model's fault
                self.health.record_failure("request", exc)
            raise
        self.health.record_success()
        return results[0].text  # "" for a window the model's no-speech thresholds call silent

    async def final(self, audio: npt.NDArray[np.float32], confirmed: list[str]) -> str:
        """The final decode's words after ``confirmed``, retried once when it missed its deadline.

        When the retry fails too, the turn ends with its confirmed words (``""`` here).

        Raises: BackendError: the decode failed and no word was confirmed (the turn is ``failed``).
        """
        try:
            return await self.decode(audio, confirmed, final=True)
        except BackendTimeout:
            self.metrics.final_retries.inc()
        try:
            return await self.decode(audio, confirmed, final=True)
        except BackendError:
            if not confirmed:
                raise
            return ""
