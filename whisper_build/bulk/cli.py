"""Operator commands: ``python -m whisper_build.bulk.cli submit|jobs|fetch`` (``make submit`` / ``jobs`` / ``fetch``).

Where the jobs live: with ``--endpoint-url`` (or ``WHISPER_BULK_ENDPOINT_URL``) a local S3 + SQS endpoint
and the ``--bucket`` / ``--queue-url`` given; otherwise the bulk stack of ``--config`` in AWS, whose
outputs name the bucket and the queues (``stacks.bulk_stack.OUTPUTS``; needs AWS credentials).

* ``submit --src DIR`` uploads every file under DIR to the input prefix (each upload's S3 event is one
  job); ``submit --src s3://<job bucket>/<key prefix>`` enqueues one job message per object that already
  exists there (existing objects produce no event). Prints how many jobs.
* ``jobs`` prints counts per state, the queue (waiting, in flight, dead-lettered), the oldest waiting
  input, failures with their reasons and the progress of running files.
* ``fetch --out DIR`` downloads every final job's results as ``<name>.json`` (verbose_json), ``.srt``,
  ``.vtt``, ``.txt``, or ``<name>.error.json`` (the status, with the reason) for a failed one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import track

from whisper_build.bulk.aws import JobQueue, JobStore, clients
from whisper_build.bulk.messages import JobMessage, JobOptions
from whisper_build.bulk.records import OUTPUT_FILES, STATUS_FILE, JobStatus

FETCH_SUFFIXES = {"verbose_json": ".json", "srt": ".srt", "vtt": ".vtt", "txt": ".txt"}
ERROR_SUFFIX = ".error.json"
console = Console(stderr=True)


@dataclass(frozen=True)
class Target:
    """The job bucket and queues one command works on."""

    store: JobStore
    queue: JobQueue
    dead_letter: JobQueue | None
    input_prefix: str
    output_prefix: str


def resolve(args: argparse.Namespace) -> Target:
    """The local endpoint's bucket and queues, or the bulk stack's in AWS (module docstring).

    Raises:
        SystemExit: bulk is off in the config, or the stack has not been deployed.
    """
    endpoint = args.endpoint_url or os.environ.get("WHISPER_BULK_ENDPOINT_URL")
    if endpoint:
        s3, sqs = clients(args.region, endpoint)
        dead = JobQueue(sqs, args.dead_letter_url) if args.dead_letter_url else None
        return Target(
            JobStore(s3, args.bucket), JobQueue(sqs, args.queue_url), dead, args.input_prefix, args.output_prefix
        )
    from settings import load_config
    from settings.names import stack_name
    from stacks.bulk_stack import OUTPUTS

    config = load_config(args.config)
    if not config.bulk.enabled:
        raise SystemExit(f"{args.config}: bulk.enabled is false; turn it on (config/examples/bulk.yaml) and deploy")
    import boto3

    stack = stack_name(config, "Bulk")
    outputs = boto3.client("cloudformation", region_name=config.region).describe_stacks(StackName=stack)["Stacks"][0]
    values = {o["OutputKey"]: o["OutputValue"] for o in outputs.get("Outputs", [])}
    s3, sqs = clients(config.region)
    return Target(
        JobStore(s3, values[OUTPUTS["bucket"]]),
        JobQueue(sqs, values[OUTPUTS["queue"]]),
        JobQueue(sqs, values[OUTPUTS["dead_letter"]]),
        config.bulk.input_prefix,
        config.bulk.output_prefix,
    )


def submit(target: Target, src: str, options: JobOptions) -> int:
    """Upload a local folder or enqueue an S3 prefix (module docstring); returns the number of jobs."""
    if src.startswith("s3://"):
        bucket, _, prefix = src[len("s3://") :].partition("/")
        if bucket != target.store.bucket or not prefix.startswith(target.input_prefix):
            raise SystemExit(
                f"{src}: jobs must be under s3://{target.store.bucket}/{target.input_prefix} (the workers read only there)"
            )
        keys = target.store.keys(prefix)
        for key in track(keys, description="enqueueing", console=console, disable=not keys):
            target.queue.send(JobMessage(bucket=bucket, key=key, options=options).to_body())
        print(f"{len(keys)} jobs enqueued from {src}")
        return len(keys)
    if options != JobOptions():
        raise SystemExit("options apply to s3:// sources; uploaded files are transcribed with the defaults (S3 events)")
    root = Path(src)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for path in track(files, description="uploading", console=console, disable=not files):
        key = target.input_prefix + path.relative_to(root).as_posix()
        target.store.s3.upload_file(str(path), target.store.bucket, key)
    print(
        f"{len(files)} jobs submitted: uploaded to s3://{target.store.bucket}/{target.input_prefix} (S3 events enqueue them)"
    )
    return len(files)


def statuses(target: Target) -> list[JobStatus]:
    """Every job's status record, newest last."""
    keys = [k for k in target.store.keys(target.output_prefix) if k.endswith("/" + STATUS_FILE)]
    records = [target.store.read_model(key, JobStatus) for key in keys]
    return sorted((r for r in records if r is not None), key=lambda r: r.updated_at)


def latest_per_input(records: list[JobStatus]) -> dict[str, JobStatus]:
    """Input key → its newest status record."""
    return {record.key: record for record in records}


def jobs(target: Target) -> dict[str, int]:
    """Print the state of the jobs (module docstring); returns counts per state (``waiting`` included)."""
    records = latest_per_input(statuses(target))
    counts = Counter[str](record.state for record in records.values())
    pages = target.store.s3.get_paginator("list_objects_v2").paginate(
        Bucket=target.store.bucket, Prefix=target.input_prefix
    )
    inputs = [item for page in pages for item in page.get("Contents", [])]
    waiting = [item for item in inputs if item["Key"] not in records]
    counts["waiting"] = len(waiting)
    queue = target.queue.counts()
    dead = target.dead_letter.counts()["visible"] if target.dead_letter else 0
    print(
        "jobs: "
        + ", ".join(f"{state} {counts[state]}" for state in ("waiting", "running", "retrying", "completed", "failed"))
    )
    print(f"queue: {queue['visible']} waiting, {queue['in_flight']} in flight, {dead} dead-lettered")
    if waiting:
        oldest = min(item["LastModified"] for item in waiting)
        print(f"oldest waiting input: {time.time() - oldest.timestamp():.0f} s")
    for record in records.values():
        if record.state in ("failed", "retrying") and record.error is not None:
            print(f"  {record.state}: {record.key}: {record.error.reason}: {record.error.message}")
        elif record.state == "running":
            total = f" of {record.audio_seconds:.0f} s" if record.audio_seconds else ""
            print(f"  running: {record.key}: {record.progress_seconds:.0f} s{total} done, {record.windows} windows")
    return dict(counts)


def fetch(target: Target, out: Path) -> dict[str, int]:
    """Download final results into ``out`` (module docstring); returns ``{"completed": n, "failed": m}``."""
    fetched = Counter[str]()
    for record in latest_per_input(statuses(target)).values():
        relative = record.key[len(target.input_prefix) :] if record.key.startswith(target.input_prefix) else record.key
        base = out / Path(relative).with_suffix("")
        base.parent.mkdir(parents=True, exist_ok=True)
        if record.state == "completed":
            for name, file in OUTPUT_FILES.items():
                prefix = record.outputs[name][: -len(file)]
                body = target.store.s3.get_object(Bucket=target.store.bucket, Key=prefix + file)["Body"].read()
                Path(f"{base}{FETCH_SUFFIXES[name]}").write_bytes(body)
            fetched["completed"] += 1
        elif record.state == "failed":
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
    commands.add_parser("jobs", help="counts per state, queue, failures, progress")
    get = commands.add_parser("fetch", help="download final results")
    get.add_argument("--out", required=True, type=Path)
    return top


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parser().parse_args(argv)
    target = resolve(args)
    if args.command == "submit":
        options = JobOptions(
            language=args.language, prompt=args.prompt, task=args.task, word_timestamps=args.word_timestamps
        )
        submit(target, args.src, options)
    elif args.command == "jobs":
        jobs(target)
    else:
        counts = fetch(target, args.out)
        print(f"fetched {counts.get('completed', 0)} results and {counts.get('failed', 0)} failures into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
