"""The serving wire contract between the gateway and the Triton ``whisper`` and ``speaker`` models (docs/contracts.md §5).

Dependency-free (standard library and the floor :mod:`whisper_build.contracts` only), so the gateway,
the Triton model and ``settings`` import the same definitions: :data:`INPUTS` / :data:`OUTPUTS` (the
tensor table; ``config.pbtxt``'s sections are :func:`render_config_tensors`, the docs table is
:func:`markdown_table`, ``make model-contract`` rewrites both and a test checks they are current),
:class:`DecodeOptions` (what ``TIMESTAMPS``, ``WORD_TIMESTAMPS`` and ``TEMPERATURE`` carry) and
:data:`EngineKind` (the model-config parameter ``engine``, defined in :mod:`whisper_build.contracts.engines`
and re-exported here). Tensor names occur as string constants only here (a test checks
``whisper_build/``); elsewhere they are ``contract.WAV.name`` and so on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from whisper_build.contracts.engines import EngineKind

__all__ = [
    "AUDIO",
    "BULK_PRIORITY",
    "INPUTS",
    "LIVE_PRIORITY",
    "ENGINE_CORE_METRICS",
    "ENGINE_CORE_RESTARTING",
    "FALLBACK",
    "MAX_SPEAKERS",
    "MIN_SPEAKERS",
    "OUTPUTS",
    "PRIORITY_LEVELS",
    "PRIORITY_PARAMETER",
    "REFERENCES",
    "REFERENCE_LENS",
    "RESULT",
    "SCHEDULER_ACTIVE_ROWS",
    "SCHEDULER_FINISHED",
    "SCHEDULER_METRICS",
    "SCHEDULER_QUEUED",
    "SCHEDULER_REJECTED",
    "SCHEDULER_STEPS",
    "SCHEDULER_STEP_ROWS",
    "REPETITION_PENALTY",
    "SPEAKER_INPUTS",
    "SPEAKER_MODEL",
    "SPEAKER_OUTPUTS",
    "SYNC_PRIORITY",
    "TEMPERATURE",
    "TEXT_PREFIX",
    "TIMEOUT_PARAMETER",
    "TIMESTAMPS",
    "TRANSCRIPTS",
    "TURNS",
    "WAV",
    "WAV_LENS",
    "WINDOW_SECONDS",
    "WORD_TIMESTAMPS",
    "DecodeOptions",
    "EngineKind",
    "Tensor",
    "markdown_table",
    "render_config_tensors",
]

PRIORITY_LEVELS = 3
"""Priority levels of the model's own scheduler (``triton_model/scheduler.py``; a request sends its level as
:data:`PRIORITY_PARAMETER`): every waiting request of level 1 is batched before any of level 2, and so on; each
level has its own bounded queue (``BatchingConfig.max_queue_size``, bulk ``bulk_max_queue_size``).
"""
LIVE_PRIORITY = 1
"""Live transcription sessions' level (:mod:`whisper_build.serving.realtime`): a session's update waits
for nothing else."""
SYNC_PRIORITY = 2
"""The synchronous requests' level, the default (a request without :data:`PRIORITY_PARAMETER` gets it)."""
BULK_PRIORITY = 3
"""The bulk workers' level: taken only when no live or synchronous request waits, in a queue of its own
(``bulk_max_queue_size``), so bulk work never fills the others' queue."""

PRIORITY_PARAMETER = "whisper_priority"
"""Request parameter (int, ``1..PRIORITY_LEVELS``) carrying a request's priority level to the model's own
scheduler, which forms the batches behind a decoupled front (Triton's priority field is reserved and does
not reach a python model; tritonclient refuses reserved names such as ``priority`` as custom parameters)."""
TIMEOUT_PARAMETER = "whisper_timeout_ms"
"""Request parameter (int, milliseconds from when the request was sent): a window still waiting for the
model's scheduler past it is answered with an error and never decoded."""

SCHEDULER_QUEUED = "whisper_scheduler_queued_windows"
"""Gauge ``{level}``: windows waiting in the model's scheduler, not yet in a batch or a decoding row."""
SCHEDULER_ACTIVE_ROWS = "whisper_scheduler_active_rows"
"""Gauge: windows being decoded now (the rows of the running batch, or the in-flight scheduler's active rows)."""
SCHEDULER_FINISHED = "whisper_scheduler_finished_windows_total"
"""Counter: windows whose decode finished (answered); the health rules' sign of progress."""
SCHEDULER_STEPS = "whisper_scheduler_steps_total"
"""Counter: engine passes: static batches, or the in-flight scheduler's decode steps."""
SCHEDULER_STEP_ROWS = "whisper_scheduler_step_rows_total"
"""Counter: rows summed over :data:`SCHEDULER_STEPS`; their ratio is the mean active rows per step."""
SCHEDULER_REJECTED = "whisper_scheduler_rejected_windows_total"
"""Counter ``{level, reason}``: windows refused or dropped: ``queue_full``, ``timeout``, ``cancelled``."""
SCHEDULER_METRICS: tuple[str, ...] = (
    SCHEDULER_QUEUED,
    SCHEDULER_ACTIVE_ROWS,
    SCHEDULER_FINISHED,
    SCHEDULER_STEPS,
    SCHEDULER_STEP_ROWS,
    SCHEDULER_REJECTED,
)
"""The model scheduler's Triton custom metrics (``pb_utils.MetricFamily``, on Triton's metrics port); each
carries the ``model`` label like Triton's own series. ``level`` values: ``live``, ``sync``, ``bulk``."""

ENGINE_CORE_RESTARTING = "the engine core is restarting"
"""Start of the UNAVAILABLE message of a request the model could not serve because its engine-core process
died (or is being started again); the gateway reads it as :class:`ModelRestarting`'s sibling ``CoreRestarting``:
/ping 503 at once, no reload (the model restarts its core itself)."""

ENGINE_CORE_METRICS: tuple[str, ...] = (
    "whisper_engine_core_up",
    "whisper_engine_core_restarts_total",
    "whisper_engine_core_step_ms",
    "whisper_engine_core_rows_per_step",
    "whisper_engine_core_encoder_batch",
)
"""The engine-core process's gauges on Triton's metrics port (``model`` label): up (1 while a core serves),
restarts (cores started after a death), and over the last second: host ms per engine pass (a static batch
or an in-flight decode step), rows per pass, windows per encoder pass. Queue depth per priority level is
:data:`SCHEDULER_QUEUED`."""

TritonType = Literal["TYPE_FP32", "TYPE_INT32", "TYPE_BOOL", "TYPE_STRING"]


@dataclass(frozen=True)
class Tensor:
    """One input or output of the Triton ``whisper`` model.

    Attributes:
        name: the tensor's name on the wire.
        data_type: Triton's config type (``model_config.proto`` ``DataType``).
        dims: shape of one batch item (Triton prepends the batch dimension ``B``).
        optional: the model accepts requests without it (inputs only).
        meaning: what it carries, units and default (rendered into config.pbtxt and the docs).
        default: the value the model takes for an absent optional per-row input, and what the
            gateway sends when nothing else sets it; ``None`` for ``WAV``/``WAV_LENS``/outputs.
        option: the :class:`DecodeOptions` field it carries, if any.
        ragged: ``allow_ragged_batch`` (rows of different lengths may share a batch).
    """

    name: str
    data_type: TritonType
    dims: tuple[int, ...]
    optional: bool
    meaning: str
    default: bool | float | bytes | None = None
    option: str | None = None
    ragged: bool = False

    @property
    def wire_type(self) -> str:
        """The client's datatype string (``FP32``, ``INT32``, ``BOOL``, ``BYTES`` for ``TYPE_STRING``)."""
        return "BYTES" if self.data_type == "TYPE_STRING" else self.data_type.removeprefix("TYPE_")

    @property
    def numpy_type(self) -> str:
        """The numpy dtype name of its arrays (``object`` for strings)."""
        return {"TYPE_FP32": "float32", "TYPE_INT32": "int32", "TYPE_BOOL": "bool", "TYPE_STRING": "object"}[
            self.data_type
        ]


WINDOW_SECONDS = 30.0
"""Longest window one ``WAV`` row carries, seconds: Whisper's fixed input length (openai/whisper
``whisper/audio.py``, ``CHUNK_LENGTH = 30``). Here for the commands that size windows without numpy."""

WAV = Tensor(
    "WAV", "TYPE_FP32", (-1,), False,
    "16 kHz mono samples of one window (≤ 30 s, 480 000), zero-padded to the batch's longest row",
    ragged=True,
)  # fmt: skip
WAV_LENS = Tensor("WAV_LENS", "TYPE_INT32", (1,), True, "valid samples of the row (the rest is padding); default: all")
TEXT_PREFIX = Tensor(
    "TEXT_PREFIX", "TYPE_STRING", (1,), True,
    "decoder prompt, UTF-8: plain context text or the special-token form of "
    "`DecodePrompt.to_text_prefix()` (the task travels in it; text after `<|notimestamps|>` is a forced prefix: "
    "the window's text is what follows it); default: none",
    default=b"",
)  # fmt: skip
REPETITION_PENALTY = Tensor(
    "REPETITION_PENALTY", "TYPE_FP32", (1,), True, "repetition penalty > 0; default 1.0 (none)", default=1.0
)
TIMESTAMPS = Tensor(
    "TIMESTAMPS", "TYPE_BOOL", (1,), True, "segments from timestamp tokens; default false",
    default=False, option="timestamps",
)  # fmt: skip
WORD_TIMESTAMPS = Tensor(
    "WORD_TIMESTAMPS", "TYPE_BOOL", (1,), True,
    "word timings (implies TIMESTAMPS; an engine without word alignment answers INVALID_ARG); default false",
    default=False, option="word_timestamps",
)  # fmt: skip
TEMPERATURE = Tensor(
    "TEMPERATURE", "TYPE_FP32", (1,), True, "first fallback temperature, 0–1; default 0",
    default=0.0, option="temperature",
)  # fmt: skip
FALLBACK = Tensor(
    "FALLBACK", "TYPE_BOOL", (1,), True,
    "re-decode at higher temperatures when the thresholds fail (false: one decode at TEMPERATURE); default true",
    default=True, option="fallback",
)  # fmt: skip
TRANSCRIPTS = Tensor(
    "TRANSCRIPTS", "TYPE_STRING", (1,), False, "the window's text, UTF-8 (for old clients); empty for silence"
)
RESULT = Tensor(
    "RESULT", "TYPE_STRING", (1,), False,
    "one JSON object per window (`whisper_build.serving.results.WindowResult`): text, segments "
    "(window-relative times, words), avg_logprob, compression_ratio, no_speech_prob, temperature, "
    "temperatures, language",
)  # fmt: skip

INPUTS: tuple[Tensor, ...] = (
    WAV,
    WAV_LENS,
    TEXT_PREFIX,
    REPETITION_PENALTY,
    TIMESTAMPS,
    WORD_TIMESTAMPS,
    TEMPERATURE,
    FALLBACK,
)
"""The model's inputs, in config order."""
OUTPUTS: tuple[Tensor, ...] = (TRANSCRIPTS, RESULT)
"""The model's outputs, in config order."""

SPEAKER_MODEL = "speaker"
"""Triton name of the speaker model (diarization beside ``whisper``; no batching: dims are whole shapes)."""
AUDIO = Tensor("AUDIO", "TYPE_FP32", (-1,), False, "16 kHz mono samples of the whole file (clipped to ±1)")
MIN_SPEAKERS = Tensor("MIN_SPEAKERS", "TYPE_INT32", (1,), True, "fewest speakers, ≥ 1; default 1", default=1)
MAX_SPEAKERS = Tensor("MAX_SPEAKERS", "TYPE_INT32", (1,), True, "most speakers, ≤ 15; default 15", default=15)
REFERENCES = Tensor(
    "REFERENCES", "TYPE_FP32", (-1,), True, "known speakers' 16 kHz reference clips, concatenated; default: none"
)
REFERENCE_LENS = Tensor("REFERENCE_LENS", "TYPE_INT32", (-1,), True, "samples of each clip in REFERENCES, in order")
TURNS = Tensor(
    "TURNS", "TYPE_FP32", (-1, 3), False,
    "one row per speaker turn, in time order: start s, end s, speaker index (below the number of "
    "references: that known speaker; the others number the unnamed speakers by first appearance)",
)  # fmt: skip
SPEAKER_INPUTS: tuple[Tensor, ...] = (AUDIO, MIN_SPEAKERS, MAX_SPEAKERS, REFERENCES, REFERENCE_LENS)
"""The speaker model's inputs, in config order."""
SPEAKER_OUTPUTS: tuple[Tensor, ...] = (TURNS,)
"""The speaker model's outputs."""


@dataclass(frozen=True)
class DecodeOptions:
    """Per-window decoding options (the Triton inputs ``TIMESTAMPS``, ``WORD_TIMESTAMPS``, ``TEMPERATURE``, ``FALLBACK``).

    Attributes:
        timestamps: segment timestamps from Whisper's timestamp tokens.
        word_timestamps: word timings (implies ``timestamps`` in the model).
        temperature: first temperature; the model's fallback continues ``+ increment`` up to 1.0.
        fallback: whether a decode that fails the thresholds is re-decoded at the next temperature; ``False``
            for a provisional decode that is replaced soon anyway (a live session's update): one decode, its
            cost bounded (each fallback pass samples ``best_of`` hypotheses of up to ``max_new_tokens``).
    """

    timestamps: bool = False
    word_timestamps: bool = False
    temperature: float = 0.0
    fallback: bool = True

    @property
    def timed(self) -> bool:
        """Whether the window decodes with timestamp tokens: segment times asked, or word times (which imply them)."""
        return self.timestamps or self.word_timestamps

    @classmethod
    def transcript(cls, word_timestamps: bool = False, temperature: float = 0.0) -> DecodeOptions:
        """What every transcript the gateway or a bulk worker makes is decoded with, whatever its output format.

        Timestamp tokens always on, so json, text, srt, vtt, verbose_json, ``stream=true``,
        ``/invocations`` and bulk outputs of one audio carry the same words (the mode that decodes
        them changes the words). Chosen by measurement: docs/serving.md ("One transcript per audio").
        The fields' defaults above stay the model's defaults for an absent input.
        """
        return cls(timestamps=True, word_timestamps=word_timestamps, temperature=temperature)


def _config_entry(tensor: Tensor, last: bool) -> list[str]:
    lines = [
        "  {",
        f"    # {tensor.meaning}",
        f'    name: "{tensor.name}"',
        f"    data_type: {tensor.data_type}",
        f"    dims: [ {', '.join(str(d) for d in tensor.dims)} ]",
    ]
    if tensor.optional:
        lines.append("    optional: true")
    if tensor.ragged:
        lines.append("    # Requests of different lengths may share a batch: the python backend gets them one by one.")
        lines.append("    allow_ragged_batch: true")
    lines.append("  }" if last else "  },")
    return lines


def render_config_tensors(inputs: tuple[Tensor, ...] | None = None, outputs: tuple[Tensor, ...] | None = None) -> str:
    """The ``input [...]`` and ``output [...]`` sections of ``config.pbtxt`` (protobuf text format), from the table.

    Default: the ``whisper`` model's (:data:`INPUTS`, :data:`OUTPUTS`, read at call time).
    """
    lines: list[str] = []
    for section, tensors in (("input", inputs or INPUTS), ("output", outputs or OUTPUTS)):
        lines.append(f"{section} [")
        for i, tensor in enumerate(tensors):
            lines += _config_entry(tensor, i == len(tensors) - 1)
        lines.append("]")
    return "\n".join(lines) + "\n"


def markdown_table(inputs: tuple[Tensor, ...] | None = None, outputs: tuple[Tensor, ...] | None = None) -> str:
    """The Markdown table of ``inputs`` and ``outputs`` (default: the ``whisper`` model's; docs/contracts.md §5)."""
    rows = [
        "| tensor | direction | type | dims per row | optional | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for direction, tensors in (("input", inputs or INPUTS), ("output", outputs or OUTPUTS)):
        for t in tensors:
            dims = f"[{', '.join(str(d) for d in t.dims)}]"
            rows.append(
                f"| `{t.name}` | {direction} | {t.data_type.removeprefix('TYPE_')} | `{dims}` | {'yes' if t.optional else 'no'} | {t.meaning} |"
            )
    return "\n".join(rows) + "\n"
