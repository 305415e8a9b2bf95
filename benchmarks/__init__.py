"""Benchmarks: the ``bench`` CLI (:mod:`benchmarks.bench`) and the reference measurements.

Reference measurements: ``benchmarks/reference.py`` and ``benchmarks/gpu_whisper_random.py``.
Docs: docs/benchmarks.md, "The `bench` tool".
"""
