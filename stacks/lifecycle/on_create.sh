#!/bin/bash
# HyperPod (EKS) OnCreate lifecycle script of whisper-hyperpod.
#
# Runs once as root when HyperPod provisions a node, before the node joins the EKS cluster.
# It moves the containerd data root onto the instance-group EBS volume that HyperPod mounts at
# /opt/sagemaker (InstanceStorageConfigs), so the large serving image (Triton + TensorRT-LLM,
# several GB) and its layers do not fill the root volume. Same approach as AWS's base script
# (aws/sagemaker-hyperpod-cluster-setup eks/cloudformation/resources/lifecycle-script/base-config/on_create.sh).
set -euo pipefail

LOG_FILE="/var/log/provision/provisioning.log"
mkdir -p "$(dirname "$LOG_FILE")"
touch "$LOG_FILE"
log() { echo "[$(date -u +%Y-%m-%dT%H:%M:%SZ)] $*" | tee -a "$LOG_FILE"; }

DATA_ROOT="/opt/sagemaker/containerd/data-root"
CONTAINERD_CONFIG="/etc/eks/containerd/containerd-config.toml"

log "[start] on_create.sh"
if mountpoint -q /opt/sagemaker; then
  mkdir -p "$DATA_ROOT"
  if [[ -f "$CONTAINERD_CONFIG" ]]; then
    # Replace (or uncomment) the top-level 'root = ...' line of the EKS containerd config.
    sed -i -e "/^[# ]*root\s*=/c\root = \"$DATA_ROOT\"" "$CONTAINERD_CONFIG"
    log "containerd data root set to $DATA_ROOT in $CONTAINERD_CONFIG"
  else
    log "WARNING: $CONTAINERD_CONFIG not found; containerd keeps its default data root"
  fi
else
  log "WARNING: /opt/sagemaker is not a mount point; containerd keeps its default data root"
fi
log "[stop] on_create.sh"
