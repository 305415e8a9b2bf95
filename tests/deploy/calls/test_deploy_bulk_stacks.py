"""The deploy tool follows the config's stacks: with ``bulk.enabled`` (config/examples/bulk.yaml) ``make
deploy`` / ``make destroy`` name the Bulk stack, and the retained list has the job bucket."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_helpers import REGION, _client, _dry_run_lines
from moto import mock_aws

from settings import DEFAULT_CONFIG_PATH, load_config, names
from whisper_build.deploy import aws, retained

BULK_CONFIG = Path("config/examples/bulk.yaml")
ACCOUNT = "123456789012"

pytestmark = pytest.mark.usefixtures("kubectl_installed")


def test_the_bulk_stack_is_listed_only_when_bulk_is_on() -> None:
    assert "Bulk" in names.stacks(load_config(BULK_CONFIG))
    assert "Bulk" not in names.stacks(load_config(DEFAULT_CONFIG_PATH))
    assert set(names.stacks(load_config(BULK_CONFIG))) == set(names.STACKS)


def test_destroy_dry_run_waits_on_and_checks_the_bulk_stack() -> None:
    bulk = "\n".join(_dry_run_lines("destroy", BULK_CONFIG))
    default = "\n".join(_dry_run_lines("destroy", DEFAULT_CONFIG_PATH))
    assert "WhisperHyperpodBulk, WhisperHyperpodWorkloads" in bulk and "bulk job queues and bucket" in bulk
    assert "WhisperHyperpodBulk" not in default and "bulk job" not in default


def test_deploy_dry_run_names_the_bulk_stack_and_its_key() -> None:
    lines = "\n".join(_dry_run_lines("deploy", BULK_CONFIG))
    assert "every stack: network, EKS + HyperPod cluster, observability, bulk job queues and bucket," in lines
    assert "KMS keys: 4" in lines
    assert "KMS keys: 3" in "\n".join(_dry_run_lines("deploy", DEFAULT_CONFIG_PATH))


@mock_aws
def test_retained_lists_the_bulk_job_bucket_and_the_bulk_stack_lambda_logs() -> None:
    config = load_config(BULK_CONFIG)
    jobs = f"whisper-hyperpod-bulk-{ACCOUNT}-{REGION}"
    _client("s3").create_bucket(Bucket=jobs)
    _client("logs").create_log_group(logGroupName="/aws/lambda/WhisperHyperpodBulk-Handler-x")
    found = retained.find(config, ACCOUNT, _client)
    assert ("s3-bucket", jobs) in {(item.kind, item.name) for item in found}
    assert "/aws/lambda/WhisperHyperpodBulk-Handler-x" in {item.name for item in found}
    default = retained.find(load_config(DEFAULT_CONFIG_PATH), ACCOUNT, _client)
    assert jobs not in {item.name for item in default}


def test_a_bulk_cycle_leaves_three_keys_and_two_log_buckets() -> None:
    found = [aws.Retained("kms-key", f"k{i}", "tagged") for i in range(6)]
    found += [aws.Retained("s3-bucket", f"log{i}", retained.ACCESS_LOG_WHY) for i in range(4)]
    (line,) = retained.cycle_summary(found, load_config(BULK_CONFIG))
    assert "from about 2 deploy/destroy cycle(s); 1 of them before the latest" in line
    assert line.endswith("adds 3 keys and 2 log bucket(s)")
    (default_line,) = retained.cycle_summary(found, load_config(DEFAULT_CONFIG_PATH))
    assert "from about 4 deploy/destroy cycle(s)" in default_line
