"""The pod diagnosis of ``make pods`` (:mod:`whisper_build.deploy.pods`): the expected wait for a first
publish told from a real preflight failure, with the preflight's real messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import (
    DRY_CONTEXT,
    HYPERPOD_NOT_FOUND,
    _dry_run_argv,
    _init_failed,
    _kubectl_main,
    _pod,
)

from settings import DEFAULT_CONFIG_PATH
from whisper_build.deploy import (
    pods,
)
from whisper_build.podstart import preflight

pytestmark = pytest.mark.usefixtures("kubectl_installed")


def _preflight_message(model_dir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = preflight.main(["--model-dir", str(model_dir), "--model", "large-v3-turbo", "--bucket", "b",
                           "--gpu-group", "g5", "--gpu-arch", "sm86", "--compute-capability", "8.6"])  # fmt: skip
    assert code == 1
    return capsys.readouterr().err


def test_pods_tell_the_expected_wait_from_a_real_preflight_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    waiting = _preflight_message(empty, capsys)
    assert "is empty: nothing is published for sm86" in waiting
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "current.json").write_text('{"version": "v9"}', encoding="utf-8")
    failed = _preflight_message(broken, capsys)
    assert "points at version 'v9'" in failed
    listing = {"items": [
        _pod("whisper-g5-a", _init_failed(waiting)),
        _pod("whisper-g6e-b", _init_failed(failed)),
        _pod("whisper-g6e-c", {"phase": "Pending", "initContainerStatuses": [
            {"name": "preflight", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}),
        _pod("whisper-g6e-d", {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "message": "0/2 nodes are available"}]}),
        _pod("whisper-g5-e", {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
    ]}  # fmt: skip
    states = pods.pod_states(json.dumps(listing))
    assert [state.verdict for state in states] == ["waiting", "failed", "waiting", "waiting", "ready"]
    lines = pods.lines(states, "whisper")
    assert lines[0].startswith("whisper-g5-a: waiting: Init:Error, expected on a first deploy")
    assert "Preflight said: preflight FAILED: the model repository mounted at" in lines[0]
    assert lines[1].startswith("whisper-g6e-b: failed: preflight FAILED (a real mismatch")
    assert lines[2].startswith("whisper-g6e-c: waiting: ImagePullBackOff: the serving image is not in ECR yet")
    assert lines[3].startswith("whisper-g6e-d: waiting: Pending, not scheduled") and "0/2 nodes" in lines[3]
    assert lines[4] == "whisper-g5-e: ready: serving"
    assert lines[5].startswith("at least one pod has a real failure")

    out: list[str] = []
    code = _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append,
                    kubectl=lambda argv: json.dumps({"items": listing["items"][:1]}))  # fmt: skip
    assert code == 0 and out[-1].startswith("nothing has failed")
    code = _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append,
                    kubectl=lambda argv: json.dumps(listing))  # fmt: skip
    assert code == 1


def test_every_not_yet_published_case_of_the_real_preflight_ends_with_the_waiting_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = []
    empty = tmp_path / "e"
    empty.mkdir()
    seen.append(_preflight_message(empty, capsys))
    files = tmp_path / "f"
    files.mkdir()
    (files / "junk").write_text("x", encoding="utf-8")
    seen.append(_preflight_message(files, capsys))
    for engine in ("ctranslate2", "torch"):
        assert preflight.main(["--model-dir", str(empty), "--model", "large-v3-turbo", "--bucket", "b",
                               "--engine", engine, "--gpu-arch", "sm86"]) == 1  # fmt: skip
        seen.append(capsys.readouterr().err)
    for message in seen:
        assert message.rstrip().endswith(preflight.VERDICT_PREFIX + preflight.VERDICT_WAITING), message
        assert pods.is_not_yet_published(message)
        # the verdict line alone decides: the same words without it are a real failure
        without = "\n".join(line for line in message.splitlines() if not line.startswith(preflight.VERDICT_PREFIX))
        assert not pods.is_not_yet_published(without)
        assert pods.pod_state(_pod("whisper-g5-a", _init_failed(without)))[0] == "failed"


def test_make_pods_exits_on_the_typed_verdicts_not_on_words_in_a_message() -> None:
    # GIVEN a pod waiting for its image, whose kubelet message happens to read ": failed: "
    pulling = {"phase": "Pending", "initContainerStatuses": [{"name": "preflight", "state": {"waiting": {
        "reason": "ErrImagePull", "message": 'pulling "whisper-serving:v1": failed: not found'}}}]}  # fmt: skip
    listing = json.dumps({"items": [_pod("whisper-g5-a", pulling)]})
    out: list[str] = []
    code = _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append, kubectl=lambda argv: listing)
    # THEN it is a wait, exit status 0, and the line still says what the kubelet said
    assert out[0] == HYPERPOD_NOT_FOUND  # HyperPod's side first (no cluster in this test)
    assert out[1].startswith("whisper-g5-a: waiting: ErrImagePull") and ": failed: not found" in out[1]
    assert code == 0


def test_pods_reads_only_the_serving_pods() -> None:
    code, lines = _dry_run_argv(["pods", "--config", str(DEFAULT_CONFIG_PATH)])
    assert code == 0 and lines == [
        "$ aws sagemaker describe-cluster --cluster-name whisper-hyperpod-hp --region us-east-1",
        f"$ kubectl --context '{DRY_CONTEXT}' -n whisper get pods -l app.kubernetes.io/name=whisper -o json",
    ]


def test_a_preflight_that_passes_now_is_not_reported_from_its_previous_run() -> None:
    earlier = {"terminated": {"exitCode": 1, "message": "preflight FAILED: the model repository … is empty"}}
    passed = {"name": "preflight", "state": {"terminated": {"exitCode": 0, "message": "preflight ok"}},
              "lastState": earlier}  # fmt: skip
    running = {"name": "preflight", "state": {"running": {}}, "lastState": earlier}
    loading = {"phase": "Pending", "containerStatuses": [{"name": "triton", "state": {"running": {}}}]}
    for status in (passed, running):
        pod = _pod("whisper-g5-a", {**loading, "initContainerStatuses": [status]})
        assert pods.preflight_message(pod) is None
        assert pods.pod_state(pod) == ("starting", "phase Pending")
    restarting = {"name": "preflight", "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": earlier}
    assert (
        pods.preflight_message(_pod("p", {"initContainerStatuses": [restarting]})) == earlier["terminated"]["message"]
    )
    out: list[str] = []
    listing = {"items": [_pod("whisper-g5-a", {**loading, "initContainerStatuses": [passed]})]}
    code = _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append,
                    kubectl=lambda argv: json.dumps(listing))  # fmt: skip
    assert code == 0 and out[1] == "whisper-g5-a: starting: phase Pending"


def _fallback_to_logs(log: str) -> str:
    """What ``terminationMessagePolicy: FallbackToLogsOnError`` keeps: the last 80 lines, at most 2048 bytes."""
    tail = "\n".join(log.splitlines()[-80:])
    return tail.encode()[-2048:].decode(errors="ignore")


def test_a_long_preflight_message_is_classified_by_its_verdict_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fixes = "".join(f"\n  fix step {i}: aws s3 cp … s3://bucket/models/large-v3-turbo/sm86/ --region us-east-1"
                    for i in range(60))  # fmt: skip
    cases = {  # first line → (what the real check raises for it, expected verdict)
        "the model repository mounted at /models is empty: nothing is published for sm86": (
            preflight.NotYetPublished, "waiting"),
        "GPU architecture mismatch: the engine was built for sm89 but this node's GPU is sm86": (
            preflight.PreflightError, "failed"),
    }  # fmt: skip
    termination_log = tmp_path / "termination-log"
    for first_line, (error, expected) in cases.items():

        def fail(
            target: Any, compute_capability: Any, message: str = first_line + fixes, error: Any = error, **_: Any
        ) -> Any:
            raise error(message)

        monkeypatch.setattr(preflight, "run_preflight", fail)
        termination_log.write_text("", encoding="utf-8")  # the kubelet provides the file
        args = ["--model-dir", str(tmp_path), "--model", "large-v3-turbo", "--bucket", "b", "--gpu-arch", "sm86",
                "--termination-log", str(termination_log)]  # fmt: skip
        assert preflight.main(args) == 1
        log = capsys.readouterr().err
        assert len(log.encode()) > 4096 and first_line not in _fallback_to_logs(log)  # the first line is cut off
        written = termination_log.read_text(encoding="utf-8")
        assert len(written.encode()) <= preflight.TERMINATION_MESSAGE_BYTES and written.startswith("preflight FAILED")
        for message in (_fallback_to_logs(log), written):
            verdict, _ = pods.pod_state(_pod("whisper-g5-a", _init_failed(message)))
            assert verdict == expected, (first_line, message[-200:])
    (tmp_path / "absent").mkdir()
    assert preflight.main([*args[:-1], str(tmp_path / "absent" / "termination-log")]) == 1
    assert not (tmp_path / "absent" / "termination-log").exists()  # written only where Kubernetes provides it


def test_the_inference_operators_worker_runs_the_preflight_in_its_main_container(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    message = _preflight_message(empty, capsys)
    assert message.rstrip().endswith("preflight-verdict: waiting-for-publish")
    worker = {"phase": "Running", "containerStatuses": [
        {"name": "worker", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "message": message}}}]}  # fmt: skip
    verdict, explanation = pods.pod_state(_pod("whisper-abc", worker))
    assert verdict == "waiting" and "Preflight said: preflight FAILED: the model repository" in explanation
    crashing = {"phase": "Running", "containerStatuses": [
        {"name": "worker", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 139, "message": "Segmentation fault"}}}]}  # fmt: skip
    assert pods.pod_state(_pod("whisper-abc", crashing))[0] == "failed"
    assert "keeps crashing" in pods.pod_state(_pod("whisper-abc", crashing))[1]


def test_a_pod_pending_for_capacity_is_named_as_such_with_what_to_do() -> None:
    message = (
        "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector."
    )
    pod = {
        "metadata": {"name": "whisper-g5-x", "labels": {"whisper-hyperpod.io/gpu-group": "g5"}},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "message": message}]},
    }
    verdict, explanation = pods.pod_state(pod)
    assert verdict == "waiting"
    assert explanation.startswith("Pending for capacity: no node of GPU group g5 has a free GPU (0/4 nodes")
    assert "list-cluster-events" in explanation and "instance_types" in explanation
