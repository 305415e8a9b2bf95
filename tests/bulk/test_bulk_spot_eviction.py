"""A Spot interruption mid-file: the node's notice becomes SIGTERM for the bulk worker (HyperPod taints the node
and evicts its pods within terminationGracePeriodSeconds). The worker loses no finished window: its drain
checkpoints what it finished, though no periodic checkpoint was due, and returns the message at once; another
worker reads the checkpoint back as the resume path does and sends only the windows after it.

Real moto S3 + SQS server, real worker processes, the real Triton model on the CPU (as test_bulk_resilience.py).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import speech_samples as samples
from bulk_support import (
    checkpoint_of,
    final_statuses,
    new_job_path,
    output_segments,
    reference_segments,
    stop,
    triton_windows,
    wait_until,
    worker_env,
)
from long_audio import sparse_speech_flac

from whisper_build.bulk.demo import start_worker
from whisper_build.bulk.local import LocalAws

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)"),
]

SPOT_GRACE_SECONDS = 90
"""The bulk worker's grace with capacity.bulk_spot (k8s_charts.bulk.worker_grace_seconds with drain ≤ 60 s)."""


SENTENCE = "The night train to the coast leaves at ten and stops at every station."


@pytest.fixture(scope="module")
def local_aws() -> Iterator[LocalAws]:
    with LocalAws() as aws:
        yield aws


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> Path:
    return samples.speak(SENTENCE, tmp_path_factory.mktemp("speech") / "sentence.wav")


@pytest.mark.slow
def test_an_evicted_worker_keeps_every_finished_window_and_another_finishes_the_file(
    local_aws,
    triton_server,
    speech,
    tmp_path,
) -> None:
    path, target = new_job_path(local_aws.endpoint_url, visibility_timeout_seconds=60)
    audio = sparse_speech_flac(speech, minutes=6, every_minutes=1)
    env = worker_env(
        path, triton_server.settings.grpc_url, tmp_path,
        window_group_size=1, checkpoint_every_groups=100, visibility_timeout_seconds=60, heartbeat_seconds=3,
        drain_seconds=45,
    )  # fmt: skip  # no periodic checkpoint during this file: only the drain writes one
    key = "input/spot.flac"
    target.store.s3.upload_file(str(audio), target.store.bucket, key)
    metrics = triton_server.settings.metrics_url
    before = triton_windows(metrics)

    evicted = start_worker(env, tmp_path / "evicted.log")
    wait_until(lambda: triton_windows(metrics) - before >= 2, 180, "two windows finished")
    assert checkpoint_of(target, key) is None  # nothing saved yet: an eviction now would lose them without the drain
    finished_at_notice = triton_windows(metrics) - before
    evicted.send_signal(signal.SIGTERM)  # what the eviction delivers to the worker process
    noticed = time.monotonic()
    wait_until(lambda: target.queue.counts()["visible"] == 1, SPOT_GRACE_SECONDS, "the message returned", poll=0.2)
    assert evicted.wait(SPOT_GRACE_SECONDS) == 0, (tmp_path / "evicted.log").read_text()[-2000:]
    assert time.monotonic() - noticed < SPOT_GRACE_SECONDS

    saved = checkpoint_of(target, key)
    assert saved is not None and finished_at_notice <= saved.windows < 6
    resumed_from = triton_windows(metrics)

    successor = start_worker(env, tmp_path / "successor.log")
    records = wait_until(final_statuses(target, 1), 240, "the file completed on another worker")
    assert stop(successor) == 0
    assert isinstance(records, dict)
    status = records[key]
    assert (status.state, status.windows) == ("completed", 6)
    assert triton_windows(metrics) - resumed_from == 6 - saved.windows  # only the windows after the checkpoint
    segments = output_segments(target, status)
    assert len({start for start, _, _ in segments}) == len(segments)
    assert segments == reference_segments(triton_server, audio)
