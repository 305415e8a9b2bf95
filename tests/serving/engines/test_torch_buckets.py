"""Batch buckets of the torch engine's static decoder (whisper_build.serving.engines.buckets): no torch needed."""

from __future__ import annotations

import pytest

from whisper_build.serving.engines.buckets import (
    BucketChunk,
    bucket_sizes,
    choose_bucket,
    decode_mode,
    pad_to_bucket,
    plan_chunks,
)


@pytest.mark.parametrize(
    ("max_batch", "expected"),
    [
        (64, (1, 2, 4, 8, 16, 32, 64)),
        (48, (1, 2, 4, 8, 16, 32, 48)),
        (16, (1, 2, 4, 8, 16)),
        (3, (1, 2, 3)),
        (1, (1,)),
    ],
)
def test_buckets_are_powers_of_two_bounded_by_the_engine_batch(max_batch, expected):
    assert bucket_sizes(max_batch) == expected


def test_a_non_positive_engine_batch_is_refused():
    with pytest.raises(ValueError, match="max_batch must be >= 1, got 0"):
        bucket_sizes(0)


@pytest.mark.parametrize(("n", "bucket"), [(1, 1), (2, 2), (3, 4), (5, 8), (17, 32), (33, 48), (48, 48)])
def test_the_smallest_bucket_that_holds_the_batch_is_chosen(n, bucket):
    assert choose_bucket(n, bucket_sizes(48)) == bucket


@pytest.mark.parametrize(("n", "message"), [(0, "at least one window"), (65, "exceed the largest bucket \\(64\\)")])
def test_choosing_outside_the_buckets_fails(n, message):
    with pytest.raises(ValueError, match=message):
        choose_bucket(n, bucket_sizes(64))


def test_a_batch_above_the_largest_bucket_is_split_into_full_chunks_and_a_padded_rest():
    assert plan_chunks(70, bucket_sizes(64)) == [BucketChunk(0, 64, 64), BucketChunk(64, 70, 8)]
    assert plan_chunks(128, bucket_sizes(64)) == [BucketChunk(0, 64, 64), BucketChunk(64, 128, 64)]
    assert plan_chunks(3, bucket_sizes(64)) == [BucketChunk(0, 3, 4)]
    assert plan_chunks(0, bucket_sizes(64)) == []
    assert [c.size for c in plan_chunks(100, bucket_sizes(16))] == [16] * 6 + [4]


def test_every_row_lands_in_exactly_one_chunk_that_fits_its_bucket():
    buckets = bucket_sizes(24)
    for n in range(1, 80):
        chunks = plan_chunks(n, buckets)
        rows = [r for c in chunks for r in range(c.start, c.stop)]
        assert rows == list(range(n))
        assert all(c.bucket in buckets and c.size <= c.bucket < 2 * c.size + (c.size == 1) for c in chunks)


def test_padding_repeats_the_last_row_up_to_the_bucket():
    assert pad_to_bucket(["a", "b", "c"], 4) == ["a", "b", "c", "c"]
    assert pad_to_bucket(["a"], 1) == ["a"]


@pytest.mark.parametrize(
    ("items", "bucket", "message"), [([], 4, "empty"), (["a", "b", "c"], 2, "do not fit bucket 2")]
)
def test_padding_refuses_an_empty_or_oversized_batch(items, bucket, message):
    with pytest.raises(ValueError, match=message):
        pad_to_bucket(items, bucket)


@pytest.mark.parametrize(
    ("cuda_graphs", "device", "mode"),
    [(True, "cuda", "graphs"), (False, "cuda", "eager"), (True, "cpu", "eager"), (False, "cpu", "eager")],
)
def test_graphs_only_on_a_gpu_and_the_switch_falls_back_to_eager(cuda_graphs, device, mode):
    assert decode_mode(cuda_graphs, device) == mode
