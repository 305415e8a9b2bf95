"""A 10-hour mostly silent file completes through the bulk path with the worker's memory bounded.

The input is streamed to the worker's disk and decoded from there as it is read: 10 hours at 16 kHz are
2.3 GB as float32, the worker stays far below. Silent windows are never sent, so only two windows reach
the model.
"""

from __future__ import annotations

import signal
import time

import psutil
import pytest
import speech_samples as samples
from bulk_support import final_statuses, new_job_path, silent_hours_flac, stop, worker_env

from whisper_build.bulk.demo import start_worker
from whisper_build.bulk.local import LocalAws

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)"),
]

HOURS = 10
RSS_LIMIT_MB = 400
"""The worker's peak resident memory: Python, boto3, gRPC, PyAV and numpy plus two window groups."""


def test_ten_hour_file_completes_with_bounded_memory(triton_server, tmp_path) -> None:
    speech = samples.speak("The quick brown fox jumps over the lazy dog.", tmp_path / "fox.wav")
    audio = silent_hours_flac(speech, HOURS)
    with LocalAws() as aws:
        path, target = new_job_path(aws.endpoint_url)
        target.store.s3.upload_file(str(audio), target.store.bucket, "input/ten-hours.flac")
        worker = start_worker(worker_env(path, triton_server.settings.grpc_url, tmp_path), tmp_path / "worker.log")
        process = psutil.Process(worker.pid)
        peak = 0
        deadline = time.monotonic() + 600
        check = final_statuses(target, 1)
        records = None
        while time.monotonic() < deadline and not records:
            peak = max(peak, process.memory_info().rss)
            records = check()
            time.sleep(0.5)
        assert stop(worker, signal.SIGTERM) == 0, (tmp_path / "worker.log").read_text()[-2000:]
    assert records, "the 10-hour file did not complete in 600 s"
    status = records["input/ten-hours.flac"]
    assert (status.state, status.windows) == ("completed", 2)
    assert status.audio_seconds == pytest.approx(HOURS * 3600, abs=0.1)
    print(f"10-hour file: peak worker RSS {peak / 2**20:.0f} MiB, wall {status.wall_seconds:.1f} s")
    assert peak < RSS_LIMIT_MB * 1024 * 1024, f"peak RSS {peak / 2**20:.0f} MiB"
