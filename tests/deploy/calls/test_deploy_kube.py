"""kubectl in this config's context (:mod:`whisper_build.deploy.kube`): a fake kubectl on ``PATH``, its
failures and timeout, the context name in each partition."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_helpers import (
    CONTEXT,
    HYPERPOD_NOT_FOUND,
    _kubectl_main,
)

from settings import DEFAULT_CONFIG_PATH, load_config, names
from whisper_build.deploy import (
    kube,
)

pytestmark = pytest.mark.usefixtures("kubectl_installed")


def _fake_kubectl(bin_dir: Path, script: str) -> Path:
    """A ``kubectl`` on ``PATH`` that appends its argv to ``calls`` and then runs ``script``."""
    bin_dir.mkdir(exist_ok=True)
    calls = bin_dir / "calls"
    path = bin_dir / "kubectl"
    path.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n{script}\n', encoding="utf-8")
    path.chmod(0o755)
    return calls


def test_make_pods_reads_this_configs_cluster_and_fails_when_kubectl_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    calls = _fake_kubectl(bin_dir, """echo '{"items": []}'""")
    out: list[str] = []
    assert _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append) == 0
    assert calls.read_text(encoding="utf-8").split() == [
        "--context", CONTEXT, "-n", "whisper", "get", "pods", "-l", "app.kubernetes.io/name=whisper", "-o", "json"
    ]  # fmt: skip
    assert out == [HYPERPOD_NOT_FOUND, "no pods in namespace whisper yet"]

    _fake_kubectl(bin_dir, "echo 'error: You must be logged in to the server (Unauthorized)' >&2; exit 1")
    assert _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append) == 1
    err = capsys.readouterr().err
    assert "error: could not read the pods: kubectl failed: error: You must be logged in to the server" in err
    assert "make kubeconfig CONFIG=" in err and "aws sso login" in err

    _fake_kubectl(bin_dir, "sleep 5")
    monkeypatch.setattr(kube, "KUBECTL_TIMEOUT_SECONDS", 0.3)
    assert _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append) == 1
    assert "kubectl did not answer within 0.3 s" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("region", "partition"), [("us-east-1", "aws"), ("cn-north-1", "aws-cn"), ("us-gov-west-1", "aws-us-gov")]
)
def test_the_kubectl_context_is_the_cluster_arn_in_the_regions_partition(region: str, partition: str) -> None:
    config = load_config().model_copy(update={"region": region})
    assert kube.context_name(config, "123456789012") == (
        f"arn:{partition}:eks:{region}:123456789012:cluster/{names.cluster_name(config)}"
    )
