"""Batch buckets of the ``torch`` engine's static decoder: which batch sizes get a cache and a CUDA graph.

A static KV cache and a captured CUDA graph serve exactly one batch size (huggingface/transformers#32657
and #42454 on GitHub: a smaller batch on the same static cache fails; every distinct input shape records
its own graph). So the engine captures a fixed, small set of batch sizes at start-up — powers of
two up to the engine batch (``max_engine_batch``, itself bounded by Triton's ``max_batch_size``)
— and runs every batch padded to the smallest bucket that holds it; a batch larger than the
largest bucket is split into full largest-bucket chunks plus one padded remainder.

Pure Python (no torch): the choice is unit-tested on the CPU.
Docs: docs/engines.md, "The `torch` engine's decode path".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

__all__ = ["BucketChunk", "DecodeMode", "bucket_sizes", "choose_bucket", "decode_mode", "pad_to_bucket", "plan_chunks"]

T = TypeVar("T")

DecodeMode = Literal["graphs", "eager"]
"""``graphs``: one captured CUDA graph per bucket replays each decoder step; ``eager``: the same
static-cache step run op by op (the fallback, and the only mode on a CPU)."""


def bucket_sizes(max_batch: int) -> tuple[int, ...]:
    """Batch buckets for an engine batch of at most ``max_batch`` windows.

    Powers of two below ``max_batch``, then ``max_batch`` itself: 64 → (1, 2, 4, 8, 16, 32, 64);
    48 → (1, 2, 4, 8, 16, 32, 48); 1 → (1,). At most a factor of two of padding per batch, and
    ⌈log2(max_batch)⌉ + 1 graphs to capture.

    Raises:
        ValueError: ``max_batch`` < 1.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    sizes = []
    size = 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    sizes.append(max_batch)
    return tuple(sizes)


def choose_bucket(n: int, buckets: Sequence[int]) -> int:
    """Smallest bucket holding ``n`` windows.

    Raises:
        ValueError: ``n`` < 1, or more than the largest bucket (split with :func:`plan_chunks` first).
    """
    if n < 1:
        raise ValueError(f"a batch needs at least one window, got {n}")
    for size in sorted(buckets):
        if size >= n:
            return size
    raise ValueError(f"{n} windows exceed the largest bucket ({max(buckets)}); split the batch first")


@dataclass(frozen=True)
class BucketChunk:
    """One engine call: rows ``[start, stop)`` of the batch, run padded to ``bucket`` rows."""

    start: int
    stop: int
    bucket: int

    @property
    def size(self) -> int:
        """Real (unpadded) rows in this chunk."""
        return self.stop - self.start


def plan_chunks(n: int, buckets: Sequence[int]) -> list[BucketChunk]:
    """Split ``n`` windows into calls: full largest-bucket chunks, then the rest in its own bucket.

    ``n`` = 0 gives no chunk. 70 with buckets up to 64 → ``[0, 64) @ 64``, ``[64, 70) @ 8``.
    """
    largest = max(buckets)
    chunks = []
    for start in range(0, n, largest):
        stop = min(n, start + largest)
        chunks.append(BucketChunk(start, stop, choose_bucket(stop - start, buckets)))
    return chunks


def pad_to_bucket(items: Sequence[T], bucket: int) -> list[T]:
    """``items`` padded to ``bucket`` entries by repeating the last one (its output is discarded).

    Repeating a real row keeps the padded rows' arithmetic ordinary (no all-zero features, no
    empty prompt), so padding cannot produce NaNs that a shared kernel might see.

    Raises:
        ValueError: ``items`` is empty or longer than ``bucket``.
    """
    if not items:
        raise ValueError("cannot pad an empty batch")
    if len(items) > bucket:
        raise ValueError(f"{len(items)} rows do not fit bucket {bucket}")
    return [*items, *([items[-1]] * (bucket - len(items)))]


def decode_mode(cuda_graphs: bool, device_type: str) -> DecodeMode:
    """Which decode path the engine runs.

    Args:
        cuda_graphs: the engine parameter ``cuda_graphs`` (``false`` is the eager fall-back switch).
        device_type: ``cuda`` or ``cpu`` (``torch.device.type``).

    Returns:
        ``graphs`` only on a CUDA device with ``cuda_graphs`` on; ``eager`` otherwise (CUDA
        graphs need a GPU).
    """
    return "graphs" if cuda_graphs and device_type == "cuda" else "eager"
