#!/usr/bin/env bash
# Regenerate the typed cdk8s classes in k8s_charts/imports/ from the CRDs in tests/data/crds/
# (KEDA, Karpenter NodePool, HyperPod inference operator InferenceEndpointConfig)
# (offline: `cdk8s import` reads local files). Run from the repository root after `make install`:
#   bash k8s_charts/imports/regenerate.sh
# ScaledObject and TriggerAuthentication share the keda.sh group, so they are imported from one
# multi-document file (two separate imports would overwrite each other's module).
set -euo pipefail
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION=1
crds=tests/data/crds
out=k8s_charts/imports
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{ cat "$crds/keda.sh_scaledobjects.yaml"; echo '---'; cat "$crds/keda.sh_triggerauthentications.yaml"; } > "$work/keda.sh.yaml"
rm -rf "$out/sh" "$out/com"
# cdk8s-cli exits non-zero after writing the classes when its update check cannot reach npm (offline).
for spec in "$work/keda.sh.yaml" "$crds/karpenter.sh_nodepools.yaml" \
  "$crds/inference.sagemaker.aws.amazon.com_inferenceendpointconfigs.yaml"; do
  npx --no-install cdk8s import --language python --output "$out" "$spec" >/dev/null 2>&1 || true
done
# cdk8s writes sh/, com/… as namespace folders; an __init__.py makes each a regular package, so
# scripts/import_cycles.py (grimp) resolves an import of sh.keda to that module, not to k8s_charts.
for ns in sh com com/amazon com/amazon/aws com/amazon/aws/sagemaker; do
  printf '"""Namespace of the generated cdk8s imports (a regular package, so import graphs resolve its modules)."""\n' > "$out/$ns/__init__.py"
done
test -f "$out/sh/keda/__init__.py" && test -f "$out/sh/karpenter/__init__.py"
test -f "$out/com/amazon/aws/sagemaker/inference/__init__.py"
echo "regenerated $out/sh/keda, $out/sh/karpenter and $out/com/amazon/aws/sagemaker/inference"
