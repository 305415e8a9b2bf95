"""Generated code: cdk8s typed classes for the KEDA (``sh.keda``), Karpenter (``sh.karpenter``) and
HyperPod inference operator (``com.amazon.aws.sagemaker.inference``: ``InferenceEndpointConfig``)
CRDs, produced offline by ``cdk8s import`` from ``tests/data/crds/``. Do not edit; regenerate with
``bash k8s_charts/imports/regenerate.sh``."""
