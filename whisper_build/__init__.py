"""Serving side of whisper-hyperpod: Triton model repository, engines, gateway, engine build.

Nothing in this package imports AWS libraries; it runs the same in a GPU pod and on a laptop CPU.
"""
