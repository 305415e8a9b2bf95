"""The bulk path for real: moto's S3 + SQS server on 127.0.0.1, S3 events into the queue, a worker
process, the real Triton model on the CPU. A corpus of 12 files (good ones in four formats, one of
10 minutes, bad ones), results compared with the synchronous endpoint's, and duplicate deliveries."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile
import speech_samples as samples
from bulk_support import final_statuses, new_job_path, stop, triton_windows, wait_until, worker_env
from gateway_server import running_gateway
from long_audio import sparse_speech_flac
from prometheus_client.parser import text_string_to_metric_families

from whisper_build.bulk.cli import Target, jobs, latest_per_input, statuses, submit
from whisper_build.bulk.demo import start_worker
from whisper_build.bulk.local import JobPath, LocalAws
from whisper_build.bulk.messages import JobMessage, JobOptions
from whisper_build.bulk.records import JobStatus
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.transcription.formats import bulk_files
from whisper_build.workstation.local_triton import free_ports

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)"),
]

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please turn off the lights when you leave tonight.",
    "The train was late because of heavy snow.",
    "She bought fresh bread and cheese at the market.",
]
"""Two formats per sentence: every format twice (more files add run time, not checks)."""
VARIANTS = ("wav", "stereo-8k.wav", "mp3", "flac")
BAD = {"picture.png": "not_audio", "empty.wav": "empty_audio", "truncated.wav": "not_audio"}


def build_corpus(folder: Path) -> tuple[list[str], dict[str, str]]:
    """8 short clips (4 formats), one 10-minute mostly silent file, 3 bad files; (good names, bad name → reason)."""
    good = []
    for index, sentence in enumerate(SENTENCES):
        clip = samples.speak(sentence, folder / f"clip{index:02d}.source.wav")
        audio, rate = soundfile.read(clip, dtype="float32")
        for variant in VARIANTS[index % 2 :: 2]:  # two formats per sentence, every format twice
            name = f"clip{index:02d}.{variant}"
            if variant == "stereo-8k.wav":
                samples.speak(sentence, folder / name, rate=8000, channels=2)
            elif variant == "wav":
                soundfile.write(folder / name, audio, rate)
            else:
                (folder / name).write_bytes(samples.encode(audio, rate, variant))
            good.append(name)
        clip.unlink()
    speech = samples.speak(SENTENCES[0], folder.parent / "long-speech.wav")
    long_file = folder / "long-10min.flac"
    long_file.write_bytes(sparse_speech_flac(speech, minutes=10, every_minutes=5).read_bytes())
    good.append(long_file.name)
    (folder / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    (folder / "empty.wav").write_bytes(b"")
    (folder / "truncated.wav").write_bytes((folder / "clip00.wav").read_bytes()[:30])
    return good, BAD


@pytest.fixture(scope="module")
def local_aws() -> Iterator[LocalAws]:
    with LocalAws() as aws:
        yield aws


@pytest.fixture(scope="module")
def job_path(local_aws: LocalAws) -> tuple[JobPath, Target]:
    return new_job_path(local_aws.endpoint_url)


@pytest.fixture(scope="module")
def worker(job_path, triton_server, tmp_path_factory) -> Iterator[str]:
    """A worker process (2 files in flight); yields the base URL of its /live, /ready, /metrics."""
    path, _ = job_path
    scratch = tmp_path_factory.mktemp("bulk-worker")
    (port,) = free_ports(1)
    env = worker_env(
        path, triton_server.settings.grpc_url, scratch, files_in_flight=2, window_group_size=16, http_port=port
    )
    process = start_worker(env, scratch / "worker.log")
    yield f"http://127.0.0.1:{port}"
    assert stop(process, signal.SIGTERM) == 0, (scratch / "worker.log").read_text()[-3000:]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, list[str], dict[str, str]]:
    folder = tmp_path_factory.mktemp("corpus")
    good, bad = build_corpus(folder)
    return folder, good, bad


def read_output(target: Target, status: JobStatus, name: str) -> bytes:
    return target.store.s3.get_object(Bucket=target.store.bucket, Key=status.outputs[name])["Body"].read()


def synchronous_texts(triton_server, folder: Path, names: list[str]) -> dict[str, str]:
    """Each file through the gateway's ``/v1/audio/transcriptions`` (verbose_json), its ``text``."""
    settings = GatewaySettings(triton_url=triton_server.settings.grpc_url, max_body_bytes=200_000_000)
    texts = {}
    with running_gateway(settings) as url, httpx.Client(base_url=url, timeout=600) as client:
        for name in names:
            answer = client.post(
                "/v1/audio/transcriptions",
                files={"file": (name, (folder / name).read_bytes())},
                data={"model": "whisper-1", "response_format": "verbose_json"},
            )
            assert answer.status_code == 200, answer.text
            texts[name] = answer.json()["text"]
    return texts


def test_corpus_gives_every_output_or_a_reason(job_path, worker: str, corpus, triton_server, capsys) -> None:
    _, target = job_path
    folder, good, bad = corpus
    # WHEN every file is uploaded: each upload's S3 event is one message
    assert submit(target, str(folder), JobOptions()) == len(good) + len(bad) == 12
    records = wait_until(final_statuses(target, 12), 600, "12 final statuses", poll=1.0)
    assert isinstance(records, dict)
    reference = synchronous_texts(triton_server, folder, good)
    for name in good:
        status = records[f"input/{name}"]
        assert status.state == "completed", (name, status.error)
        assert set(status.outputs) == set(bulk_files(speakers=False))  # no speaker files unless asked
        verbose = json.loads(read_output(target, status, "verbose_json"))
        assert verbose["text"] == reference[name], name  # the synchronous endpoint's transcript
        assert read_output(target, status, "txt").decode() == reference[name] + "\n"
        assert "-->" in read_output(target, status, "srt").decode()
        assert read_output(target, status, "vtt").decode().startswith("WEBVTT\n")
        assert [s["text"] for s in verbose["segments"]] and status.windows >= 1
    long_status = records["input/long-10min.flac"]
    assert long_status.audio_seconds == pytest.approx(600, abs=0.1)
    assert long_status.windows == 2  # the 18 windows of noise floor were never sent
    for name, reason in bad.items():
        status = records[f"input/{name}"]
        assert (status.state, status.error and status.error.reason, status.attempts) == ("failed", reason, 1)
    # nothing retried, nothing dead-lettered, nothing left
    assert target.queue.counts() == {"visible": 0, "in_flight": 0, "delayed": 0}
    assert target.dead_letter is not None and target.dead_letter.counts()["visible"] == 0
    # make jobs says so too
    capsys.readouterr()
    assert jobs(target)["completed"] == len(good)
    printed = capsys.readouterr().out
    assert "jobs: waiting 0, running 0, retrying 0, completed 9, failed 3" in printed
    assert "queue: 0 waiting, 0 in flight, 0 dead-lettered" in printed
    assert "failed: input/picture.png: not_audio: " in printed
    # the worker's metrics (docs/contracts.md §7, bulk workers) say the same
    assert httpx.get(f"{worker}/ready", timeout=10).status_code == 200
    assert httpx.get(f"{worker}/live", timeout=10).status_code == 200
    metrics = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(httpx.get(f"{worker}/metrics", timeout=10).text)
        for sample in family.samples
    }
    assert metrics[("whisper_bulk_jobs_total", (("outcome", "completed"),))] == len(good)
    assert metrics[("whisper_bulk_failures_total", (("reason", "not_audio"),))] == 2
    assert metrics[("whisper_bulk_failures_total", (("reason", "empty_audio"),))] == 1
    audio = sum(s.audio_seconds or 0 for s in records.values())
    assert metrics[("whisper_bulk_audio_seconds_total", ())] == pytest.approx(audio)
    assert metrics[("whisper_bulk_wall_per_audio_ratio_count", ())] == len(good)
    assert metrics[("whisper_bulk_queue_wait_seconds_count", ())] >= len(good) + len(bad)


def test_duplicate_deliveries_give_one_result_computed_once(job_path, worker, corpus, triton_server) -> None:
    _, target = job_path
    folder, _, _ = corpus
    metrics = triton_server.settings.metrics_url
    before = {s.key: s for s in statuses(target)}
    windows = triton_windows(metrics)
    # a finished input delivered again (make submit of an existing object) is acknowledged, not recomputed
    submit(target, f"s3://{target.store.bucket}/input/clip01", JobOptions())
    wait_until(lambda: target.queue.counts() == {"visible": 0, "in_flight": 0, "delayed": 0}, 120, "queue drained")
    after = latest_per_input(statuses(target))
    for key in ("input/clip01.stereo-8k.wav", "input/clip01.flac"):
        assert after[key].updated_at == before[key].updated_at
    assert triton_windows(metrics) == windows
    # the same new input delivered twice at once (its S3 event and a submitted message): one computation
    audio, rate = soundfile.read(folder / "clip00.wav", dtype="float32")
    soundfile.write(folder.parent / "twice.wav", np.concatenate([audio, audio]), rate)
    target.store.s3.upload_file(str(folder.parent / "twice.wav"), target.store.bucket, "input/twice.wav")
    target.queue.send(JobMessage(bucket=target.store.bucket, key="input/twice.wav").to_body())
    wait_until(lambda: target.queue.counts() == {"visible": 0, "in_flight": 0, "delayed": 0}, 120, "queue drained")
    status = latest_per_input(statuses(target))["input/twice.wav"]
    assert (status.state, status.attempts, status.windows) == ("completed", 1, 1)
    assert triton_windows(metrics) == windows + 1
    assert len([k for k in target.store.keys("output/twice.wav/") if k.endswith("status.json")]) == 1
