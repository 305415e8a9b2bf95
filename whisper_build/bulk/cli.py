"""Operator commands: ``python -m whisper_build.bulk.cli submit|jobs|fetch`` (``make submit`` / ``jobs`` / ``fetch``).

Where the jobs live: with ``--endpoint-url`` (or ``WHISPER_BULK_ENDPOINT_URL``) a local S3 + SQS endpoint
and the ``--bucket`` / ``--queue-url`` given; otherwise the bulk stack of ``--config`` in AWS, whose
outputs (named in ``settings.names.BULK_STACK_OUTPUTS``) name the bucket and the queues. No CDK is loaded;
AWS errors, credentials first, end in one line with what to run (exit 1).

Entry point: :func:`main` (the details, in its docstring). Docs: docs/bulk.md, "Submitting, watching, fetching".
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.progress import track

from whisper_build.bulk.aws import JobQueue, JobStore, clients
from whisper_build.bulk.listing import CurrentJob, current_jobs, progress_line, status_records, total_line
from whisper_build.bulk.messages import JobMessage, JobOptions, SpeakerJob
from whisper_build.bulk.records import OUTPUT_FILES, JobStatus
from whisper_build.deploy.credentials import credential_problem, is_credential_error
from whisper_build.serving.transcription.formats import bulk_files

AUDIO_SUFFIXES = frozenset(
    {".aac", ".aif", ".aiff", ".amr", ".flac", ".m4a", ".mka", ".mp3", ".mp4", ".mpeg", ".mpga", ".oga", ".ogg"}
    | {".opus", ".wav", ".webm", ".wma"}
)
"""File extensions ``make submit`` counts as recordings: a local SRC with none of them is refused. Every file
of a folder that has one is uploaded (a worker fails the ones that do not decode, naming why)."""
FETCH_SUFFIXES = {key: f.bulk.suffix for key, f in bulk_files().items() if f.bulk is not None}
"""Output key → suffix of the fetched copy (``<input>.json`` etc.), from the formats table."""
ERROR_SUFFIX = ".error.json"
STATES = ("waiting", "running", "retrying", "completed", "failed")
"""The states ``make jobs`` counts, in its order (``waiting``: the input's newest version has no status yet)."""
console = Console(stderr=True)


@dataclass(frozen=True)
class Target:
    """The job bucket and queues one command works on."""

    store: JobStore
    queue: JobQueue
    dead_letter: JobQueue | None
    input_prefix: str
    output_prefix: str


WITHOUT_AWS = (
    "; to try bulk jobs without AWS: `make bulk-local` (S3 + SQS + Triton on this machine; it prints the exports "
    "for make submit/jobs/fetch) or `make bulk-demo AUDIO_DIR=<dir> OUT_DIR=<dir>`"
)
"""Ends the errors of the AWS path (no stack, bulk off, no credentials): the local path needs no account."""


def _local(args: argparse.Namespace) -> str | None:
    """The local endpoint's URL (``--endpoint-url`` or ``WHISPER_BULK_ENDPOINT_URL``), or ``None``: AWS."""
    return args.endpoint_url or os.environ.get("WHISPER_BULK_ENDPOINT_URL")


def resolve(args: argparse.Namespace) -> Target:
    """The local endpoint's bucket and queues, or the bulk stack's in AWS (module docstring).

    Raises:
        SystemExit: the config is invalid, bulk is off in it, or the stack has not been deployed.
        botocore.exceptions.BotoCoreError / ClientError: AWS refused or could not be reached
            (:func:`main` words credential failures in one line).
    """
    endpoint = _local(args)
    if endpoint:
        s3, sqs = clients(args.region, endpoint)
        dead = JobQueue(sqs, args.dead_letter_url) if args.dead_letter_url else None
        return Target(
            JobStore(s3, args.bucket), JobQueue(sqs, args.queue_url), dead, args.input_prefix, args.output_prefix
        )
    from settings import ConfigError, load_config
    from settings.names import BULK_STACK_OUTPUTS, stack_name

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    if not config.bulk.enabled:
        raise SystemExit(
            f"{args.config}: bulk.enabled is false; turn it on (config/examples/bulk.yaml) and deploy{WITHOUT_AWS}"
        )
    stack = stack_name(config, "Bulk")
    try:
        described = boto3.client("cloudformation", region_name=config.region).describe_stacks(StackName=stack)
    except ClientError as exc:
        if is_credential_error(exc) or "does not exist" not in str(exc):
            raise
        raise SystemExit(
            f"error: the bulk stack {stack} does not exist in {config.region}: `make deploy CONFIG={args.config}` first"
            + WITHOUT_AWS
        ) from None
    values = {o["OutputKey"]: o["OutputValue"] for o in described["Stacks"][0].get("Outputs", [])}
    s3, sqs = clients(config.region)
    return Target(
        JobStore(s3, values[BULK_STACK_OUTPUTS["bucket"]]),
        JobQueue(sqs, values[BULK_STACK_OUTPUTS["queue"]]),
        JobQueue(sqs, values[BULK_STACK_OUTPUTS["dead_letter"]]),
        config.bulk.input_prefix,
        config.bulk.output_prefix,
    )


def local_files(src: str) -> tuple[Path, list[Path]]:
    """The files of a local ``SRC`` (a folder: every file under it; or one file) and the folder their keys start at.

    Returns: ``(folder the input keys are relative to, files to upload)``.

    Raises:
        SystemExit: ``src`` does not exist, or no file of it has an audio extension (:data:`AUDIO_SUFFIXES`).
    """
    root = Path(src)
    if not root.exists():
        raise SystemExit(
            f"error: {src}: no such file or folder; SRC takes a folder of recordings, one recording, "
            "or s3://<job bucket>/<input prefix>…"
        )
    root, files = (root.parent, [root]) if root.is_file() else (root, sorted(p for p in root.rglob("*") if p.is_file()))
    if not any(p.suffix.lower() in AUDIO_SUFFIXES for p in files):
        found = f"{len(files)} files, none named as audio" if files else "no files"
        raise SystemExit(
            f"error: {src} holds no audio ({found}); point SRC at recordings named {'/'.join(sorted(AUDIO_SUFFIXES))}"
        )
    return root, files


def submit(target: Target, src: str, options: JobOptions) -> int:
    """Upload a local folder or file, or enqueue an S3 prefix (module docstring); returns the number of jobs.

    Raises:
        SystemExit: nothing to submit (:func:`local_files`; no object under an ``s3://`` prefix), an
            ``s3://`` source outside the job bucket's input prefix, or options with a local source.
    """
    if src.startswith("s3://"):
        bucket, _, prefix = src[len("s3://") :].partition("/")
        if bucket != target.store.bucket or not prefix.startswith(target.input_prefix):
            raise SystemExit(
                f"{src}: jobs must be under s3://{target.store.bucket}/{target.input_prefix} (the workers read only there)"
            )
        keys = target.store.keys(prefix)
        if not keys:
            raise SystemExit(f"error: no object under {src}; upload recordings there first, or give a local folder")
        for key in track(keys, description="enqueueing", console=console):
            target.queue.send(JobMessage(bucket=bucket, key=key, options=options).to_body())
        print(f"{len(keys)} jobs enqueued from {src}")
        return len(keys)
    if options != JobOptions():
        raise SystemExit("options apply to s3:// sources; uploaded files are transcribed with the defaults (S3 events)")
    root, files = local_files(src)
    for path in track(files, description="uploading", console=console):
        key = target.input_prefix + path.relative_to(root).as_posix()
        target.store.s3.upload_file(str(path), target.store.bucket, key)
    print(
        f"{len(files)} jobs submitted: uploaded to s3://{target.store.bucket}/{target.input_prefix} (S3 events enqueue them)"
    )
    return len(files)


def statuses(target: Target) -> list[JobStatus]:
    """Every job's status record, newest last (every version of every input: :func:`current` picks)."""
    return status_records(target.store, target.output_prefix)


def latest_per_input(records: list[JobStatus]) -> dict[str, JobStatus]:
    """Input key → its newest status record."""
    return {record.key: record for record in records}


def current(target: Target) -> dict[str, CurrentJob]:
    """Input key → the job of its newest version (:func:`whisper_build.bulk.listing.current_jobs`)."""
    return current_jobs(target.store, target.input_prefix, target.output_prefix)


def jobs(target: Target) -> dict[str, int]:
    """Print the state of the jobs (module docstring); returns the count of each of :data:`STATES`."""
    now = time.time()
    found = current(target)
    counts = Counter[str](job.status.state if job.status else "waiting" for job in found.values())
    queue = target.queue.counts()
    dead = target.dead_letter.counts()["visible"] if target.dead_letter else 0
    print("jobs: " + ", ".join(f"{state} {counts[state]}" for state in STATES))
    print(f"queue: {queue['visible']} waiting, {queue['in_flight']} in flight, {dead} dead-lettered")
    waiting = [job for job in found.values() if job.status is None]
    if waiting:
        print(f"oldest waiting input: {now - min(job.submitted_at for job in waiting):.0f} s")
    if found:
        print(total_line(list(found.values()), now))
    for job in found.values():
        record = job.status
        if record is None:
            if job.versions > 1:
                print(f"  waiting: {job.key}: not started{job.resubmitted}")
        elif record.state == "failed" and record.error is not None:
            print(f"  failed: {job.key}: {record.error.reason}: {record.error.message}{job.resubmitted}")
        elif record.state in ("running", "retrying"):
            error = f"; last error {record.error.reason}: {record.error.message}" if record.error else ""
            print(f"  {record.state}: {job.key}: {progress_line(record, now)}{job.resubmitted}{error}")
    return {state: counts[state] for state in STATES}


def fetch(target: Target, out: Path) -> dict[str, int]:
    """Download the final results of every input's newest version into ``out`` (module docstring).

    Returns: ``{"completed": n, "failed": m, "not_final": k}`` (``not_final``: waiting or in progress).
    """
    fetched = Counter[str]()
    for job in current(target).values():
        record = job.status
        if record is None or not record.final:
            fetched["not_final"] += 1
            continue
        relative = record.key[len(target.input_prefix) :] if record.key.startswith(target.input_prefix) else record.key
        base = out / Path(relative).with_suffix("")
        base.parent.mkdir(parents=True, exist_ok=True)
        if record.state == "completed":
            for name, file in OUTPUT_FILES.items():
                if name not in record.outputs:
                    continue  # a format this job did not ask for (speakers)
                prefix = record.outputs[name][: -len(file)]
                body = target.store.s3.get_object(Bucket=target.store.bucket, Key=prefix + file)["Body"].read()
                Path(f"{base}{FETCH_SUFFIXES[name]}").write_bytes(body)
            fetched["completed"] += 1
        else:
            Path(f"{base}{ERROR_SUFFIX}").write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
            fetched["failed"] += 1
    return dict(fetched)


def parser() -> argparse.ArgumentParser:
    """The command line (module docstring)."""
    top = argparse.ArgumentParser(prog="python -m whisper_build.bulk.cli", description=__doc__.split("\n")[0])
    top.add_argument("--config", default="config/default.yaml", help="deployment config (AWS target)")
    top.add_argument("--endpoint-url", help="local S3 + SQS endpoint (then --bucket/--queue-url)")
    top.add_argument("--bucket", default=os.environ.get("WHISPER_BULK_BUCKET"))
    top.add_argument("--queue-url", default=os.environ.get("WHISPER_BULK_QUEUE_URL"))
    top.add_argument("--dead-letter-url", default=os.environ.get("WHISPER_BULK_DEAD_LETTER_URL"))
    top.add_argument("--region", default=os.environ.get("WHISPER_BULK_REGION", "us-east-1"))
    top.add_argument("--input-prefix", default="input/")
    top.add_argument("--output-prefix", default="output/")
    commands = top.add_subparsers(dest="command", required=True)
    sub = commands.add_parser("submit", help="upload a folder or enqueue an s3:// prefix")
    sub.add_argument("--src", required=True)
    sub.add_argument("--language")
    sub.add_argument("--prompt", default="")
    sub.add_argument("--task", choices=("transcribe", "translate"), default="transcribe")
    sub.add_argument("--word-timestamps", action="store_true")
    sub.add_argument("--speakers", action="store_true", help="diarize: diarized_json, rttm, speaker-tagged srt/vtt")
    sub.add_argument("--min-speakers", type=int, default=1)
    sub.add_argument("--max-speakers", type=int, default=15)
    commands.add_parser("jobs", help="counts per state, queue, failures, progress")
    get = commands.add_parser("fetch", help="download final results")
    get.add_argument("--out", required=True, type=Path)
    return top


def run(args: argparse.Namespace) -> None:
    """One command against :func:`resolve`'s target."""
    target = resolve(args)
    if args.command == "submit":
        speakers = SpeakerJob(min_speakers=args.min_speakers, max_speakers=args.max_speakers) if args.speakers else None
        options = JobOptions(
            language=args.language,
            prompt=args.prompt,
            task=args.task,
            word_timestamps=args.word_timestamps,
            speakers=speakers,
        )
        submit(target, args.src, options)
    elif args.command == "jobs":
        jobs(target)
    else:
        counts = fetch(target, args.out)
        waiting = f"; {counts['not_final']} inputs not final yet" if counts.get("not_final") else ""
        print(
            f"fetched {counts.get('completed', 0)} results and {counts.get('failed', 0)} failures into {args.out}{waiting}"
        )


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0, or 1 with one line on stderr (a mistake to fix, or AWS refusing or unreachable).

    * ``submit --src DIR|FILE`` uploads every file under DIR (or FILE) to the input prefix (each upload's S3
      event is one job; a path that does not exist or has no recording is refused); ``submit --src
      s3://<job bucket>/<key prefix>`` enqueues one job message per object that already exists there.
    * ``jobs`` prints counts per state, the queue, the oldest waiting input, progress in total and per job
      in progress (audio length, percent done, elapsed, time left), failures with their reasons.
    * ``fetch --out DIR`` downloads each input's newest final result as ``<name>.json`` (verbose_json),
      ``.srt``, ``.vtt``, ``.txt``, or ``<name>.error.json`` (the status, with the reason) for a failed one.

    docs/bulk.md, "Submitting, watching, fetching".
    """
    args = parser().parse_args(argv)
    try:
        run(args)
    except (BotoCoreError, ClientError) as exc:
        line = credential_problem(exc) if is_credential_error(exc) else f"AWS refused or could not be reached: {exc}"
        print(f"error: {line}{'' if _local(args) else WITHOUT_AWS}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
