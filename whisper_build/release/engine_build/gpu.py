"""The GPU the engines are built on, and the TensorRT-LLM / CUDA versions they are tied to.

Engines only load on the compute capability and TensorRT version they were built with
(NVIDIA/TensorRT-LLM#222 on GitHub; TensorRT support matrix: "serialized engines are not portable across
devices"), so both go into ``manifest.json``.
Docs: docs/engines.md, "Why one engine per GPU architecture".
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from settings.gpu_catalog import arch_for_compute_capability

NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"]
"""``compute_cap`` is a query field since driver 510 (``nvidia-smi --help-query-gpu``)."""


class GpuQueryError(RuntimeError):
    """``nvidia-smi`` is missing, failed, or printed nothing usable."""


@dataclass(frozen=True)
class GpuInfo:
    """One GPU: ``name`` (``NVIDIA A10G``) and ``compute_capability`` (``"8.6"``)."""

    name: str
    compute_capability: str

    @property
    def arch(self) -> str:
        """``sm86`` for ``8.6``."""
        return arch_for_compute_capability(self.compute_capability)


def parse_gpu_csv(text: str) -> list[GpuInfo]:
    """Parse ``nvidia-smi --query-gpu=name,compute_cap --format=csv[,noheader]`` output.

    Tolerates a header line, blank lines, CRLF, surrounding spaces and commas inside the name
    (the capability is the last field).

    Raises:
        GpuQueryError: no GPU line, or a capability that is not ``<major>.<minor>`` (e.g. ``[N/A]``
            from an old driver).
    """
    gpus: list[GpuInfo] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.lower().replace(" ", "") == "name,compute_cap":
            continue
        name, sep, capability = line.rpartition(",")
        name, capability = name.strip(), capability.strip()
        if not sep or not name or not re.fullmatch(r"\d{1,2}\.\d", capability):
            raise GpuQueryError(
                f"cannot read GPU line {line!r} from nvidia-smi: expected '<name>, <major>.<minor>' "
                "(compute_cap needs NVIDIA driver >= 510)"
            )
        gpus.append(GpuInfo(name, capability))
    if not gpus:
        raise GpuQueryError("nvidia-smi listed no GPU: is this running on a GPU node with the NVIDIA runtime?")
    return gpus


def query_gpu(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> GpuInfo:
    """The first GPU of this machine (a build pod requests exactly one: ``nvidia.com/gpu: 1``).

    Raises:
        GpuQueryError: ``nvidia-smi`` missing or failing, or several different GPU models.
    """
    try:
        result = run(NVIDIA_SMI_QUERY, capture_output=True, text=True, check=True, timeout=60)
    except FileNotFoundError as exc:
        raise GpuQueryError("nvidia-smi not found: this must run on a GPU node") from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpuQueryError(f"cannot run nvidia-smi: {exc}") from exc
    except subprocess.CalledProcessError as exc:
        raise GpuQueryError(f"nvidia-smi failed ({exc.returncode}): {exc.stderr.strip()}") from exc
    gpus = parse_gpu_csv(result.stdout)
    if len({gpu.compute_capability for gpu in gpus}) > 1:
        raise GpuQueryError(f"GPUs of different architectures visible ({gpus}); expose exactly one GPU model")
    return gpus[0]


def package_version(*names: str) -> str | None:
    """Installed version of the first distribution found among ``names``, else None."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def tensorrt_llm_version() -> str | None:
    """``tensorrt_llm`` wheel version (the engines are tied to it), None when not installed."""
    return package_version("tensorrt_llm", "tensorrt-llm")


def cuda_version() -> str | None:
    """CUDA version PyTorch was built with (the toolkit TensorRT-LLM runs on), None without torch."""
    try:
        import torch
    except ImportError:
        return None
    return torch.version.cuda
