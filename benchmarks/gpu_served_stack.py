"""What the served-path benchmark starts: Triton on free ports, the models' engine parameters, target URLs.

Used by :mod:`benchmarks.gpu_served` (and :mod:`benchmarks.gpu_live`, :mod:`benchmarks.vllm_peer`):
:func:`start_triton` (a Triton serving given engine parameters), :func:`served_models` (``tiny.en``
and the random-weight turbo), :func:`engine_query` / :func:`core_query` (``bench`` target URLs).
Docs: docs/benchmarks.md, "GPU, served path".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, get_args

from benchmarks.gpu_whisper_random import random_model_dir
from whisper_build.serving.engines import EngineParams
from whisper_build.serving.triton_model.repository import BatchingConfig
from whisper_build.serving.triton_model.settings import TritonSettings
from whisper_build.workstation.local_triton import LocalTriton, free_ports

_SCHEDULER_FIELD = BatchingConfig.model_fields.get("scheduler")
SCHEDULERS: tuple[str, ...] = get_args(_SCHEDULER_FIELD.annotation) if _SCHEDULER_FIELD else ("static",)
"""The Triton model's schedulers in this tree (``static`` only before the model had its own scheduler)."""


def engine_query(params: EngineParams, max_batch: int) -> str:
    """``engine:`` target URL for the bench tool with these parameters."""
    fields = {k: str(v) for k, v in params.model_dump(mode="json").items() if v != EngineParams.model_fields[k].default}
    return "engine:?" + "&".join(f"{k}={v}" for k, v in {**fields, "max_batch": max_batch}.items())


def core_query(params: EngineParams, max_batch: int, scheduler: str, queue_delay_us: int) -> str:
    """``core:`` target URL (the engine core driven without Triton) with these parameters and scheduler."""
    query = engine_query(params, max_batch).removeprefix("engine:?")
    return f"core:?{query}&scheduler={scheduler}&queue_delay_us={queue_delay_us}"


def start_triton(
    params: EngineParams,
    max_batch: int,
    queue_delay_us: int,
    triton_env: list[str],
    workdir: Path,
    instance_count: int = 1,
    scheduler: str = "static",
) -> LocalTriton:
    """A started Triton on free ports serving ``params``; read its endpoints from ``.settings``.

    Batching: ``max_batch`` rows (queue 4×), ``queue_delay_us`` of delay, ``instance_count`` instances,
    the model's ``scheduler`` where this tree's model has one (:data:`SCHEDULERS`);
    ``triton_env`` (``KEY=VALUE``) is set for the tritonserver process only.
    """
    http, grpc, metrics = free_ports(3)
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler {scheduler!r}: this tree's Triton model offers {', '.join(SCHEDULERS)}")
    fields: dict[str, object] = {
        "max_batch_size": max_batch,
        "max_queue_delay_us": queue_delay_us,
        "max_queue_size": 4 * max_batch,
        "instance_count": instance_count,
    }
    if "scheduler" in BatchingConfig.model_fields:
        fields["scheduler"] = scheduler
    batching = BatchingConfig.model_validate(fields)
    settings = TritonSettings(
        http_port=http, grpc_port=grpc, metrics_port=metrics, engine=params, batching=batching, exit_timeout_s=5
    )
    extra_env = dict(item.split("=", 1) for item in triton_env)
    os.environ.update(extra_env)  # read by LocalTriton.start (server_environment) only
    try:
        return LocalTriton(settings, workdir=workdir).start()
    finally:
        for key in extra_env:
            os.environ.pop(key, None)


def served_models(
    tiny: Path,
    out: Path,
    device: Literal["cpu", "cuda", "auto"],
    max_batch: int,
    fixed_tokens: int,
    shape: str = "large-v3-turbo",
) -> dict[str, EngineParams]:
    """Engine parameters per benchmark model: ``tiny.en`` (real weights in ``tiny``) and the random-weight turbo.

    The random-weight model runs with the temperature fallback off (``temperature_increment=0``):
    meaningless text always fails the fallback's thresholds, and re-decoding every window at rising
    temperatures would time the fallback, not the engine (seen on an H200: 4.25 windows/s at c=64).
    """
    print(f"large-v3-turbo-random: RANDOM weights, {fixed_tokens} tokens per window, temperature fallback OFF "
          "(temperature_increment=0)", flush=True)  # fmt: skip
    return {
        "tiny.en": EngineParams(
            engine="torch", model_path=str(tiny), device=device, beam_size=1, max_engine_batch=max_batch
        ),
        "large-v3-turbo-random": EngineParams(
            engine="torch", model_path=str(random_model_dir(tiny, out / f"random-{shape}", shape)),
            device=device, beam_size=1, max_engine_batch=max_batch, random_weights_fixed_tokens=fixed_tokens,
            temperature_increment=0.0,
        ),
    }  # fmt: skip
