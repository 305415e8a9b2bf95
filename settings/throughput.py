"""Throughput per GPU type, engine, model and batch: windows per second and RTF, each figure sourced.

One table for every consumer that needs to know how fast a pod transcribes: the gateway's up-front
``audio_too_long`` refusal (:func:`conservative_rtf`), the bulk workers' KEDA ``queueLength`` and
the cost sizing. Every :class:`ThroughputFigure` is :class:`Measured` (a run of docs/benchmarks.md:
machine, UTC time, section) or :class:`Estimated` (derived, with its basis in words). Entry points:
:func:`figures_for`, :func:`conservative_rtf`, :func:`slice_figures`; how estimates scale and the
units: the docstring of :class:`ThroughputFigure`. Docs: docs/benchmarks.md, "The throughput table".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from settings import gpu_catalog
from settings.engines import ENGINE_PROFILES, EngineKind, profile

__all__ = [
    "CPU_DEVICE",
    "DECODER_SHAPES",
    "GPU_PEAKS",
    "Estimated",
    "Measured",
    "ThroughputFigure",
    "UnknownThroughput",
    "conservative_rtf",
    "device_for_instance_type",
    "figures_for",
    "mig_share",
    "slice_figures",
    "throughput_at",
]

CPU_DEVICE = "cpu-2core"
"""The CPU development machine: AMD EPYC, 2 usable cores, 23.5 GiB (docs/benchmarks.md "Reference run")."""

Engine = EngineKind
Path = Literal["gateway", "triton", "engine"]
"""What the figure timed: the whole served path, Triton called directly, or the engine in-process."""


@dataclass(frozen=True)
class Measured:
    """A figure from a recorded run: ``where`` (machine), ``when`` (UTC), ``run`` (docs section, artefact)."""

    where: str
    when: str
    run: str


@dataclass(frozen=True)
class Estimated:
    """A figure derived from a measured one; ``basis`` says how."""

    basis: str


@dataclass(frozen=True)
class ThroughputFigure:
    """One row of the table.

    Attributes:
        device: ``GpuSpec.name`` (``NVIDIA H200``) or :data:`CPU_DEVICE`.
        engine: serving engine.
        model: Whisper checkpoint name (``settings.schema.WHISPER_MODELS``).
        batch: mean windows per engine call in the run (under the in-flight scheduler: its mean active rows).
        windows_per_second: windows finished per second.
        window_audio_seconds: mean audio per window in the run (30 for long recordings; 30 for the
            fixed-100-token random-weight runs, whose decode load is a dense 30 s window's).
        path: what was timed (:data:`Path`).
        source: :class:`Measured` or :class:`Estimated`.

    Measured here: the 2-core CPU development machine (``ctranslate2``, tiny.en) and one NVIDIA H200
    (``torch`` served through gateway + Triton, tiny.en and large-v3-turbo shapes; ``ctranslate2``
    engine-only). Every other GPU is an estimate: the H200 figure scaled by the smaller of the two
    ratios memory bandwidth ÷ H200's and dense FP16 tensor throughput ÷ H200's (NVIDIA's datasheets,
    :data:`GPU_PEAKS`) — decoding at small batches is bandwidth- and launch-bound, the encoder at large
    batches compute-bound, so the smaller ratio is the conservative one. ``tensorrt_llm`` has no
    measurement: it takes the ``torch`` figures, a lower bound (docs/benchmarks.md expects it faster).
    Models without a measurement take large-v3-turbo's figures scaled by decoder cost (decoder layers
    × d_model², :data:`DECODER_SHAPES`), never faster than large-v3-turbo.

    Units: ``windows_per_second`` is 30-s-or-shorter Whisper windows finished per second by one pod (one
    GPU or MIG-less GPU share; the CPU row: the whole 2-core machine); ``window_audio_seconds`` the mean
    audio per window in that run; RTF = compute seconds per audio second = 1 ÷ (windows/s × audio s per
    window); RTFx = 1 ÷ RTF. A figure at ``batch`` b is the mean batch Triton (or the engine) ran, or
    the in-flight scheduler's mean active rows.
    """

    device: str
    engine: Engine
    model: str
    batch: float
    windows_per_second: float
    window_audio_seconds: float
    path: Path
    source: Measured | Estimated

    @property
    def rtf(self) -> float:
        """Compute seconds per audio second (real-time factor)."""
        return 1.0 / (self.windows_per_second * self.window_audio_seconds)

    @property
    def rtfx(self) -> float:
        """Audio seconds per compute second (inverse RTF)."""
        return self.windows_per_second * self.window_audio_seconds

    @property
    def measured(self) -> bool:
        """True for a :class:`Measured` figure."""
        return isinstance(self.source, Measured)


class UnknownThroughput(LookupError):
    """No figure (measured or estimated) for a device, engine and model; the message lists what exists."""


_CPU_QUIET = Measured(
    CPU_DEVICE,
    "2026-11-30 10:56 UTC",
    'docs/benchmarks.md "Reference run", previous run (quiet machine), Triton-direct',
)
_CPU_BUSY = Measured(
    CPU_DEVICE,
    "2026-11-30 23:57 UTC",
    'docs/benchmarks.md "Reference run", current run (load average 3.4-4.1), 10-minute recording batched, 21 windows',
)
_H200_SERVED = Measured(
    "NVIDIA H200",
    "2026-12-01 02:40 UTC",
    'docs/benchmarks.md "GPU, served path", gateway target (4 workers), docs/benchmarks/gpu_served_h200.json',
)
_H200_FRONT = Measured(
    "NVIDIA H200",
    "2026-12-02 11:08 UTC",
    'docs/benchmarks.md "GPU, served path", decoupled front with the in-flight scheduler, gateway target '
    "(4 workers), closed-loop concurrency 64 record, docs/benchmarks/gpu_served_front_h200.json",
)
_H200_ENGINE = Measured(
    "NVIDIA H200",
    "2026-12-01",
    'docs/benchmarks.md "Whisper large-v3-turbo shapes, random weights", ctranslate2 4.8.5 float16, '
    "docs/benchmarks/gpu_ct2_random_h200.json",
)
_UTTERANCE_S = 9.1
"""Mean audio per window of the CPU sweep (8.5 audio s/s ÷ 0.93 requests/s, one window each)."""
_H200_UTTERANCE_S = 9.3
"""Mean length of the 8 espeak-ng files (8.3-10.3 s) of the H200 tiny.en served runs."""

_MEASURED: tuple[ThroughputFigure, ...] = (
    # CPU, ctranslate2 tiny.en (compute_type default), Triton called directly
    ThroughputFigure(CPU_DEVICE, "ctranslate2", "tiny.en", 1.0, 0.93, _UTTERANCE_S, "triton", _CPU_QUIET),
    ThroughputFigure(CPU_DEVICE, "ctranslate2", "tiny.en", 2.0, 1.24, _UTTERANCE_S, "triton", _CPU_QUIET),
    ThroughputFigure(CPU_DEVICE, "ctranslate2", "tiny.en", 4.0, 1.29, _UTTERANCE_S, "triton", _CPU_QUIET),
    ThroughputFigure(CPU_DEVICE, "ctranslate2", "tiny.en", 8.0, 1.31, _UTTERANCE_S, "triton", _CPU_QUIET),
    # 21 windows of a 600 s recording in 100.7 s on a loaded machine (batches of 16 and 5)
    ThroughputFigure(CPU_DEVICE, "ctranslate2", "tiny.en", 10.5, 21 / 100.7, 600 / 21, "triton", _CPU_BUSY),
    # H200, torch engine, gateway -> Triton -> engine (batch = Triton's mean)
    ThroughputFigure("NVIDIA H200", "torch", "tiny.en", 1.1, 7.5, _H200_UTTERANCE_S, "gateway", _H200_SERVED),
    ThroughputFigure("NVIDIA H200", "torch", "tiny.en", 2.0, 16.3, _H200_UTTERANCE_S, "gateway", _H200_SERVED),
    ThroughputFigure("NVIDIA H200", "torch", "tiny.en", 7.8, 53.2, _H200_UTTERANCE_S, "gateway", _H200_SERVED),
    ThroughputFigure("NVIDIA H200", "torch", "tiny.en", 19.2, 104.8, _H200_UTTERANCE_S, "gateway", _H200_SERVED),
    ThroughputFigure("NVIDIA H200", "torch", "large-v3-turbo", 1.2, 3.2, 30.0, "gateway", _H200_SERVED),
    ThroughputFigure("NVIDIA H200", "torch", "large-v3-turbo", 2.1, 6.1, 30.0, "gateway", _H200_SERVED),
    ThroughputFigure("NVIDIA H200", "torch", "large-v3-turbo", 7.9, 20.7, 30.0, "gateway", _H200_SERVED),
    ThroughputFigure("NVIDIA H200", "torch", "large-v3-turbo", 27.3, 50.5, 30.0, "gateway", _H200_SERVED),
    # decoupled front, in-flight scheduler (batch = its mean active rows), closed loop c=64: the open-loop
    # levels near saturation lasted 3 s and scattered 59.8 / 86.5 / 73.7 windows/s; 74.3 is about their median
    ThroughputFigure("NVIDIA H200", "torch", "large-v3-turbo", 61.1, 74.3, 30.0, "gateway", _H200_FRONT),
    # H200, ctranslate2 engine alone (random large-v3-turbo weights, 100 tokens per window)
    ThroughputFigure("NVIDIA H200", "ctranslate2", "large-v3-turbo", 1.0, 8.8, 30.0, "engine", _H200_ENGINE),
    ThroughputFigure("NVIDIA H200", "ctranslate2", "large-v3-turbo", 16.0, 31.6, 30.0, "engine", _H200_ENGINE),
    ThroughputFigure("NVIDIA H200", "ctranslate2", "large-v3-turbo", 64.0, 34.3, 30.0, "engine", _H200_ENGINE),
)

GPU_PEAKS: dict[str, tuple[float, float]] = {
    # GpuSpec.name: (memory bandwidth GB/s, dense FP16 tensor TFLOPS), NVIDIA datasheets
    gpu_catalog.A10G.name: (600.0, 125.0),  # NVIDIA A10 datasheet (AWS's A10G has no datasheet of its own)
    gpu_catalog.L4.name: (300.0, 121.0),  # NVIDIA L4 datasheet (242 with sparsity)
    gpu_catalog.L40S.name: (864.0, 362.0),  # NVIDIA L40S datasheet (733 with sparsity)
    gpu_catalog.A100_40.name: (1555.0, 312.0),  # NVIDIA A100 datasheet, SXM4 40GB
    gpu_catalog.A100_80.name: (2039.0, 312.0),  # NVIDIA A100 datasheet, SXM4 80GB
    gpu_catalog.H100.name: (3350.0, 989.0),  # NVIDIA H100 datasheet, SXM5
    gpu_catalog.H200.name: (4800.0, 989.0),  # NVIDIA H200 datasheet, SXM
}
"""Public peak figures used only to scale the H200's measured figures to the other GPUs."""

DECODER_SHAPES: dict[str, tuple[int, int]] = {
    # model: (decoder layers, d_model), the checkpoints' Hugging Face config.json
    "tiny.en": (4, 384), "tiny": (4, 384), "base.en": (6, 512), "base": (6, 512),
    "small.en": (12, 768), "small": (12, 768), "medium.en": (24, 1024), "medium": (24, 1024),
    "large-v2": (32, 1280), "large-v3": (32, 1280), "large-v3-turbo": (4, 1280),
    "distil-large-v2": (2, 1280), "distil-large-v3": (2, 1280),
    "distil-medium.en": (2, 1024), "distil-small.en": (2, 768),
}  # fmt: skip
"""Decoder size per model; decoding dominates at the batches a pod runs (docs/benchmarks.md)."""

_REFERENCE_MODEL = "large-v3-turbo"


def _gpu_factor(device: str) -> float:
    """min(bandwidth ratio, FP16 ratio) of ``device`` to the H200."""
    bandwidth, fp16 = GPU_PEAKS[device]
    h200_bandwidth, h200_fp16 = GPU_PEAKS[gpu_catalog.H200.name]
    return min(bandwidth / h200_bandwidth, fp16 / h200_fp16)


def _model_factor(model: str) -> float:
    """Decoder cost of large-v3-turbo ÷ ``model``'s, at most 1 (a smaller model is not assumed faster)."""
    layers, width = DECODER_SHAPES[model]
    ref_layers, ref_width = DECODER_SHAPES[_REFERENCE_MODEL]
    return min(1.0, (ref_layers * ref_width**2) / (layers * width**2))


def _scaled(figure: ThroughputFigure, factor: float, basis: str, **changes: str) -> ThroughputFigure:
    return replace(
        figure,
        windows_per_second=figure.windows_per_second * factor,
        source=Estimated(f"{basis}; from: {_describe(figure.source)}"),
        **changes,  # type: ignore[arg-type]  # device / engine / model strings
    )


def _describe(source: Measured | Estimated) -> str:
    if isinstance(source, Measured):
        return f"measured on {source.where}, {source.when}, {source.run}"
    return source.basis


def _h200(engine: Engine, model: str) -> list[ThroughputFigure]:
    """The H200's figures for ``engine`` and ``model``: measured, or estimated from turbo / torch."""
    h200 = gpu_catalog.H200.name
    proxy = profile(engine).throughput_proxy
    measured_engine = proxy or engine
    rows = [f for f in _MEASURED if f.device == h200 and f.engine == measured_engine]
    exact = [f for f in rows if f.model == model]
    if not exact:
        if model not in DECODER_SHAPES:
            return []
        factor = _model_factor(model)
        exact = [
            _scaled(f, factor, f"large-v3-turbo's figure × {factor:.3g} (decoder layers × d_model², at most 1)",
                    model=model)
            for f in rows
            if f.model == _REFERENCE_MODEL
        ]  # fmt: skip
    if proxy is not None:
        exact = [
            _scaled(f, 1.0, f"the {proxy} engine's figure, a lower bound for {engine} (not measured)", engine=engine)
            for f in exact
        ]
    return exact


def figures_for(device: str, engine: Engine, model: str) -> list[ThroughputFigure]:
    """Every figure for ``device`` / ``engine`` / ``model``, by batch; empty when none can be given.

    The CPU has measured figures for ``ctranslate2`` tiny.en only; GPUs in :data:`GPU_PEAKS` have
    the H200's (measured or estimated), scaled for any other GPU.
    """
    if device == CPU_DEVICE:
        rows = [f for f in _MEASURED if f.device == CPU_DEVICE and f.engine == engine and f.model == model]
    elif device in GPU_PEAKS:
        rows = _h200(engine, model)
        if device != gpu_catalog.H200.name:
            factor = _gpu_factor(device)
            rows = [
                _scaled(f, factor, f"the H200's figure × {factor:.3g} = min(bandwidth, dense FP16) ratio of "
                        f"{device} to the H200 (NVIDIA datasheets)", device=device)
                for f in rows
            ]  # fmt: skip
    else:
        rows = []
    return sorted(rows, key=lambda f: f.batch)


def mig_share(profile: gpu_catalog.MigProfile) -> float:
    """Share of a whole GPU's throughput credited to one MIG slice: its compute slices ÷ 7, e.g. 1/7 for ``1g.10gb``.

    The profile's share of the GPU's SMs (NVIDIA MIG user guide, "Supported MIG Profiles"); no MIG
    slice has been measured here.
    """
    return profile.compute_slices / gpu_catalog.MIG_COMPUTE_SLICES


def slice_figures(figures: Iterable[ThroughputFigure], profile: gpu_catalog.MigProfile) -> list[ThroughputFigure]:
    """``figures`` of a whole GPU as one ``profile`` slice's: windows/s × :func:`mig_share` at the same batch."""
    share = mig_share(profile)
    basis = (
        f"one {profile.name} MIG slice = the whole GPU's figure × {profile.compute_slices}/"
        f"{gpu_catalog.MIG_COMPUTE_SLICES} (its share of the SMs, NVIDIA MIG user guide; not measured on MIG)"
    )
    return [_scaled(figure, share, basis) for figure in figures]


def _known() -> str:
    return f"devices {CPU_DEVICE} (ctranslate2, tiny.en) and {', '.join(GPU_PEAKS)}; models {', '.join(DECODER_SHAPES)}"


def _require(device: str, engine: Engine, model: str) -> list[ThroughputFigure]:
    rows = figures_for(device, engine, model)
    if not rows:
        raise UnknownThroughput(f"no throughput figure for {engine} serving {model} on {device}; known: {_known()}")
    return rows


def throughput_at(device: str, engine: Engine, model: str, batch: float) -> ThroughputFigure:
    """The figure at the largest measured batch ≤ ``batch`` (the smallest one when ``batch`` is below all).

    Raises:
        UnknownThroughput: nothing known for this device, engine and model.
    """
    rows = _require(device, engine, model)
    below = [f for f in rows if f.batch <= batch]
    return below[-1] if below else rows[0]


def conservative_rtf(device: str, engine: Engine, model: str) -> float:
    """The slowest RTF in the table for this device, engine and model (a request's worst case).

    Raises:
        UnknownThroughput: nothing known for this device, engine and model.
    """
    return max(f.rtf for f in _require(device, engine, model))


def device_for_instance_type(instance_type: str) -> str:
    """The table's device name of an ``ml.*`` instance type (its GPU's ``GpuSpec.name``).

    Raises:
        UnknownThroughput: the instance family has no GPU in the catalog.
    """
    gpu = gpu_catalog.gpu_for(instance_type)
    if gpu is None:
        raise UnknownThroughput(f"{instance_type} has no GPU in settings.gpu_catalog; known: {_known()}")
    return gpu.name


def all_figures(engines: Iterable[Engine] = tuple(ENGINE_PROFILES)) -> list[ThroughputFigure]:
    """The whole table (every device, the given engines, every model with figures), for reports."""
    return [
        figure
        for device in (CPU_DEVICE, *GPU_PEAKS)
        for engine in engines
        for model in DECODER_SHAPES
        for figure in figures_for(device, engine, model)
    ]
