"""What each Whisper engine kind needs from the rest of the project: one :class:`EngineProfile` per kind.

The charts, the preflight, the storage layout, the throughput table, the deploy plans and the
synthesis refusals look an engine up in :data:`ENGINE_PROFILES` instead of comparing engine names;
the engine factory imports :attr:`EngineProfile.runtime`. It imports only the dependency-free
:data:`~whisper_build.contracts.engines.EngineKind` and storage names, so ``settings`` and everything
above it can read it. Adding a kind: docs/engines.md "Adding an engine".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from settings.storage import CTRANSLATE2_DIR
from whisper_build.contracts.engines import EngineKind

__all__ = ["ENGINE_PROFILES", "EngineKind", "EngineProfile", "ModelLayout", "profile"]

ModelLayout = Literal["engine_versions", "conversion", "checkpoint"]
"""Where a pod finds the model in the bucket (settings/storage.py):

* ``engine_versions``: ``models/<model>/<target>/current.json`` names a version folder with a
  manifest and a Triton model repository (built per engine target);
* ``conversion``: a converted model in :attr:`EngineProfile.folder` under the target's prefix;
* ``checkpoint``: the Hugging Face checkpoint under ``models/<model>/hf/``, one for every GPU type.
"""


@dataclass(frozen=True)
class EngineProfile:
    """One engine kind, as the layers outside the engine see it.

    Attributes:
        kind: the :data:`EngineKind` value.
        title: the runtime's name in messages (``TensorRT-LLM``).
        runtime: ``module:Class`` of the :class:`~whisper_build.serving.engines.base.WhisperEngine`
            implementation, imported only when the engine loads.
        layout: where the pods find the model (:data:`ModelLayout`).
        folder: for ``conversion``, the folder under the target's prefix; else ``""``.
        beam_search: decodes with ``beam_size`` > 1; without it the fleet's ``model.beam_width`` must be 1.
        operator_target: served by ``serving.target: inference_operator`` (one config, engines per GPU).
        mig: may serve MIG slices.
        min_compute_capability: oldest GPU (``(major, minor)``) it runs on; ``None``: any catalog GPU.
        min_compute_capability_reason: why, in the synthesis refusal's words.
        chart_engine_params: the chart sets the engine's ``WHISPER_TRITON_ENGINE__*`` (model path,
            CUDA device, compute type); ``False``: the published model repository carries them.
        compute_type: the compute type the chart sets; ``None``: the config's ``model.dtype``.
        chart_sizes_batches: the chart passes ``model.max_output_len`` / ``max_batch_size`` and the
            CUDA-graph switch (no build fixed them).
        throughput_proxy: the kind whose measured figures stand in for this one's (a lower bound), or
            ``None`` when it has figures of its own.
        bundled_default: an empty ``model_path`` serves the bundled tiny.en (local development only).
        inflight_scheduler: the engine has an in-flight scheduler (``scheduler: inflight`` in the
            model's batching config; docs/engines.md "The model's scheduler").
        word_timings: the engine gives word timings (``timestamp_granularities[]=word``); speakers
            are then assigned word by word, else segment by segment (docs/engines.md "Word timings").
    """

    kind: EngineKind
    title: str
    runtime: str
    layout: ModelLayout
    folder: str = ""
    beam_search: bool = True
    operator_target: bool = False
    mig: bool = True
    min_compute_capability: tuple[int, int] | None = None
    min_compute_capability_reason: str = ""
    chart_engine_params: bool = True
    compute_type: str | None = None
    chart_sizes_batches: bool = False
    throughput_proxy: EngineKind | None = None
    bundled_default: bool = False
    inflight_scheduler: bool = False
    word_timings: bool = True

    @property
    def builds_engine(self) -> bool:
        """True when the model lives under each engine target's prefix (``models/<model>/<target>/``).

        A ``conversion`` counts: it serves only until the target's TensorRT-LLM engine is built.
        """
        return self.layout != "checkpoint"

    @property
    def module(self) -> str:
        """The module part of :attr:`runtime`."""
        return self.runtime.partition(":")[0]

    @property
    def class_name(self) -> str:
        """The class part of :attr:`runtime`."""
        return self.runtime.partition(":")[2]


_ENGINES = "whisper_build.serving.engines"
TORCH_MIN_COMPUTE_CAPABILITY = (8, 0)
"""Oldest GPU the ``torch`` engine is offered on: Ampere (sm80). Its attention is PyTorch SDPA in
fp16/bf16, whose FlashAttention kernels need sm80 or newer, and bfloat16 needs sm80 (PyTorch docs,
``torch.nn.functional.scaled_dot_product_attention``; NVIDIA Ampere architecture whitepaper). Every
GPU in ``settings/gpu_catalog.py`` today is sm80 or newer; the check guards the ones added later."""

ENGINE_PROFILES: dict[EngineKind, EngineProfile] = {
    "tensorrt_llm": EngineProfile(
        kind="tensorrt_llm",
        title="TensorRT-LLM",
        runtime=f"{_ENGINES}.tensorrt_llm_engine:TensorRTLLMEngine",
        layout="engine_versions",
        operator_target=True,
        chart_engine_params=False,
        throughput_proxy="torch",
        word_timings=False,
    ),
    "ctranslate2": EngineProfile(
        kind="ctranslate2",
        title="CTranslate2",
        runtime=f"{_ENGINES}.ctranslate2_engine:CTranslate2Engine",
        layout="conversion",
        folder=CTRANSLATE2_DIR,
        compute_type="float16",  # the `--quantization float16` conversion the preflight prescribes
        bundled_default=True,
    ),
    "torch": EngineProfile(
        kind="torch",
        title="PyTorch",
        runtime=f"{_ENGINES}.torch_engine:TorchEngine",
        layout="checkpoint",
        beam_search=False,
        mig=False,
        min_compute_capability=TORCH_MIN_COMPUTE_CAPABILITY,
        min_compute_capability_reason="fp16/bf16 SDPA attention",
        chart_sizes_batches=True,
        inflight_scheduler=True,
    ),
}
"""Every engine kind, in :data:`EngineKind` order (the first is the default ``serving_engine``)."""

assert tuple(ENGINE_PROFILES) == get_args(EngineKind), "one profile per EngineKind, in order"


def profile(kind: str) -> EngineProfile:
    """The profile of ``kind``.

    Raises:
        ValueError: ``kind`` is not an :data:`EngineKind` (the message lists them).
    """
    for each in ENGINE_PROFILES.values():
        if each.kind == kind:
            return each
    raise ValueError(f"engine must be one of {', '.join(ENGINE_PROFILES)}, got '{kind}'")
