"""Silero VAD v6 streamed per session, and the ``server_vad`` turn detector (docs/gateway.md, "Live transcription").

The model is the ONNX file bundled in the pinned faster-whisper wheel (``assets/silero_vad_v6.onnx``), run
with onnxruntime (a faster-whisper dependency): no download and no torch in the gateway image (silero-vad's
``VADIterator`` needs torch). faster-whisper wraps it for whole files (state reset per call); here each
session keeps its own LSTM state and 64-sample context across 512-sample (32 ms) chunks. One
``InferenceSession`` per process is shared; its runs are serialised by the event loop.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from whisper_build.serving.realtime.timeline import samples_to_ms

__all__ = ["CHUNK_SAMPLES", "SileroStream", "TurnDetector", "TurnEvent", "VadParams"]

CHUNK_SAMPLES = 512
"""Samples per VAD step at 16 kHz (32 ms)."""
CONTEXT_SAMPLES = 64


@functools.cache
def _model() -> Any:
    import onnxruntime  # type: ignore[import-untyped]

    options = onnxruntime.SessionOptions()
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    spec = importlib.util.find_spec("faster_whisper")  # its files only: importing it would load ctranslate2
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the live VAD needs the faster-whisper package (its assets/silero_vad_v6.onnx)")
    path = os.path.join(spec.submodule_search_locations[0], "assets", "silero_vad_v6.onnx")
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"], sess_options=options)


class SileroStream:
    """Speech probability of each 32 ms chunk of one audio stream (16 kHz float32), state kept between calls."""

    def __init__(self) -> None:
        self._model = _model()
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)

    def probability(self, chunk: npt.NDArray[np.float32]) -> float:
        """Speech probability in [0, 1] of one chunk of exactly :data:`CHUNK_SAMPLES` samples."""
        frame = np.concatenate([self._context, chunk])[None, :]
        out, self._h, self._c = self._model.run(None, {"input": frame, "h": self._h, "c": self._c})
        self._context = chunk[-CONTEXT_SAMPLES:]
        return float(np.asarray(out).reshape(-1)[0])


@dataclass(frozen=True)
class VadParams:
    """OpenAI's ``server_vad`` parameters.

    Attributes:
        threshold: speech probability that starts speech (0–1); speech ends below ``threshold - 0.15``.
        prefix_padding_ms: audio kept before the detected start (reported in ``audio_start_ms``).
        silence_duration_ms: silence that ends a turn.
        idle_timeout_ms: silence after a turn that commits an empty turn (``timeout_triggered``); ``None``: off.
    """

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    idle_timeout_ms: int | None = None


@dataclass(frozen=True)
class TurnEvent:
    """A turn boundary, at ``ms`` of session audio (:func:`~.timeline.samples_to_ms`).

    ``speech_chunks`` (``stopped`` only): the speech chunks of the turn that stopped; a turn that starts in
    the same audio counts its own afresh in :attr:`TurnDetector.speech_chunks`.
    """

    kind: Literal["started", "stopped", "timeout"]
    ms: int
    speech_chunks: int = 0


class TurnDetector:
    """Speech start/stop over a session's 16 kHz audio, on audio time (the pace of appends does not matter).

    ``feed`` returns the boundaries the new audio crossed. Hysteresis as silero-vad's ``VADIterator``:
    speech starts at a chunk ≥ ``threshold`` and stops after ``silence_duration_ms`` below
    ``threshold - 0.15``. ``speech_chunks`` counts chunks ≥ ``threshold`` in the current turn.
    """

    def __init__(self, params: VadParams, stream: SileroStream | None = None) -> None:
        self.params = params
        self.stream = stream or SileroStream()
        self.samples = 0  # session samples the detector has seen (whole chunks)
        self.in_speech = False
        self.speech_chunks = 0
        self._pending = np.zeros(0, dtype=np.float32)
        self._silent_since: int | None = None
        self._idle_since = 0

    def feed(self, samples: npt.NDArray[np.float32]) -> list[TurnEvent]:
        """Boundaries crossed by ``samples`` (16 kHz float32, appended to the session's audio)."""
        events: list[TurnEvent] = []
        buffer = np.concatenate([self._pending, samples]) if len(self._pending) else samples
        whole = len(buffer) - len(buffer) % CHUNK_SAMPLES
        p = self.params
        for start in range(0, whole, CHUNK_SAMPLES):
            probability = self.stream.probability(buffer[start : start + CHUNK_SAMPLES])
            self.samples += CHUNK_SAMPLES
            if probability >= p.threshold:
                self._silent_since = None
                if not self.in_speech:
                    self.in_speech = True
                    self.speech_chunks = 0
                    begin = self.samples - CHUNK_SAMPLES
                    events.append(TurnEvent("started", max(0, samples_to_ms(begin) - p.prefix_padding_ms)))
                self.speech_chunks += 1
            elif self.in_speech and probability < p.threshold - 0.15:
                if self._silent_since is None:
                    self._silent_since = self.samples - CHUNK_SAMPLES
                if samples_to_ms(self.samples - self._silent_since) >= p.silence_duration_ms:
                    self.in_speech = False
                    self._silent_since = None
                    self._idle_since = self.samples
                    events.append(TurnEvent("stopped", samples_to_ms(self.samples), self.speech_chunks))
            if (
                not self.in_speech
                and p.idle_timeout_ms is not None
                and samples_to_ms(self.samples - self._idle_since) >= p.idle_timeout_ms
            ):
                events.append(TurnEvent("timeout", samples_to_ms(self.samples)))
                self._idle_since = self.samples
        self._pending = buffer[whole:].copy()
        return events

    def end_turn(self) -> None:
        """Forget the current turn (a forced or manual commit): the next speech chunk starts a new one."""
        self.in_speech = False
        self.speech_chunks = 0
        self._silent_since = None
        self._idle_since = self.samples
