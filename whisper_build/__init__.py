"""Everything that is not infrastructure: grouped by where and when it runs.

- ``serving/``     — in the serving pod: the Triton model (``triton_model/``), engines, audio,
  prompt, the gateway and the entrypoint supervisor.
- ``release/``     — at build and release time: engine build (TensorRT-LLM convert + build),
  the engine manifest, publishing to S3.
- ``podstart/``    — at pod start, in the init container: the preflight check.
- ``workstation/`` — on a developer's machine: the local Triton launcher and the CLI client.
- ``image/``       — the serving image's Dockerfile (built from the repository root).
- ``contracts/``   — the floor of the import layers: plain definitions ``settings`` reads too.
"""
