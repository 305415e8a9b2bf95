"""Pydantic schema of the deployment config (``config/default.yaml``).

Every model forbids unknown keys, so a misspelt key fails synthesis instead of being ignored.
Cross-field rules (duplicate group names, replica bounds, GPU architecture derivation) are
checked here, once; stacks and charts trust a validated :class:`DeploymentConfig`.
Docs: docs/contracts.md, "1. Deployment config".
"""

from __future__ import annotations

import difflib
import re
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from settings import cidrs, gpu_catalog, namespaces, network_plan, regions, storage, system_nodes
from settings.bulk import BulkSettings, check_groups, worker_groups
from settings.capacity import CapacitySettings, check_instance_types, config_problems, smallest
from settings.engines import ENGINE_PROFILES, EngineKind, EngineProfile
from settings.gpu_catalog import GpuSpec, InstanceSpec, MigProfile
from settings.prices import PricingSettings

HYPERPOD_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$"
"""``InstanceGroupName`` / ``ClusterName`` pattern of ``AWS::SageMaker::Cluster`` (1–63 chars)."""

HYPERPOD_KUBERNETES_VERSIONS = ("1.28", "1.29", "1.30", "1.31", "1.32", "1.33", "1.34")
"""Kubernetes versions HyperPod EKS supports (HyperPod EKS prerequisites page, 2026)."""

MelBins = Literal[80, 128]
"""Mel bins of a Whisper encoder input: 80 (tiny … large-v2) or 128 (large-v3, large-v3-turbo)."""

WHISPER_MODELS: dict[str, tuple[str, MelBins, bool]] = {
    # name: (Hugging Face id, mel bins, multilingual)
    "large-v3-turbo": ("openai/whisper-large-v3-turbo", 128, True),
    "large-v3": ("openai/whisper-large-v3", 128, True),
    "large-v2": ("openai/whisper-large-v2", 80, True),
    "medium": ("openai/whisper-medium", 80, True),
    "medium.en": ("openai/whisper-medium.en", 80, False),
    "small": ("openai/whisper-small", 80, True),
    "small.en": ("openai/whisper-small.en", 80, False),
    "base": ("openai/whisper-base", 80, True),
    "base.en": ("openai/whisper-base.en", 80, False),
    "tiny": ("openai/whisper-tiny", 80, True),
    "tiny.en": ("openai/whisper-tiny.en", 80, False),
    "distil-large-v3": ("distil-whisper/distil-large-v3", 128, True),
    "distil-large-v2": ("distil-whisper/distil-large-v2", 80, True),
    "distil-medium.en": ("distil-whisper/distil-medium.en", 80, False),
    "distil-small.en": ("distil-whisper/distil-small.en", 80, False),
}
"""Whisper checkpoints TensorRT-LLM's ``convert_checkpoint.py --model_name`` accepts, with their
Hugging Face ids and mel-bin counts (128 for large-v3 and large-v3-turbo, 80 before: model cards)."""

WHISPER_MAX_NEW_TOKENS = 224
"""OpenAI Whisper samples at most ``n_text_ctx // 2 = 224`` tokens per 30 s window
(openai/whisper ``decoding.py`` ``sample_len``)."""

PATTERN_RULES = {
    r"^[0-9a-f]{40}$": "a full 40-character git commit hash (lowercase hex), e.g. 067d658b2d5c3d347afbadd75e1425214e965dcb",
    r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$": "a semantic version such as 0.1.0 or 0.1.0-067d658",
    r"^oci://[^\s]+$": "an OCI reference starting with oci:// and without spaces",
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$": "lowercase letters, digits and hyphens, starting and ending with a letter "
    "or digit (a Kubernetes namespace name)",
    r"^arn:aws[a-z-]*:(codestar-connections|codeconnections):": "the ARN of a CodeConnections connection "
    "(arn:aws:codeconnections:<region>:<account>:connection/<id>)",
    r"^[\w.-]+/[\w.-]+$": "owner/name of a repository, e.g. my-org/whisper-hyperpod",
    r"^[a-z][a-z0-9-]{1,30}[a-z0-9]$": "3–32 lowercase letters, digits and hyphens, starting with a letter and "
    "not ending with a hyphen (it prefixes stack, bucket and repository names)",
    r"^\d{12}$": 'a 12-digit AWS account id, quoted in YAML ("123456789012")',
    r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/[0-9a-f-]+$": "the ARN of an ACM certificate "
    "(arn:aws:acm:<region>:<account>:certificate/<id>)",
    r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$": "a lowercase DNS name such as "
    "whisper.example.com (no wildcard)",
}
"""Every ``Field(pattern=...)`` of the schema → the rule in words, which a config error prints instead of
the regular expression (``settings.loader``). A test checks that every pattern has an entry."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSettings(_Strict):
    """The Whisper model served everywhere and how its TensorRT-LLM engines are built."""

    name: str = Field("large-v3-turbo", description="Whisper checkpoint, one of WHISPER_MODELS.")
    max_batch_size: int = Field(16, ge=1, le=256, description="Engine and Triton max batch size.")
    max_output_len: int = Field(
        WHISPER_MAX_NEW_TOKENS, ge=1, le=WHISPER_MAX_NEW_TOKENS, description="Tokens per 30 s window."
    )
    beam_width: int = Field(1, ge=1, le=8)
    weight_only: Literal["none", "int8", "int4"] = "none"
    dtype: Literal["float16", "bfloat16"] = "float16"
    torch_cuda_graphs: bool = Field(
        True,
        description="serving_engine torch: decode through CUDA graphs captured per batch bucket at start-up; "
        "false = the same static-cache decoder run eagerly (docs/engines.md).",
    )

    @field_validator("name")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in WHISPER_MODELS:
            raise ValueError(f"unknown Whisper model '{value}'; accepted: {', '.join(WHISPER_MODELS)}")
        return value

    @property
    def hf_id(self) -> str:
        """Hugging Face model id, e.g. ``openai/whisper-large-v3-turbo``."""
        return WHISPER_MODELS[self.name][0]

    @property
    def n_mels(self) -> MelBins:
        """Mel bins the encoder expects (80 or 128)."""
        return WHISPER_MODELS[self.name][1]

    @property
    def multilingual(self) -> bool:
        """False for English-only (``.en``) checkpoints, which take no language token."""
        return WHISPER_MODELS[self.name][2]


class GpuGroup(_Strict):
    """One GPU type of the fleet: a HyperPod instance group, a Deployment, a volume, a ScaledObject."""

    name: str = Field(
        min_length=1,
        max_length=63,
        description="Instance group name; also names Kubernetes objects (`whisper-<name>`), so lowercase.",
    )
    instance_type: str = Field(
        description="SageMaker HyperPod instance type, e.g. ml.g5.2xlarge (botocore's ClusterInstanceType list); "
        "or give instance_types instead."
    )
    instance_types: list[str] = Field(
        default_factory=list,
        description="Priority list (1–20, first preferred, one GPU model) instead of instance_type: a HyperPod "
        "flexible instance group that falls back down the list when a type has no capacity; [instance_type] "
        "when omitted.",
    )
    instance_count: int = Field(1, ge=0, description="Instances in the HyperPod instance group.")
    min_instance_count: int | None = Field(
        None, ge=0, description="Fewest instances for the group to go InService (Continuous provisioning)."
    )
    threads_per_core: Literal[1, 2] = Field(2, description="1 disables hyperthreading.")
    gpu_arch: str | None = Field(None, description="e.g. sm86; derived from the instance family when omitted.")
    ebs_volume_gb: int = Field(500, ge=1, le=16384, description="Instance storage at /opt/sagemaker.")
    serving_engine: EngineKind = Field(
        "tensorrt_llm",
        description="ctranslate2 serves a group that has no TensorRT-LLM engine yet instead of failing; "
        "torch serves the Hugging Face checkpoint published under models/<model>/hf/ (e.g. a fine-tune) "
        "with no engine build.",
    )
    capacity: int | None = Field(
        None, ge=1, description="Concurrent requests one pod is sized for; GPU default when omitted."
    )
    min_replicas: int = Field(
        1,
        ge=0,
        description="Fewest pods KEDA keeps (0: scale to zero when idle); without autoscaling the "
        "Deployment runs max(min_replicas, 1) pods.",
    )
    max_replicas: int = Field(
        1, ge=1, description="Upper bound for KEDA; without node autoscaling <= the group's GPUs."
    )
    mig_profile: str | None = Field(
        None,
        description="Serve on MIG slices of this profile (e.g. 1g.10gb on H100) instead of whole GPUs; "
        "one pod per slice. Only on the GPUs and instance types HyperPod partitions with MIG.",
    )
    engine_builder: Literal["hyperpod_job", "codebuild_fleet"] = Field(
        "hyperpod_job",
        description="Where this architecture's engine is compiled: a Job on this group's nodes, "
        "or a CodeBuild reserved GPU fleet of the matching instance type.",
    )

    @field_validator("name")
    @classmethod
    def _hyperpod_name(cls, value: str) -> str:
        if not re.match(HYPERPOD_NAME_PATTERN, value) or value != value.lower():
            raise ValueError(
                f"'{value}' must be lowercase letters and digits, optionally joined by hyphens, starting and "
                "ending with a letter or digit (HyperPod's InstanceGroupName rule; it also names Kubernetes objects)"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _one_or_a_list(cls, data: object) -> object:
        """``instance_type: t`` is ``instance_types: [t]``; with a list, ``instance_type`` is its first entry.

        Both may be given (a dumped config has both) when ``instance_type`` is the list's first entry.
        """
        if not isinstance(data, dict):
            return data
        listed = data.get("instance_types")
        if "instance_type" in data and "instance_types" in data and (not listed or listed[0] != data["instance_type"]):
            raise ValueError(
                "instance_type and instance_types are both set and instance_type is not the list's first entry; "
                "keep instance_type for one type or instance_types for a priority list"
            )
        if isinstance(listed, list) and listed and isinstance(listed[0], str):
            return {**data, "instance_type": listed[0]}
        if "instance_type" in data:
            return {**data, "instance_types": [data["instance_type"]]}
        return data

    @model_validator(mode="wrap")
    @classmethod
    def _errors_name_the_written_field(cls, data: object, handler: ModelWrapValidatorHandler[GpuGroup]) -> GpuGroup:
        """A group that gives only ``instance_types`` hears of its first entry as ``instance_types.0``.

        That entry is checked as ``instance_type`` (the list's first entry); the error names the field written.
        """
        try:
            return handler(data)
        except ValidationError as err:
            if not (isinstance(data, dict) and "instance_types" in data and "instance_type" not in data):
                raise
            errors = [
                {
                    "type": e["type"],
                    "loc": ("instance_types", 0, *e["loc"][1:]) if e["loc"][:1] == ("instance_type",) else e["loc"],
                    "input": e["input"],
                    **({"ctx": e["ctx"]} if "ctx" in e else {}),
                }
                for e in err.errors()
            ]
            raise ValidationError.from_exception_data(err.title, errors) from None  # type: ignore[arg-type]

    @field_validator("instance_types")
    @classmethod
    def _priority_list(cls, values: list[str]) -> list[str]:
        for value in values[1:]:  # the first entry is checked as instance_type
            cls._known_instance_type(value)
        try:
            if values:
                cls._known_instance_type(values[0])
        except ValueError:
            return values  # reported once, as instance_type (or instance_types.0)
        return check_instance_types(values)

    @field_validator("instance_type")
    @classmethod
    def _known_instance_type(cls, value: str) -> str:
        if not value.startswith("ml."):
            raise ValueError(
                f"'{value}' is not a SageMaker instance type: HyperPod instance types start with 'ml.' "
                f"(for example ml.{value} )".replace(" )", ")")
            )
        valid = gpu_catalog.hyperpod_instance_types()
        if value not in valid:
            close = difflib.get_close_matches(value, sorted(valid), n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise ValueError(f"unknown HyperPod instance type '{value}'{hint}")
        return value

    @field_validator("gpu_arch")
    @classmethod
    def _arch_shape(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"sm\d{2,3}", value):
            raise ValueError(f"'{value}' is not a GPU architecture name like sm86 or sm89")
        return value

    @model_validator(mode="after")
    def _derive_and_check(self) -> GpuGroup:
        gpu = gpu_catalog.gpu_for(self.instance_type)
        if gpu is None or gpu_catalog.instance_spec_for(self.instance_type) is None:
            families = ", ".join(sorted(gpu_catalog.GPU_FAMILIES))
            raise ValueError(
                f"GPU architecture of '{self.instance_type}' is unknown: it is not a GPU instance type in "
                f"settings/gpu_catalog.py (known families: {families}). Add it there (README: Adding a GPU type)."
            )
        if self.gpu_arch is None:
            object.__setattr__(self, "gpu_arch", gpu.arch)
        elif self.gpu_arch != gpu.arch:
            raise ValueError(
                f"gpu_arch '{self.gpu_arch}' contradicts {self.instance_type} ({gpu.name} is {gpu.arch}); "
                "omit gpu_arch to derive it"
            )
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas ({self.max_replicas}) must be >= min_replicas ({self.min_replicas})")
        if self.min_instance_count is not None and self.min_instance_count > self.instance_count:
            raise ValueError(
                f"min_instance_count ({self.min_instance_count}) must be <= instance_count ({self.instance_count})"
            )
        if self.mig_profile is not None:
            self._check_mig(gpu)
        self._check_engine(gpu)
        return self

    def _check_engine(self, gpu: GpuSpec) -> None:
        """The refusals of :attr:`engine` (:class:`settings.engines.EngineProfile`) for this GPU."""
        engine, oldest = self.engine, self.engine.min_compute_capability
        major, minor = (int(part) for part in gpu.compute_capability.split("."))
        if oldest is not None and (major, minor) < oldest:
            others = " or ".join(k for k, p in ENGINE_PROFILES.items() if p.min_compute_capability is None)
            raise ValueError(
                f"serving_engine {engine.kind} needs a GPU of compute capability {'.'.join(map(str, oldest))} or "
                f"newer ({engine.min_compute_capability_reason}), but the {gpu.name} of {self.instance_type} is "
                f"{gpu.compute_capability}; use serving_engine {others} on it"
            )
        if self.mig_profile is not None and not engine.mig:
            raise ValueError(
                f"mig_profile '{self.mig_profile}' with serving_engine {engine.kind}: the {engine.kind} engine is "
                f"not sized to a slice's memory ({engine.title} allocates as it goes, its batch memory is unmeasured "
                "on MIG); serve MIG slices with serving_engine tensorrt_llm (its engine is built for the slice), or "
                f"remove mig_profile to serve whole GPUs with {engine.kind}"
            )

    def _check_mig(self, gpu: GpuSpec) -> None:
        if not gpu.mig_profiles:
            raise ValueError(
                f"mig_profile '{self.mig_profile}': the {gpu.name} of {self.instance_type} has no MIG "
                "(Multi-Instance GPU) support; remove mig_profile (MIG needs an A100, H100 or H200 GPU)"
            )
        if gpu.mig_profile(self.mig_profile or "") is None:
            accepted = ", ".join(profile.name for profile in gpu.mig_profiles)
            raise ValueError(
                f"mig_profile '{self.mig_profile}' is not a MIG profile of the {gpu.name} ({self.instance_type}); "
                f"accepted: {accepted} (NVIDIA MIG user guide)"
            )
        for instance_type in self.instance_types:
            if instance_type not in gpu_catalog.MIG_INSTANCE_TYPES:
                raise ValueError(
                    f"mig_profile '{self.mig_profile}': HyperPod partitions GPUs with MIG only on "
                    f"{', '.join(gpu_catalog.MIG_INSTANCE_TYPES)}, not {instance_type}; "
                    "list only those or remove mig_profile"
                )
        if self.engine_builder == "codebuild_fleet":
            raise ValueError(
                f"mig_profile '{self.mig_profile}' needs engine_builder: hyperpod_job (the engine is built on a "
                "slice of this group's nodes; CodeBuild fleets have whole GPUs)"
            )

    @property
    def gpu(self) -> GpuSpec:
        """The group's GPU model (catalog entry)."""
        spec = gpu_catalog.gpu_for(self.instance_type)
        assert spec is not None  # guaranteed by validation
        return spec

    @property
    def flexible(self) -> bool:
        """True when the group lists more than one type (a HyperPod flexible instance group)."""
        return len(self.instance_types) > 1

    @property
    def instance(self) -> InstanceSpec:
        """vCPU/memory/GPU count of the group's smallest listed type: pods are sized to fit any node of the group."""
        spec = gpu_catalog.instance_spec_for(smallest(self.instance_types))
        assert spec is not None  # guaranteed by validation
        return spec

    @property
    def arch(self) -> str:
        """GPU architecture, e.g. ``sm86`` (never ``None`` after validation)."""
        assert self.gpu_arch is not None
        return self.gpu_arch

    @property
    def mig(self) -> MigProfile | None:
        """The group's MIG profile (catalog entry), or ``None`` for whole GPUs."""
        return self.gpu.mig_profile(self.mig_profile) if self.mig_profile else None

    @property
    def slices_per_gpu(self) -> int:
        """Pods one GPU holds: the profile's instances per GPU (``all-<profile>`` layout), 1 without MIG."""
        return self.mig.max_per_gpu if self.mig else 1

    @property
    def pods_per_node(self) -> int:
        """Serving pods one node of the group holds: GPUs × slices per GPU (one pod per GPU or slice)."""
        return self.instance.gpus * self.slices_per_gpu

    @property
    def gpu_resource(self) -> str:
        """Extended resource one pod requests: ``nvidia.com/gpu``, or ``nvidia.com/mig-<profile>`` on MIG."""
        return self.mig.resource_name if self.mig else "nvidia.com/gpu"

    @property
    def engine_target(self) -> str:
        """What the group's engine is built for (:func:`settings.storage.engine_target`), e.g. ``sm90-1g.10gb``.

        Names its S3 prefix ``models/<model>/<engine_target>/``, its build and its volume. A ``torch``
        group has no engine (:attr:`builds_engine`): it mounts ``models/<model>/hf/``.
        """
        return storage.engine_target(self.arch, self.mig_profile)

    @property
    def model_volume_key(self) -> str:
        """What the group's pods mount: its :attr:`engine_target`, or ``hf`` (the checkpoint) for ``torch``."""
        return self.engine_target if self.builds_engine else storage.HF_CHECKPOINT_DIR

    @property
    def builds_engine(self) -> bool:
        """True unless the group serves the Hugging Face checkpoint (``serving_engine: torch``).

        A ``ctranslate2`` group counts: it serves a conversion only until its TensorRT-LLM engine is built.
        """
        return self.engine.builds_engine

    @property
    def engine(self) -> EngineProfile:
        """The :class:`~settings.engines.EngineProfile` of :attr:`serving_engine`."""
        return ENGINE_PROFILES[self.serving_engine]

    @property
    def baseline_replicas(self) -> int:
        """Pods the group runs without KEDA: ``max(min_replicas, 1)``.

        Also what it holds while the scaling query fails and gets back after an engine build.
        """
        return max(self.min_replicas, 1)

    @property
    def effective_capacity(self) -> int:
        """Concurrent requests one pod of this group is sized for: ``capacity``, else the GPU's default.

        On MIG the default is scaled to the slice's share of the GPU's compute (``default × g / 7``, at
        least 1), so the capacity-weighted utilization means the same on a slice as on a whole GPU.
        """
        if self.capacity is not None:
            return self.capacity
        if self.mig is None:
            return self.gpu.default_capacity
        return max(1, self.gpu.default_capacity * self.mig.compute_slices // gpu_catalog.MIG_COMPUTE_SLICES)


class NetworkSettings(_Strict):
    """VPC layout: one public /24 and one private /19 per AZ (``settings.network_plan``)."""

    max_azs: int = Field(2, ge=2, le=6, description="HyperPod and the AMP scraper need >= 2 AZs.")
    nat_gateways: int = Field(1, ge=1, le=6)
    vpc_cidr: str = Field("10.42.0.0/16", description="IPv4 network, /16 to /28, big enough for the subnets.")

    @field_validator("vpc_cidr")
    @classmethod
    def _subnets_fit(cls, value: str, info: ValidationInfo) -> str:
        # max_azs is declared first so that it is validated (and in info.data) by now
        network_plan.check_vpc_cidr(value, info.data.get("max_azs", 2))
        return value

    @model_validator(mode="after")
    def _nat_per_az(self) -> NetworkSettings:
        network_plan.check_nat_gateways(self.nat_gateways, self.max_azs)
        return self


class HyperPodChartSettings(_Strict):
    """Where the HyperPod dependency Helm chart is installed from (README, "HyperPod dependency chart").

    AWS publishes the chart only in git (``aws/sagemaker-hyperpod-cli``, ``helm_chart/HyperPodHelmChart``),
    not in a Helm repository. ``scripts/publish_hyperpod_chart.sh`` packages the pinned ``git_ref`` as
    ``version`` and pushes it to an OCI registry; the cluster stack installs it from there with the
    CDK kubectl provider before the HyperPod cluster is created.
    """

    git_ref: str = Field(
        "067d658b2d5c3d347afbadd75e1425214e965dcb",
        pattern=r"^[0-9a-f]{40}$",
        description="Commit of aws/sagemaker-hyperpod-cli the chart is packaged from (pinned).",
    )
    version: str = Field(
        "0.1.0-067d658",
        pattern=r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$",
        description="Chart version (OCI tag) the publish script packages and the stack installs.",
    )
    oci_repository: str | None = Field(
        None,
        pattern=r"^oci://[^\s]+$",
        description="oci://registry/path/hyperpod-helm-chart (full chart reference); default: the storage stack's ECR repository.",
    )


class ClusterSettings(_Strict):
    """EKS control plane and the small CPU node group for system pods."""

    kubernetes_version: str = Field("1.33", description="Within HyperPod's supported range.")
    system_node_instance_type: str = Field("m6i.large", description="EC2 type of the system node group.")
    system_node_count: int = Field(2, ge=1, le=10)
    endpoint_access: Literal["private", "public_and_private"] = "public_and_private"
    public_access_cidrs: list[str] = Field(
        ["0.0.0.0/0"],
        min_length=1,
        description="Who may reach the public Kubernetes API endpoint (public_and_private only); "
        "narrow it to the CIDRs of your workstations/VPN.",
    )
    node_autoscaling: bool = Field(
        False, description="HyperPod-managed Karpenter (AutoScaling + ClusterRole, NodeClass/NodePool)."
    )
    hyperpod_chart: HyperPodChartSettings = HyperPodChartSettings()

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, values: list[str]) -> list[str]:
        values = _check_ipv4_cidrs(values)
        if non_public := cidrs.non_public_entries(values):
            raise ValueError(
                f"{', '.join(non_public)}: the public API endpoint sees clients' public addresses (from inside the "
                "VPC kubectl uses the private endpoint), so such an entry admits nobody; list public CIDRs "
                "(curl -s https://checkip.amazonaws.com)"
            )
        return values

    @field_validator("system_node_instance_type")
    @classmethod
    def _known_system_node_type(cls, value: str) -> str:
        return system_nodes.check_system_node_type(value)

    @field_validator("kubernetes_version")
    @classmethod
    def _supported_version(cls, value: str) -> str:
        if value not in HYPERPOD_KUBERNETES_VERSIONS:
            raise ValueError(
                f"Kubernetes {value} is outside HyperPod's supported range "
                f"{HYPERPOD_KUBERNETES_VERSIONS[0]}–{HYPERPOD_KUBERNETES_VERSIONS[-1]}"
            )
        return value


class ServingSettings(_Strict):
    """The serving pods: image, ports, request limits."""

    namespace: str = Field("whisper", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    image_tag: str = Field("0.1.0", description="ECR tag of the serving image (tags are immutable).")
    gateway_port: int = Field(8080, ge=1, le=65535, description="Traffic port (the load balancer's target).")
    gateway_metrics_port: int = Field(
        8081, ge=1, le=65535, description="Gateway /metrics, off the traffic port (an NLB cannot filter paths)."
    )
    triton_http_port: int = Field(8000, ge=1, le=65535)
    triton_grpc_port: int = Field(8001, ge=1, le=65535)
    triton_metrics_port: int = Field(8002, ge=1, le=65535)
    max_body_mb: int = Field(100, ge=1)
    max_audio_seconds: int = Field(7200, ge=1)
    request_timeout_seconds: int = Field(300, ge=1, description="Longest request the gateway allows.")
    queue_timeout_seconds: int = Field(
        30, ge=1, description="Longest wait of an admitted request for a free slot before 503."
    )
    realtime_max_sessions: int = Field(
        64,
        ge=0,
        le=1024,
        description="Open live transcription sessions (/v1/realtime) one pod holds: the gateway's limit and the "
        "session capacity KEDA scales on (open ÷ this, beside in-flight ÷ capacity); 0 = no live sessions.",
    )
    target: Literal["deployments", "inference_operator"] = Field(
        "deployments",
        description="deployments: this project's Deployments, Service/Ingress and KEDA objects (API-key auth). "
        "inference_operator: HyperPod inference operator InferenceEndpointConfigs, one SageMaker endpoint per "
        "resource shape (IAM auth; docs/serving-targets.md).",
    )

    @field_validator("namespace")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        return namespaces.check_serving_namespace(value)

    @model_validator(mode="after")
    def _distinct_ports(self) -> ServingSettings:
        ports = {
            "gateway_port": self.gateway_port,
            "gateway_metrics_port": self.gateway_metrics_port,
            "triton_http_port": self.triton_http_port,
            "triton_grpc_port": self.triton_grpc_port,
            "triton_metrics_port": self.triton_metrics_port,
        }
        seen: dict[int, str] = {}
        for name, port in ports.items():
            if port in seen:
                raise ValueError(f"{name} ({port}) is the same port as {seen[port]}; every port must differ")
            seen[port] = name
        return self


OPEN_CIDR = "0.0.0.0/0"


def _check_ipv4_cidrs(values: list[str]) -> list[str]:
    return cidrs.normalise_cidrs(values)  # bare address → /32; IPv6, host bits refused (settings.cidrs)


class EndpointSettings(_Strict):
    """The one load-balanced endpoint in front of every GPU group, and who may use it.

    Secure by default: ``internal`` scheme, API-key authentication on, source ranges = the VPC.
    ``internet-facing`` is refused unless it has a certificate (TLS only, no plaintext listener),
    authentication on, and either narrow ``allowed_cidrs`` or ``acknowledge_open_to_internet``
    (:meth:`DeploymentConfig._endpoint_exposure`).
    """

    kind: Literal["nlb", "alb"] = Field(
        "nlb", description="alb routes with least_outstanding_requests so a slower GPU type gets fewer requests."
    )
    scheme: Literal["internal", "internet-facing"] = "internal"
    idle_timeout_seconds: int = Field(350, ge=60, le=4000)
    certificate_arn: str | None = Field(
        None,
        pattern=r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate/[0-9a-f-]+$",
        description="ACM certificate: the load balancer listens with TLS on 443 (NLB TLS / ALB HTTPS) and "
        "has no plaintext listener. Required for internet-facing.",
    )
    domain_name: str | None = Field(
        None,
        pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$",
        max_length=253,
        description="DNS name the certificate covers (lowercase, not a wildcard). With certificate_arn and "
        "serving.target inference_operator: the operator's customCertificateConfig.",
    )

    allowed_cidrs: list[str] | None = Field(
        None,
        min_length=1,
        description="IPv4 CIDRs allowed to reach the load balancer (its source ranges); default: the VPC CIDR. "
        "Required for internet-facing.",
    )
    acknowledge_open_to_internet: bool = Field(
        False,
        description="Set true to allow 0.0.0.0/0 in allowed_cidrs of an internet-facing endpoint "
        "(anyone on the internet can reach it; API keys and TLS still apply).",
    )
    auth: Literal["api_key", "none"] = Field(
        "api_key",
        description="api_key: the gateway requires a key from the stack's Secrets Manager secret "
        "(docs/deploy.md, Security). none: no authentication (internal endpoints only).",
    )

    @field_validator("allowed_cidrs")
    @classmethod
    def _cidrs(cls, values: list[str] | None) -> list[str] | None:
        return None if values is None else _check_ipv4_cidrs(values)

    @property
    def tls(self) -> bool:
        """True when the load balancer terminates TLS (a certificate is configured)."""
        return self.certificate_arn is not None

    @model_validator(mode="after")
    def _domain_needs_certificate(self) -> EndpointSettings:
        if self.domain_name is not None and self.certificate_arn is None:
            raise ValueError("domain_name needs certificate_arn (the ACM certificate that covers it)")
        return self


class AutoscalingSettings(_Strict):
    """Pod autoscaling (KEDA on Amazon Managed Prometheus)."""

    target_utilization: float = Field(0.7, gt=0, le=1, description="In-flight ÷ capacity per pod.")
    scale_down_stabilization_seconds: int = Field(300, ge=0)
    polling_interval_seconds: int = Field(30, ge=5)


class ObservabilitySettings(_Strict):
    """AMP workspace + managed scraper, rules, Grafana workspace and dashboard."""

    enabled: bool = True
    scrape_interval_seconds: int = Field(30, ge=30, description="AMP managed scrapers need >= 30 s.")
    grafana: bool = True


class PipelineSettings(_Strict):
    """CodePipeline delivery. Without ``connection_arn`` the app synthesizes no pipeline."""

    connection_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:(codestar-connections|codeconnections):")
    repository: str | None = Field(None, pattern=r"^[\w.-]+/[\w.-]+$", description="owner/name")
    branch: str = "main"
    manual_approval: bool = True

    @model_validator(mode="after")
    def _source_complete(self) -> PipelineSettings:
        if (self.connection_arn is None) != (self.repository is None):
            raise ValueError("set both connection_arn and repository, or neither (no pipeline)")
        return self

    @property
    def enabled(self) -> bool:
        """True when a source repository is configured."""
        return self.connection_arn is not None


class DeploymentConfig(_Strict):
    """The whole deployment: one YAML file, validated once, passed to every stack and chart."""

    project_name: str = Field("whisper-hyperpod", pattern=r"^[a-z][a-z0-9-]{1,30}[a-z0-9]$")
    region: str = Field(description="AWS region, e.g. us-east-1; checked against botocore's partition data.")
    account: str | None = Field(None, pattern=r"^\d{12}$")
    model: ModelSettings = ModelSettings()
    gpu_groups: list[GpuGroup] = Field(min_length=1)
    network: NetworkSettings = NetworkSettings()
    cluster: ClusterSettings = ClusterSettings()
    serving: ServingSettings = ServingSettings()
    endpoint: EndpointSettings = EndpointSettings()
    autoscaling: AutoscalingSettings = AutoscalingSettings()
    observability: ObservabilitySettings = ObservabilitySettings()
    pipeline: PipelineSettings = PipelineSettings()
    pricing: PricingSettings = PricingSettings()
    bulk: BulkSettings = BulkSettings()
    capacity: CapacitySettings = CapacitySettings()

    @model_validator(mode="after")
    def _bulk_groups_exist(self) -> DeploymentConfig:
        check_groups(self.bulk, self.gpu_groups, self.cluster.node_autoscaling, self.serving.target)
        return self

    @model_validator(mode="after")
    def _capacity_fits_the_cluster(self) -> DeploymentConfig:
        """Regional offerings of listed types, cluster limits, Spot and priority rules (``settings.capacity``)."""
        problems = config_problems(
            region=self.region,
            groups=[(g.name, g.instance_types, g.min_instance_count) for g in self.gpu_groups],
            capacity=self.capacity,
            bulk_groups=[g.name for g in worker_groups(self.bulk, self.gpu_groups)] if self.bulk.enabled else None,
            node_autoscaling=self.cluster.node_autoscaling,
            bulk_drain_seconds=self.bulk.drain_seconds,
        )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @field_validator("region")
    @classmethod
    def _known_region(cls, value: str) -> str:
        return regions.check_region(value)

    @model_validator(mode="after")
    def _services_in_region(self) -> DeploymentConfig:
        """HyperPod needs SageMaker and EKS in the region; observability needs AMP (and Grafana)."""
        missing = regions.missing_services(self.region, regions.SERVICES_NEEDED)
        if missing:
            raise ValueError(
                f"region: {self.region} has no endpoint for {' or '.join(missing)} "
                "(botocore endpoint data); choose a region that has them, e.g. us-east-1"
            )
        if self.observability.enabled and regions.missing_services(self.region, regions.OBSERVABILITY_SERVICES):
            raise ValueError(
                f"observability.enabled: Amazon Managed Service for Prometheus is not available in {self.region} "
                "(botocore endpoint data); set observability.enabled: false or choose another region"
            )
        if (
            self.observability.enabled
            and self.observability.grafana
            and regions.missing_services(self.region, regions.GRAFANA_SERVICES)
        ):
            raise ValueError(
                f"observability.grafana: Amazon Managed Grafana is not available in {self.region} "
                "(botocore endpoint data); set observability.grafana: false (Prometheus rules and metrics stay) "
                "or choose another region"
            )
        return self

    @model_validator(mode="after")
    def _certificate_in_region(self) -> DeploymentConfig:
        """An ACM certificate serves only load balancers of its own region (and account).

        ACM user guide, "Supported Regions": "To use a certificate with Elastic Load Balancing ...
        you must request or import the certificate in the same Region" as the load balancer.
        """
        arn = self.endpoint.certificate_arn
        if arn is None:
            return self
        _, _, _, cert_region, cert_account, _ = arn.split(":", 5)
        if cert_region != self.region:
            raise ValueError(
                f"endpoint.certificate_arn: the certificate is in {cert_region} but the load balancer will be in "
                f"region {self.region}; ACM certificates serve load balancers of their own region only: request "
                f"or import the certificate in {self.region} (aws acm request-certificate --region {self.region})"
            )
        if self.account is not None and cert_account != self.account:
            raise ValueError(
                f"endpoint.certificate_arn: the certificate belongs to account {cert_account} but account is "
                f"{self.account}; use a certificate of account {self.account}"
            )
        return self

    @field_validator("gpu_groups")
    @classmethod
    def _unique_names(cls, groups: list[GpuGroup]) -> list[GpuGroup]:
        seen: set[str] = set()
        for group in groups:
            if group.name in seen:
                raise ValueError(f"duplicate GPU group name '{group.name}'; names must be unique")
            seen.add(group.name)
        return groups

    @model_validator(mode="after")
    def _operator_target_serves_engines(self) -> DeploymentConfig:
        """The inference operator target serves TensorRT-LLM engines only.

        Its pods select an engine per GPU (one config for several GPU types); the CTranslate2 fallback
        and the torch engine are set per group, so they stay on the deployments target.
        """
        if self.serving.target != "inference_operator":
            return self
        for index, group in enumerate(self.gpu_groups):
            if not group.engine.operator_target:
                raise ValueError(
                    f"gpu_groups.{index}.serving_engine: {group.serving_engine} is served by serving.target "
                    "deployments only; build the group's TensorRT-LLM engine or use the deployments target"
                )
        return self

    @model_validator(mode="after")
    def _greedy_engines_have_beam_width_1(self) -> DeploymentConfig:
        """An engine without beam search (torch) decodes greedily; a fleet beam width would not hold on it."""
        if self.model.beam_width == 1:
            return self
        for index, group in enumerate(self.gpu_groups):
            if not group.engine.beam_search:
                raise ValueError(
                    f"gpu_groups.{index}.serving_engine: {group.serving_engine} decodes greedily but model.beam_width "
                    f"is {self.model.beam_width}; set model.beam_width: 1, or serve group '{group.name}' with "
                    "tensorrt_llm (beam search)"
                )
        return self

    @model_validator(mode="after")
    def _replicas_fit_the_fleet(self) -> DeploymentConfig:
        """Without node autoscaling, every pod (one GPU or MIG slice each) needs one of its group's instances."""
        if self.cluster.node_autoscaling:
            return self
        for index, group in enumerate(self.gpu_groups):
            gpus = group.instance_count * group.instance.gpus
            if group.mig is not None:
                slices = gpus * group.slices_per_gpu
                unit = f"{group.mig.name} MIG slices"
                have = f"{gpus} GPU(s) × {group.slices_per_gpu} slices = {slices} slices"
            else:
                slices, unit, have = gpus, "GPUs", f"{gpus} GPU(s)"
            if group.max_replicas > slices:
                raise ValueError(
                    f"gpu_groups.{index}.max_replicas: {group.max_replicas} pods need {group.max_replicas} {unit} "
                    f"but group '{group.name}' has {group.instance_count} × {group.instance_type} = {have}; "
                    "raise instance_count, lower max_replicas, or set cluster.node_autoscaling: true"
                )
        return self

    @model_validator(mode="after")
    def _endpoint_exposure(self) -> DeploymentConfig:
        """Refuse an internet-facing endpoint that is not secured.

        Without TLS, without authentication, without source ranges, or open to 0.0.0.0/0 without
        ``endpoint.acknowledge_open_to_internet``; one message names every violated field.
        """
        endpoint = self.endpoint
        if endpoint.scheme != "internet-facing":
            return self
        problems = []
        if endpoint.certificate_arn is None:
            problems.append(
                "endpoint.certificate_arn: required for scheme internet-facing (an ACM certificate ARN; "
                "the API would otherwise be plaintext HTTP on the internet)"
            )
        if endpoint.auth != "api_key":
            problems.append(
                f"endpoint.auth: '{endpoint.auth}' leaves an internet-facing endpoint unauthenticated; use api_key"
            )
        if endpoint.allowed_cidrs is None:
            problems.append(
                "endpoint.allowed_cidrs: required for scheme internet-facing (the client CIDRs that may connect)"
            )
        elif OPEN_CIDR in endpoint.allowed_cidrs and not endpoint.acknowledge_open_to_internet:
            problems.append(
                f"endpoint.allowed_cidrs: {OPEN_CIDR} opens the endpoint to the whole internet; narrow it, or "
                "set endpoint.acknowledge_open_to_internet: true"
            )
        elif non_public := cidrs.non_public_entries(endpoint.allowed_cidrs):
            problems.append(
                f"endpoint.allowed_cidrs: {', '.join(non_public)} never reach an internet-facing load balancer "
                "(it sees clients' public addresses); list the clients' public CIDRs, or use scheme internal"
            )
        if problems:
            raise ValueError("endpoint: scheme internet-facing refused, " + "; ".join(problems))
        return self

    @property
    def endpoint_source_cidrs(self) -> list[str]:
        """CIDRs the load balancer accepts: ``endpoint.allowed_cidrs``, else the VPC CIDR."""
        return self.endpoint.allowed_cidrs or [self.network.vpc_cidr]

    @property
    def gpu_archs(self) -> list[str]:
        """Distinct GPU architectures of the fleet, in config order (one engine build each)."""
        return list(dict.fromkeys(group.arch for group in self.gpu_groups))

    def groups_for_arch(self, arch: str) -> list[GpuGroup]:
        """GPU groups whose architecture is ``arch``."""
        return [group for group in self.gpu_groups if group.arch == arch]

    @property
    def engine_targets(self) -> list[str]:
        """Distinct engine targets (``GpuGroup.engine_target``) of the groups that build an engine, in config order.

        E.g. ``["sm86", "sm90-1g.10gb"]``: one S3 prefix, model volume and engine build each. ``torch``
        groups are left out (:attr:`GpuGroup.builds_engine`): an architecture served only by them gets
        no engine build.
        """
        return list(dict.fromkeys(group.engine_target for group in self.gpu_groups if group.builds_engine))

    def groups_for_target(self, target: str) -> list[GpuGroup]:
        """GPU groups that build an engine for ``target`` (``torch`` groups build none)."""
        return [group for group in self.gpu_groups if group.builds_engine and group.engine_target == target]

    @property
    def serves_hf_checkpoint(self) -> bool:
        """True when a group serves the Hugging Face checkpoint (``serving_engine: torch``)."""
        return any(group.engine.layout == "checkpoint" for group in self.gpu_groups)
