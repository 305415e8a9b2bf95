#!/usr/bin/env bash
# Publish the HyperPod dependency Helm chart to the OCI registry the cluster stack installs it from.
#
# AWS ships the chart only in git (aws/sagemaker-hyperpod-cli, helm_chart/HyperPodHelmChart), not in
# a Helm repository. This script packages the commit pinned in the deployment config
# (cluster.hyperpod_chart.git_ref) as version cluster.hyperpod_chart.version and pushes it to
#   - cluster.hyperpod_chart.oci_repository when set, else
#   - the ECR repository <project>/charts/hyperpod-helm-chart created by the storage stack.
# Run it once per chart version, after deploying the storage stack and before the cluster stack
# (docs/deploy.md). Needs: git, helm >= 3.8, aws CLI v2 with credentials for the target account.
#
# Usage: scripts/publish_hyperpod_chart.sh [config.yaml]
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONFIG="${1:-$REPO_ROOT/config/default.yaml}"
PYTHON="${PYTHON:-$REPO_ROOT/.venv/bin/python}"
CHART_GIT_URL="https://github.com/aws/sagemaker-hyperpod-cli.git"
CHART_PATH="helm_chart/HyperPodHelmChart"
CHART_NAME="hyperpod-helm-chart"

read -r GIT_REF VERSION PROJECT REGION OCI_REPOSITORY < <(
  cd "$REPO_ROOT" && "$PYTHON" -c '
import sys
from settings import load_config
c = load_config(sys.argv[1])
h = c.cluster.hyperpod_chart
print(h.git_ref, h.version, c.project_name, c.region, h.oci_repository or "-")
' "$CONFIG"
)

if [[ "$OCI_REPOSITORY" == "-" ]]; then
  ACCOUNT="$(aws sts get-caller-identity --query Account --output text)"
  REGISTRY="$ACCOUNT.dkr.ecr.$REGION.amazonaws.com"
  PUSH_TO="oci://$REGISTRY/$PROJECT/charts"
else
  # Config holds the full chart reference (.../hyperpod-helm-chart); helm push wants its parent.
  [[ "$OCI_REPOSITORY" == */"$CHART_NAME" ]] || { echo "oci_repository must end with /$CHART_NAME" >&2; exit 2; }
  PUSH_TO="${OCI_REPOSITORY%/"$CHART_NAME"}"
  REGISTRY="$(echo "${PUSH_TO#oci://}" | cut -d/ -f1)"
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
echo "fetching $CHART_GIT_URL@$GIT_REF"
git -C "$WORK" init -q src
git -C "$WORK/src" remote add origin "$CHART_GIT_URL"
git -C "$WORK/src" fetch -q --depth 1 origin "$GIT_REF"
git -C "$WORK/src" checkout -q FETCH_HEAD

helm dependency update "$WORK/src/$CHART_PATH"
helm package "$WORK/src/$CHART_PATH" --version "$VERSION" --destination "$WORK"

if [[ "$REGISTRY" == *.dkr.ecr.*.amazonaws.com ]]; then
  aws ecr get-login-password --region "$REGION" | helm registry login --username AWS --password-stdin "$REGISTRY"
fi
helm push "$WORK/$CHART_NAME-$VERSION.tgz" "$PUSH_TO"
echo "published $PUSH_TO/$CHART_NAME:$VERSION"
