"""Benchmarks: the ``bench`` CLI (:mod:`benchmarks.bench`) and the reference measurements
(``benchmarks/reference.py``, ``benchmarks/gpu_whisper_random.py``).
"""
