"""What outlives the stacks (:mod:`whisper_build.deploy.retained`): counted per deploy/destroy cycle."""

from __future__ import annotations

import pytest

from settings import DEFAULT_CONFIG_PATH, load_config
from whisper_build.deploy import (
    aws,
    retained,
)

pytestmark = pytest.mark.usefixtures("kubectl_installed")


def test_retained_resources_are_counted_per_deploy_destroy_cycle() -> None:
    found = [aws.Retained("kms-key", f"k{i}", "tagged") for i in range(5)]
    found += [aws.Retained("s3-bucket", f"log{i}", retained.ACCESS_LOG_WHY) for i in range(3)]
    found.append(aws.Retained("s3-bucket", "models", "model engines"))
    (line,) = retained.cycle_summary(found, load_config(DEFAULT_CONFIG_PATH))
    assert line.startswith(
        "accumulated: 5 KMS key(s) = 5 USD a month (1 USD per key-month, https://aws.amazon.com/kms/pricing/)"
    )
    assert "3 access-log bucket(s), from about 3 deploy/destroy cycle(s); 2 of them before the latest" in line
    assert (
        retained.cycle_summary([aws.Retained("s3-bucket", "models", "model engines")], load_config(DEFAULT_CONFIG_PATH))
        == []
    )
