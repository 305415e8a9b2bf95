"""The job-message schema (S3 events, test events, submitted jobs) and the output keys derived from it."""

from __future__ import annotations

import json

import pytest

from whisper_build.bulk.messages import BadMessage, JobMessage, JobOptions, parse_body
from whisper_build.bulk.records import Checkpoint, job_id, job_prefix
from whisper_build.serving.results import Segment, Word


def s3_event(*keys: str, event: str = "ObjectCreated:Put", version: str | None = None) -> str:
    """An S3 event notification body as S3 writes it (keys URL-encoded)."""
    obj = {"size": 10, "eTag": "abc"} | ({"versionId": version} if version else {})
    return json.dumps(
        {
            "Records": [
                {"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": event,
                 "s3": {"bucket": {"name": "jobs-bucket"}, "object": {"key": key, **obj}}}
                for key in keys
            ]
        }
    )  # fmt: skip


def test_s3_event_keys_are_url_decoded() -> None:
    (job,) = parse_body(s3_event("input/My+Meeting%2B2026%C3%A9.wav", version="v1"))
    assert job == JobMessage(bucket="jobs-bucket", key="input/My Meeting+2026é.wav", version_id="v1")


def test_test_event_and_other_events_make_no_job() -> None:
    assert parse_body(json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "jobs-bucket"})) == []
    assert parse_body(s3_event("input/a.wav", event="ObjectRemoved:Delete")) == []


def test_submitted_job_round_trips() -> None:
    job = JobMessage(bucket="jobs-bucket", key="input/a.wav", options=JobOptions(language="de", prompt="Hallo"))
    assert parse_body(job.to_body()) == [job]
    assert json.loads(job.to_body())["whisper_bulk"] == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"hello": 1}', "neither an S3 event"),
        ('{"whisper_bulk": 2, "bucket": "jobs-bucket", "key": "a"}', "schema version"),
        ('{"whisper_bulk": 1, "bucket": "jobs-bucket", "key": "a", "options": {"language": "xx"}}', "language"),
        ('{"Records": [{"eventName": "ObjectCreated:Put", "s3": {}}]}', "s3.bucket.name"),
    ],
)
def test_bad_bodies_say_what_is_wrong(body: str, message: str) -> None:
    with pytest.raises(BadMessage, match=message):
        parse_body(body)


def test_job_id_changes_with_identity_model_and_result_changing_options_only() -> None:
    base = job_id("b", "input/a.wav", "v1", "tiny.en", JobOptions())
    assert base == job_id("b", "input/a.wav", "v1", "tiny.en", JobOptions())
    others = {
        job_id("b", "input/a.wav", "v2", "tiny.en", JobOptions()),
        job_id("b", "input/a.wav", "v1", "large-v3", JobOptions()),
        job_id("b", "input/a.wav", "v1", "tiny.en", JobOptions(language="en")),
        job_id("b", "input/a.wav", "v1", "tiny.en", JobOptions(word_timestamps=True)),
        job_id("b", "input/b.wav", "v1", "tiny.en", JobOptions()),
    }
    assert base not in others and len(others) == 5


def test_job_prefix_mirrors_the_input_key_under_the_output_prefix() -> None:
    assert job_prefix("input/calls/a.wav", "input/", "output/", "f00") == "output/calls/a.wav/f00/"
    assert job_prefix("elsewhere/a.wav", "input/", "output/", "f00") == "output/elsewhere/a.wav/f00/"


def test_checkpoint_keeps_segments_and_words() -> None:
    segment = Segment(1.0, 2.5, "hello there", seek=100, tokens=[1, 2], words=[Word(" hello", 1.0, 1.4)])
    checkpoint = Checkpoint(job_id="f00")
    checkpoint.add([segment])
    assert Checkpoint.model_validate_json(checkpoint.model_dump_json()).typed_segments() == [segment]
