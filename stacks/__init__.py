"""AWS CDK stacks of whisper-hyperpod, one concern each.

Network, storage, EKS + HyperPod cluster, observability, workloads (the cdk8s charts), engine build,
bulk jobs, and the CDK Pipelines delivery.
Entry point: :func:`stacks.whisper_app.add_whisper_stacks` wires every stack into an ``App`` or a
``Stage`` from one validated :class:`settings.DeploymentConfig`; :func:`stacks.nag.enable_nag`
registers the cdk-nag AwsSolutions pack and :mod:`stacks.gates` the synthesis gates.
Docs: docs/deploy.md, "Stacks".
"""

from stacks.whisper_app import WhisperStacks, add_whisper_stacks

__all__ = ["WhisperStacks", "add_whisper_stacks"]
