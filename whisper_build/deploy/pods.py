"""Why the serving pods are not ready: ``make pods CONFIG=…`` and the failure report of ``make deploy``'s waits.

Reads ``kubectl -n <namespace> get pods -o json`` and tells, per pod, the expected states of a first
deploy from real failures: a preflight verdict ``waiting-for-publish``
(:data:`whisper_build.podstart.preflight.VERDICT_PREFIX`, read from the termination message) is
**waiting** for step ``engines`` or a publish; any other preflight failure, one without a verdict
line included, is **real** (printed with its fix); an image pull error means the image is not in ECR
yet or the tag is wrong; ``Pending`` and unschedulable is **Pending for capacity** when the scheduler says no GPU of the group is
free or no node of it exists (with what to do), else no GPU node of the group has joined yet.
Each pod gets a typed :class:`PodState`; :func:`lines` turns them into text, at the edge.
Docs: docs/deploy.md, "Deploy".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from settings import labels
from settings.schema import DeploymentConfig
from whisper_build.deploy import kube
from whisper_build.podstart import preflight

PREFLIGHT_CONTAINER = "preflight"
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
CAPACITY_SIGNS = ("Insufficient nvidia.com/", "didn't match Pod's node affinity")
"""kube-scheduler's ``PodScheduled`` messages for a pod whose GPU group has no free GPU or no node yet
(``0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector``)."""

PodVerdict = Literal["ready", "waiting", "failed", "starting"]
"""``ready``: serving; ``waiting``: an expected state of a first deploy; ``failed``: a real failure to fix;
``starting``: none of these yet."""


@dataclass(frozen=True)
class PodState:
    """One serving pod's verdict and, in words, why."""

    pod: str
    verdict: PodVerdict
    explanation: str


def _failure_message(state: dict[str, Any]) -> str | None:
    terminated = state.get("terminated") or {}
    if terminated.get("exitCode", 0) != 0 and terminated.get("message"):
        return str(terminated["message"]).strip()
    return None


def _latest_failure(status: dict[str, Any]) -> str | None:
    """A container's failure message: its current run's, or the previous run's while it waits to restart."""
    state = status.get("state") or {}
    if "terminated" in state:
        return _failure_message(state)
    if "waiting" in state:
        return _failure_message(status.get("lastState") or {})
    return None


def preflight_message(pod: dict[str, Any]) -> str | None:
    """The preflight's failure message, or ``None`` when its latest run did not fail.

    The preflight is the init container ``preflight`` (``serving.target: deployments``) or, for the
    inference operator's worker, which runs it before the supervisor (``--select-engine --exec``),
    any container whose failure message carries the preflight's verdict line. The current run's
    ``state`` decides: ``terminated`` with a non-zero exit gives its message, ``terminated`` with exit
    0 or ``running`` give ``None`` (the preflight passed; Triton may still be loading). Only while the
    container is ``waiting`` (``CrashLoopBackOff`` between restarts) is ``lastState``, the previous
    run, read.
    """
    status = pod.get("status", {})
    for container in status.get("initContainerStatuses") or []:
        if container.get("name") == PREFLIGHT_CONTAINER:
            return _latest_failure(container)
    for container in status.get("containerStatuses") or []:
        message = _latest_failure(container)
        if message is not None and preflight.read_verdict(message) is not None:
            return message
    return None


def is_not_yet_published(message: str) -> bool:
    """Whether a preflight failure only means nothing is published yet (a normal first-deploy state).

    Its verdict line (:data:`whisper_build.podstart.preflight.VERDICT_PREFIX`) decides; a message
    without one is a real failure.
    """
    return preflight.read_verdict(message) == preflight.VERDICT_WAITING


def _failure_line(message: str) -> str:
    lines = [line for line in message.splitlines() if line.strip()]
    failed = [line for line in lines if line.startswith("preflight FAILED")]
    return (failed or lines or [""])[-1 if failed else 0]


def pod_state(pod: dict[str, Any]) -> tuple[PodVerdict, str]:
    """``(verdict, explanation)`` of one pod; verdict is ``ready``, ``waiting``, ``failed`` or ``starting``."""
    status = pod.get("status", {})
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if conditions.get("Ready", {}).get("status") == "True":
        return "ready", "serving"
    message = preflight_message(pod)
    if message is not None:
        if is_not_yet_published(message):
            return "waiting", (
                "Init:Error, expected on a first deploy: nothing is published for this group yet (the inference "
                "operator's worker shows it as CrashLoopBackOff). The engine "
                "build (step 'engines') publishes it; torch/ctranslate2 groups wait for you to publish. "
                f"Preflight said: {_failure_line(message)}"
            )
        return "failed", f"preflight FAILED (a real mismatch; the message says how to fix it): {message}"
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = container.get("state", {}).get("waiting") or {}
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            return "waiting", (
                f"{waiting['reason']}: the serving image is not in ECR yet (step 'serving-image' builds it) "
                f"or serving.image_tag is wrong: {waiting.get('message', '')}".strip()
            )
        if waiting.get("reason") == "CrashLoopBackOff" and container.get("name") != PREFLIGHT_CONTAINER:
            return "failed", (
                f"container {container.get('name')} keeps crashing: kubectl logs <pod> -c {container.get('name')} "
                "--previous"
            )
    scheduled = conditions.get("PodScheduled", {})
    if status.get("phase") == "Pending" and scheduled.get("status") == "False":
        if any(sign in scheduled.get("message", "") for sign in CAPACITY_SIGNS):
            group = pod.get("metadata", {}).get("labels", {}).get(labels.GPU_GROUP_LABEL, "?")
            return "waiting", (
                f"Pending for capacity: no node of GPU group {group} has a free GPU ({scheduled.get('message', '')}). "
                "If it stays so after HyperPod's nodes should have joined, the group's types may be out of capacity: "
                f"read aws sagemaker list-cluster-events --cluster-name <cluster> --event-level Error, then add "
                "fallback types to the group's instance_types, raise another group, or wait (docs/deploy.md, "
                '"When a GPU type runs out")'
            )
        return "waiting", (
            "Pending, not scheduled: no GPU node of this group has room or has joined yet (HyperPod instances "
            f"join 20-60 min into step 'stacks'): {scheduled.get('message', '')}".strip()
        )
    return "starting", f"phase {status.get('phase', '?')}"


def _owned_by_job(pod: dict[str, Any]) -> bool:
    return any(owner.get("kind") == "Job" for owner in pod.get("metadata", {}).get("ownerReferences") or [])


def pod_states(pods_json: str) -> list[PodState]:
    """The state of each serving pod of ``kubectl get pods -o json``; pods of Jobs (the engine builds) are left out.

    Raises:
        json.JSONDecodeError: ``pods_json`` is no JSON.
    """
    pods = [pod for pod in json.loads(pods_json).get("items", []) if not _owned_by_job(pod)]
    return [PodState(pod["metadata"]["name"], *pod_state(pod)) for pod in pods]


def has_failure(states: Sequence[PodState]) -> bool:
    """Whether a pod has a real failure (``make pods`` then exits 1)."""
    return any(state.verdict == "failed" for state in states)


def lines(states: Sequence[PodState], namespace: str) -> list[str]:
    """One line per pod (``<pod>: <verdict>: <explanation>``) and a summary; one line when there are none."""
    if not states:
        return [f"no pods in namespace {namespace} yet"]
    text = [f"{state.pod}: {state.verdict}: {state.explanation}" for state in states]
    if has_failure(states):
        text.append(
            "at least one pod has a real failure: fix it as its message says (docs/kubernetes.md, Fail-fast preflight)"
        )
    elif all(state.verdict == "ready" for state in states):
        text.append("every pod is ready")
    else:
        text.append("nothing has failed: the pods are waiting for the steps above (or for you) to publish")
    return text


def pods_command(config: DeploymentConfig, account: str) -> list[str]:
    """``kubectl --context <cluster ARN> -n <namespace> get pods -l app.kubernetes.io/name=whisper -o json``.

    The serving pods of every GPU group (the Service selector, ``k8s_charts.naming.app_labels``), not
    the build Jobs', of this config's cluster (:mod:`.kube`). Needs only the namespace access of step
    ``kubectl``. For ``serving.target: inference_operator`` the operator makes the pods and their
    labels are not ours, so every pod of the namespace is read (:func:`diagnose` leaves the Jobs'
    out); how the operator labels its pods is not verified here.
    """
    if config.serving.target == "inference_operator":
        return list(kube.kubectl_argv(config, account, "get", "pods", "-o", "json"))
    selector = f"{labels.APP_NAME_LABEL}={labels.APP_NAME}"
    return list(kube.kubectl_argv(config, account, "get", "pods", "-l", selector, "-o", "json"))


class PodsUnreadable(Exception):
    """kubectl could not list the pods; the message says why and what to do."""


def read_pods(config: DeploymentConfig, account: str, kubectl: Callable[[Sequence[str]], str]) -> list[PodState]:
    """:func:`pod_states` of the live namespace.

    Raises:
        PodsUnreadable: kubectl failed, timed out, could not be run, or printed no JSON.
    """
    try:
        return pod_states(kubectl(pods_command(config, account)))
    except kube.KUBECTL_ERRORS as err:
        raise PodsUnreadable(f"could not read the pods: {kube.describe_error(err)}") from err
    except json.JSONDecodeError as err:
        raise PodsUnreadable(f"could not read the pods: kubectl printed no JSON ({err})") from err


def report(config: DeploymentConfig, account: str, kubectl: Callable[[Sequence[str]], str]) -> list[str]:
    """:func:`lines` of :func:`read_pods`, or one line saying why the pods could not be read (never raises)."""
    try:
        return lines(read_pods(config, account, kubectl), config.serving.namespace)
    except PodsUnreadable as err:
        return [str(err)]
