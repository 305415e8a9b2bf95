"""Speech-serving benchmark (GenAI-Perf / perf_analyzer style) at a sweep of concurrencies and arrival rates.

Measures latency percentiles, RTF, RTFx and throughput of the gateway or Triton. Run
``python -m benchmarks.bench``.

Modules: :mod:`~benchmarks.bench.stats` (arithmetic), :mod:`~benchmarks.bench.audio` (inputs),
:mod:`~benchmarks.bench.targets` (clients), :mod:`~benchmarks.bench.target_spec` (``NAME=URL``),
:mod:`~benchmarks.bench.local_targets` (in-process engine), :mod:`~benchmarks.bench.triton_metrics` (batch size),
:mod:`~benchmarks.bench.runner` (the sweep), :mod:`~benchmarks.bench.open_loop` (arrival rates),
:mod:`~benchmarks.bench.report` (JSON/CSV/PNG), :mod:`~benchmarks.bench.forced_tokens` (vLLM's decode length),
:mod:`~benchmarks.bench.cli`.
Docs: docs/benchmarks.md, "The `bench` tool".
"""
