"""What ``make jobs`` and ``make fetch`` read: each input's current job, and its progress in words.

Each upload of an input key is a new S3 version and a job of its own (the job id names the version,
:func:`whisper_build.bulk.records.job_id`). :func:`current_jobs` pairs every input key with the status
record of its **newest** version, so a re-submitted file counts once, as ``waiting`` until its new job
starts, and never through an older version's final status. :func:`progress_line` words one job's
progress (audio length, percent done, elapsed, time left) and :func:`total_line` the sum.
See docs/bulk.md, "Reading progress".
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from whisper_build.bulk.records import STATUS_FILE, JobStatus

if TYPE_CHECKING:
    from whisper_build.bulk.aws import JobStore


@dataclass(frozen=True)
class InputVersion:
    """One version of an input object.

    Attributes:
        version_id: S3's version id (``"null"`` in an unversioned bucket).
        etag: its ETag, quotes stripped.
        modified_at: when it was uploaded, Unix seconds.
    """

    version_id: str
    etag: str
    modified_at: float

    def owns(self, record: JobStatus) -> bool:
        """True when ``record`` is the job of this version (its version id, else its ETag)."""
        if record.version_id and self.version_id != "null":
            return record.version_id == self.version_id
        return record.etag == self.etag


@dataclass(frozen=True)
class CurrentJob:
    """An input key's current job.

    Attributes:
        key: the input key.
        status: the newest version's status record; ``None`` while that version waits to start.
        version / versions: which version of the key this is (1-based, oldest first) and how many exist.
        submitted_at: when the newest version was uploaded (Unix seconds).
    """

    key: str
    status: JobStatus | None
    version: int
    versions: int
    submitted_at: float

    @property
    def resubmitted(self) -> str:
        """``" (version 2 of 2)"`` for a key uploaded more than once, else ``""``."""
        return f" (version {self.version} of {self.versions})" if self.versions > 1 else ""


def status_records(store: JobStore, output_prefix: str) -> list[JobStatus]:
    """Every status record under ``output_prefix``, oldest ``updated_at`` first."""
    keys = [k for k in store.keys(output_prefix) if k.endswith("/" + STATUS_FILE)]
    records = [store.read_model(key, JobStatus) for key in keys]
    return sorted((r for r in records if r is not None), key=lambda r: r.updated_at)


def input_versions(store: JobStore, input_prefix: str) -> dict[str, list[InputVersion]]:
    """Input key → its versions, oldest first, the current one last; deleted keys are left out.

    ``ListObjectVersions`` lists a key's versions newest first and marks the current one ``IsLatest``.
    """
    versions: dict[str, list[InputVersion]] = defaultdict(list)
    latest: dict[str, InputVersion] = {}
    pages = store.s3.get_paginator("list_object_versions").paginate(Bucket=store.bucket, Prefix=input_prefix)
    for page in pages:
        for item in page.get("Versions", []):
            version = InputVersion(
                item.get("VersionId", "null"), item["ETag"].strip('"'), item["LastModified"].timestamp()
            )
            if item.get("IsLatest"):
                latest[item["Key"]] = version
            else:
                versions[item["Key"]].append(version)
    return {key: [*reversed(versions[key]), newest] for key, newest in latest.items()}


def current_jobs(store: JobStore, input_prefix: str, output_prefix: str) -> dict[str, CurrentJob]:
    """Input key → its current job (module docstring).

    A status record whose input no longer exists (deleted after it was transcribed) stands as version 1 of 1.
    """
    records = status_records(store, output_prefix)
    jobs: dict[str, CurrentJob] = {}
    for key, versions in input_versions(store, input_prefix).items():
        newest = versions[-1]
        mine = [r for r in records if r.key == key and newest.owns(r)]
        jobs[key] = CurrentJob(key, mine[-1] if mine else None, len(versions), len(versions), newest.modified_at)
    for record in records:
        if record.key not in jobs:
            jobs[record.key] = CurrentJob(record.key, record, 1, 1, record.started_at or record.updated_at)
    return jobs


def clock(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def audio_rate(status: JobStatus) -> float | None:
    """Audio seconds transcribed per wall-clock second of this job so far; ``None`` before the first window group."""
    return status.progress_seconds / status.wall_seconds if status.progress_seconds and status.wall_seconds else None


def seconds_left(status: JobStatus, now: float) -> float | None:
    """Estimated wall-clock seconds until ``status``'s job is done (0 when final; ``None``: not known yet)."""
    if status.final:
        return 0.0
    rate = audio_rate(status)
    if status.audio_seconds is None or rate is None:
        return None
    return max(0.0, (status.audio_seconds - status.progress_seconds) / rate - (now - status.updated_at))


def unfinished_audio(status: JobStatus, now: float) -> float:
    """Audio seconds still to transcribe ``now``: the last report's, less what the job's rate did since."""
    rate = audio_rate(status) or 0.0
    left = (status.audio_seconds or 0.0) - status.progress_seconds - rate * (now - status.updated_at)
    return max(0.0, left)


def elapsed(status: JobStatus, now: float) -> float:
    """Seconds since the job's first attempt began (to its end when final)."""
    start = status.started_at or status.updated_at
    return (status.updated_at if status.final else now) - start


def percent_done(done: float, total: float, final: bool) -> str:
    """``35%``: ``done`` of ``total`` rounded down, and at most 99% until the work is ``final``.

    A job whose last window came back still writes its results (and may wait for its speakers).
    """
    value = math.floor(100 * done / total) if total > 0 else 0
    return f"{min(value, 100 if final else 99)}%"


def progress_line(status: JobStatus, now: float | None = None) -> str:
    """E.g. ``1200 s of audio, 35% done, elapsed 1 min 20 s, about 2 min 30 s left, 16 windows``."""
    now = time.time() if now is None else now
    if status.audio_seconds:
        done = percent_done(status.progress_seconds, status.audio_seconds, status.final)
        parts = [f"{status.audio_seconds:.0f} s of audio", f"{done} done"]
    else:
        parts = [f"{status.progress_seconds:.0f} s of audio done (length not known yet)"]
    parts.append(f"elapsed {clock(elapsed(status, now))}")
    left = seconds_left(status, now)
    parts.append(f"about {clock(left)} left" if left is not None else "time left: after the first window group")
    parts.append(f"{status.windows} windows")
    return ", ".join(parts)


def total_line(jobs: list[CurrentJob], now: float | None = None) -> str:
    """The sum over ``jobs``: files final, audio known, percent done, elapsed since the first start, time left.

    Time left: the unfinished audio of known length over the summed rate of the jobs in progress
    (they run in parallel); inputs still waiting have no known length and are counted apart.
    """
    now = time.time() if now is None else now
    started = [j.status for j in jobs if j.status is not None]
    final = sum(s.final for s in started)
    known = [s for s in started if s.audio_seconds]
    audio = sum(s.audio_seconds or 0.0 for s in known)
    done = sum(min(s.progress_seconds, s.audio_seconds or 0.0) for s in known)
    running = len(started) - final
    parts = [f"total: {final} of {len(jobs)} files final" + (f" ({running} in progress)" if running else "")]
    if audio:
        percent = percent_done(done, audio, final == len(jobs))
        parts.append(f"{audio:.0f} s of audio known ({len(known)} files), {percent} done")
    if started:
        first = min(s.started_at or s.updated_at for s in started)
        last = now if final < len(started) else max(s.updated_at for s in started)
        parts.append(f"elapsed {clock(last - first)}")
    rates = [r for s in started if not s.final and (r := audio_rate(s)) is not None]
    remaining = sum(unfinished_audio(s, now) for s in known if not s.final)
    if rates:
        parts.append(f"about {clock(remaining / sum(rates))} left")
    elif started and final == len(started):
        parts.append("0 s left")
    waiting = len(jobs) - len(started)
    if waiting:
        parts.append(f"+{waiting} waiting (length known once started)")
    return ", ".join(parts)
