"""The messages between the Triton stub and its engine-core process: msgpack headers, zero-copy PCM frames.

Every message is a ZMQ multipart message whose first frame is a msgpack map with ``kind``. Requests
(stub → core): ``submit`` (+ one frame: the request's ``WAV`` as 16-bit PCM ``[B, T]``, C order, little
endian), ``cancel`` (``ids``), ``stop``. Answers (core → stub): ``ready`` (the engine's name and
``multilingual``), ``failed`` (the engine could not load), ``result`` (per window its text and its
``RESULT`` JSON), ``error`` (a code of ``front.error_code`` and the message) and ``stats`` (the
scheduler's gauge values and the core's own). Audio is quantized to 16-bit PCM in the stub, so a 30 s
window crosses as 960 kB; log-Mel is computed in the core. Docs: docs/engines.md, "The engine core".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack  # type: ignore[import-untyped]
import numpy as np

from whisper_build.serving import contract
from whisper_build.serving.triton_model.batching import RequestWindows, parse_request

__all__ = [
    "PCM_SCALE",
    "Submitted",
    "decode_header",
    "decode_submit",
    "encode",
    "encode_submit",
    "from_pcm16",
    "to_pcm16",
]

PCM_SCALE = 32767.0
"""Full scale of 16-bit PCM: float samples in [-1, 1] map to [-32767, 32767]."""


def to_pcm16(wav: np.ndarray) -> np.ndarray:
    """float32 samples (clipped to [-1, 1]) → int16 PCM, same shape, C-contiguous."""
    return np.ascontiguousarray(np.rint(np.clip(wav, -1.0, 1.0) * PCM_SCALE).astype("<i2"))


def from_pcm16(pcm: np.ndarray) -> np.ndarray:
    """int16 PCM → float32 samples in [-1, 1]."""
    return pcm.astype(np.float32) / np.float32(PCM_SCALE)


def encode(header: dict[str, Any]) -> bytes:
    """One msgpack header frame."""
    return msgpack.packb(header, use_bin_type=True)


def decode_header(frame: bytes | memoryview) -> dict[str, Any]:
    """A header frame back to its map (raises ``ValueError`` when it is not one)."""
    header = msgpack.unpackb(frame, raw=False)
    if not isinstance(header, dict) or "kind" not in header:
        raise ValueError("engine-core message without a kind")
    return header


def encode_submit(
    request_id: int, level: int, timeout_s: float | None, request: RequestWindows, wav: np.ndarray
) -> list[Any]:
    """A ``submit`` message: header + the PCM frame (a view of the PCM array, sent without a copy).

    Args:
        request_id: the stub's id for the request (unique while it is open).
        level: priority level 1..3.
        timeout_s: seconds from the core's receipt by which a batch must take it (``None`` = none).
        request: the parsed request (its ``rows`` carry every optional input per row).
        wav: the request's ``WAV`` ``[B, T]`` float32 (validated by the parse).
    """
    pcm = to_pcm16(wav)
    rows = {name: values for name, values in request.rows.items()}
    header = {"kind": "submit", "id": request_id, "level": level, "timeout_s": timeout_s,
              "shape": list(pcm.shape), "rows": rows}  # fmt: skip
    return [encode(header), pcm.data.cast("B")]


@dataclass(frozen=True)
class Submitted:
    """A ``submit`` as the core reads it: the id, level, timeout and the request's windows (float32 again)."""

    request_id: int
    level: int
    timeout_s: float | None
    request: RequestWindows


def decode_submit(header: dict[str, Any], pcm_frame: bytes | memoryview) -> Submitted:
    """The request back from a ``submit`` header and its PCM frame (raises ``RequestError`` / ``ValueError``)."""
    batch, samples = (int(n) for n in header["shape"])
    pcm = np.frombuffer(pcm_frame, dtype="<i2").reshape(batch, samples)
    inputs: dict[str, np.ndarray | None] = {contract.WAV.name: from_pcm16(pcm)}
    for name, values in header["rows"].items():
        column = np.empty(len(values), dtype=object)
        column[:] = values
        inputs[name] = column.reshape(batch, 1)
    return Submitted(int(header["id"]), int(header["level"]), header.get("timeout_s"), parse_request(inputs))
