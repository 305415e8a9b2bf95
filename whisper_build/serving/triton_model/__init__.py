"""The ``whisper`` Triton python-backend model: its repository template, config rendering and batching.

Docs: docs/serving.md, "Model repository".
"""
