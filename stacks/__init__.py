"""AWS CDK stacks of whisper-hyperpod: network, storage, EKS + HyperPod cluster.

Entry point: :func:`stacks.whisper_app.add_whisper_stacks` wires every stack into an ``App`` or a
``Stage`` from one validated :class:`settings.DeploymentConfig`; :func:`stacks.nag.enable_nag`
registers the cdk-nag AwsSolutions pack.
Docs: docs/deploy.md, "Stacks".
"""

from stacks.whisper_app import WhisperStacks, add_whisper_stacks

__all__ = ["WhisperStacks", "add_whisper_stacks"]
