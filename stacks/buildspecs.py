"""Every CodeBuild buildspec of the project, as Python dicts (buildspec version 0.2).

One function per kind of build; per-architecture values come in through environment variables set
on each project, so no buildspec is repeated per GPU architecture. Variables each one reads are
listed in its docstring. CodeBuild sets ``AWS_REGION`` and ``CODEBUILD_BUILD_NUMBER`` itself
(CodeBuild User Guide, "Environment variables in build environments").
Docs: docs/engines.md, "The pieces".
"""

from __future__ import annotations

import shlex
from typing import Any

from stacks.engine_job import KEDA_PAUSE_ANNOTATION

BUILDSPEC_VERSION = "0.2"
POLL_SECONDS = 30

_KUBECTL_INSTALL = [
    # kubectl of the cluster's minor version (version skew policy), checksum-verified (kubernetes.io
    # "Install and Set Up kubectl on Linux").
    'KUBECTL_VERSION="$(curl -fsSL "https://dl.k8s.io/release/stable-${K8S_VERSION}.txt")"',
    'curl -fsSLo /usr/local/bin/kubectl "https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/amd64/kubectl"',
    'echo "$(curl -fsSL "https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/amd64/kubectl.sha256")  '
    '/usr/local/bin/kubectl" | sha256sum --check',
    "chmod +x /usr/local/bin/kubectl",
]
_KUBECONFIG = 'aws eks update-kubeconfig --name "$CLUSTER_NAME" --region "$AWS_REGION"'

_WAIT_FOR_JOB = """deadline=$((SECONDS + JOB_TIMEOUT_SECONDS))
while true; do
  if kubectl -n "$NAMESPACE" wait --for=condition=complete "job/$JOB_NAME" --timeout=60s >/dev/null 2>&1; then
    echo "job $JOB_NAME complete"; break
  fi
  if kubectl -n "$NAMESPACE" wait --for=condition=failed "job/$JOB_NAME" --timeout=1s >/dev/null 2>&1; then
    echo "job $JOB_NAME failed"; exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then echo "timed out waiting for job $JOB_NAME"; exit 1; fi
done"""


def _spec(phases: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "version": BUILDSPEC_VERSION,
        "env": {"shell": "bash"},
        "phases": {name: {"commands": commands} for name, commands in phases.items()},
    }


SERVING_PAUSED_MARKER = "serving-paused"
"""File the build phase writes before it pauses serving; the post_build phase restores serving
only when it exists (nothing to undo when the build failed earlier)."""

_PAUSE_SERVING = [
    # one command each: a failing one fails the build phase (and post_build still resumes serving)
    f"touch {SERVING_PAUSED_MARKER}",
    f'if [ "$KEDA_ENABLED" = true ]; then kubectl -n "$SERVING_NAMESPACE" annotate scaledobject '
    f'-l "$SERVING_SELECTOR" {KEDA_PAUSE_ANNOTATION}=0 --overwrite; fi',
    'kubectl -n "$SERVING_NAMESPACE" scale deployment -l "$SERVING_SELECTOR" --replicas=0',
    'SERVING_PODS="$(kubectl -n "$SERVING_NAMESPACE" get pod -l "$SERVING_SELECTOR" -o name)"',
    'if [ -n "$SERVING_PODS" ]; then kubectl -n "$SERVING_NAMESPACE" wait --for=delete pod '
    '-l "$SERVING_SELECTOR" --timeout="${DRAIN_TIMEOUT_SECONDS}s"; fi',
]

_RESUME_SERVING = f"""if [ -f {SERVING_PAUSED_MARKER} ]; then
  status=0
  if [ "$KEDA_ENABLED" = true ]; then
    kubectl -n "$SERVING_NAMESPACE" annotate scaledobject -l "$SERVING_SELECTOR" {KEDA_PAUSE_ANNOTATION}- || status=1
  fi
  kubectl -n "$SERVING_NAMESPACE" scale deployment -l "$SERVING_SELECTOR" --replicas="$SERVING_REPLICAS" || status=1
  test "$status" -eq 0
fi"""


ENGINE_CURRENT_MARKER = "engine-current"
"""File the build phase writes when the published engine was built from the same inputs; every later
command of the engine build then does nothing, so serving is never paused."""

_CHECK_ENGINE_CURRENT = f"""if [ "${{FORCE_ENGINE_BUILD:-false}}" = true ]; then
  echo "FORCE_ENGINE_BUILD=true: rebuilding"
elif [ -z "$BUILD_KEY" ]; then
  echo "no BUILD_KEY: rebuilding"
else
  CURRENT_VERSION="$(aws s3 cp "s3://$MODEL_BUCKET/${{MODEL_PREFIX}}current.json" - 2>/dev/null | jq -r '.version // empty' 2>/dev/null || true)"
  PUBLISHED_KEY=""
  if [ -n "$CURRENT_VERSION" ]; then
    PUBLISHED_KEY="$(aws s3 cp "s3://$MODEL_BUCKET/${{MODEL_PREFIX}}$CURRENT_VERSION/manifest.json" - 2>/dev/null | jq -r '.build_key // empty' 2>/dev/null || true)"
  fi
  if [ -n "$PUBLISHED_KEY" ] && [ "$PUBLISHED_KEY" = "$BUILD_KEY" ]; then
    touch {ENGINE_CURRENT_MARKER}
    echo "engine current: version $CURRENT_VERSION was built with $BUILD_KEY; skipping the build, serving untouched"
  else
    echo "rebuilding: current version '${{CURRENT_VERSION:-none}}' has build key '${{PUBLISHED_KEY:-none}}', this build is $BUILD_KEY"
  fi
fi"""


def _unless_engine_current(command: str) -> str:
    """``command`` guarded so that it does nothing once :data:`ENGINE_CURRENT_MARKER` exists."""
    return f"if [ ! -f {ENGINE_CURRENT_MARKER} ]; then\n{command}\nfi"


def hyperpod_job_buildspec() -> dict[str, Any]:
    """Default runner: free the build group's GPU, run the engine-build Job there, then resume serving.

    The build group's serving pods hold its GPUs (``min_replicas`` ≥ 1, one GPU each), so a Job
    applied next to them would stay Pending. The build phase therefore first pauses the group's KEDA
    ScaledObject (annotation ``autoscaling.keda.sh/paused-replicas=0``: KEDA scales the target to
    zero and stops autoscaling; keda-docs 2.18 ``reference/scaledobject-spec.md``), scales the
    Deployment to 0 and waits for its pods to be gone, and only then applies the Job and waits for it.
    post_build runs whether the build phase succeeded or failed (CodeBuild User Guide, "Build phase
    transitions"): it prints the pod's last 500 log lines, removes the pause annotation and scales
    the Deployment back to ``SERVING_REPLICAS`` (KEDA autoscales from there again).

    Before anything else the build phase checks whether the engine ``current.json`` points to was
    built with ``BUILD_KEY`` (the manifest's ``build_key``, read with the AWS CLI and ``jq``, both in
    CodeBuild's standard image; the same comparison as ``python -m whisper_build.release.publish current``,
    which needs this project's code the project has no checkout of). If so it writes
    :data:`ENGINE_CURRENT_MARKER` and every later command does nothing: no pause, no Job, no scaling.
    Any failure to read the pointer or manifest means "rebuild". ``FORCE_ENGINE_BUILD=true``
    (override it on ``aws codebuild start-build``) always rebuilds.

    Reads: ``BUILD_KEY``, ``MODEL_BUCKET``, ``MODEL_PREFIX`` (``models/<model>/<arch>/``),
    ``FORCE_ENGINE_BUILD``, ``CLUSTER_NAME``, ``K8S_VERSION`` (e.g. ``1.33``), ``NAMESPACE`` (the build namespace),
    ``GPU_ARCH``, ``JOB_MANIFEST`` (JSON ``List`` of ServiceAccount + Job with the name placeholder
    ``__JOB_NAME__``, from :func:`stacks.engine_job.engine_build_manifests`),
    ``JOB_TIMEOUT_SECONDS``, ``SERVING_NAMESPACE``, ``SERVING_SELECTOR`` (labels of the build
    group's Deployment, pods and ScaledObject), ``SERVING_REPLICAS``, ``KEDA_ENABLED``
    (``true``/``false``) and ``DRAIN_TIMEOUT_SECONDS``.
    """
    return _spec(
        {
            "install": _KUBECTL_INSTALL,
            "pre_build": [_KUBECONFIG],
            "build": [
                _CHECK_ENGINE_CURRENT,
                'JOB_NAME="engine-build-${GPU_ARCH}-${CODEBUILD_BUILD_NUMBER}"',
                *(
                    _unless_engine_current(command)
                    for command in [
                        *_PAUSE_SERVING,
                        'printenv JOB_MANIFEST | sed "s/__JOB_NAME__/${JOB_NAME}/" > job.json',
                        "kubectl apply -f job.json",
                        _WAIT_FOR_JOB,
                    ]
                ),
            ],
            # _RESUME_SERVING acts only after a pause (SERVING_PAUSED_MARKER), never after a skip
            "post_build": [
                _unless_engine_current('kubectl -n "$NAMESPACE" logs "job/$JOB_NAME" --tail=500 || true'),
                _RESUME_SERVING,
            ],
        }
    )


def fleet_buildspec(build_command: list[str], current_command: list[str]) -> dict[str, Any]:
    """Build and publish directly on a CodeBuild GPU fleet host, inside the serving image.

    ``build_command`` is :func:`stacks.invocations.engine_build_command` (may hold CloudFormation
    tokens, which stay intact through quoting). ``current_command`` is ``python -m
    whisper_build.release.publish current ...`` with the build's key (the serving image holds this
    project): when it exits 0 the published engine was built from the same inputs and the build
    is skipped, unless ``FORCE_ENGINE_BUILD=true``. ``nvidia-smi`` is printed first for the log.
    """
    check, build = shlex.join(current_command), shlex.join(build_command)
    return _spec(
        {
            "pre_build": ["nvidia-smi"],
            "build": [
                f'if [ "${{FORCE_ENGINE_BUILD:-false}}" != true ] && {check}; then echo "engine current: build skipped"; '
                f"else {build}; fi"
            ],
        }
    )


def image_buildspec() -> dict[str, Any]:
    """Build the serving image and push it to ECR, unless the tag already exists (tags are immutable).

    Reads: ``REPOSITORY_URI``, ``REPOSITORY_NAME``, ``IMAGE_TAG``, ``DOCKERFILE`` (path in the source).
    """
    return _spec(
        {
            "pre_build": [
                'aws ecr get-login-password --region "$AWS_REGION" | '
                'docker login --username AWS --password-stdin "${REPOSITORY_URI%%/*}"',
            ],
            "build": [
                'if aws ecr describe-images --repository-name "$REPOSITORY_NAME" --image-ids "imageTag=$IMAGE_TAG" '
                '>/dev/null 2>&1; then echo "$REPOSITORY_URI:$IMAGE_TAG exists; bump serving.image_tag to rebuild"; '
                'else docker build -f "$DOCKERFILE" -t "$REPOSITORY_URI:$IMAGE_TAG" . '
                '&& docker push "$REPOSITORY_URI:$IMAGE_TAG"; fi',
            ],
        }
    )


def rollout_buildspec() -> dict[str, Any]:
    """Restart the serving Deployments so their init container follows the new ``current.json``.

    Reads: ``CLUSTER_NAME``, ``K8S_VERSION``, ``NAMESPACE``, ``SELECTOR`` (label selector of the
    serving Deployments) and ``ROLLOUT_TIMEOUT_SECONDS``.
    """
    return _spec(
        {
            "install": _KUBECTL_INSTALL,
            "pre_build": [_KUBECONFIG],
            "build": [
                'kubectl -n "$NAMESPACE" rollout restart deployment -l "$SELECTOR"',
                'for d in $(kubectl -n "$NAMESPACE" get deployment -l "$SELECTOR" -o name); do '
                'kubectl -n "$NAMESPACE" rollout status "$d" --timeout="${ROLLOUT_TIMEOUT_SECONDS}s"; done',
            ],
        }
    )


def start_build_commands() -> list[str]:
    """Pipeline-step commands: start the CodeBuild project ``$PROJECT_NAME`` and wait for its result.

    Keeps the real work in the stage's projects (runnable by hand with ``aws codebuild start-build``)
    and the pipeline a thin sequence of triggers.
    """
    return [
        'BUILD_ID="$(aws codebuild start-build --project-name "$PROJECT_NAME" --query build.id --output text)"',
        'echo "started $BUILD_ID"',
        f"""while true; do
  STATUS="$(aws codebuild batch-get-builds --ids "$BUILD_ID" --query 'builds[0].buildStatus' --output text)"
  case "$STATUS" in
    SUCCEEDED) echo "$BUILD_ID succeeded"; break ;;
    IN_PROGRESS) sleep {POLL_SECONDS} ;;
    *) echo "$BUILD_ID ended with $STATUS"; exit 1 ;;
  esac
done""",
    ]
