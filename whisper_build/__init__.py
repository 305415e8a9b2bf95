"""Everything that is not infrastructure, grouped by where and when it runs (README "Layout").

- ``serving/``     — in the serving pod: the Triton model, engines, audio, the transcription core, gateway,
  live sessions, diarization, supervisor.
- ``bulk/``        — bulk jobs: S3 in, S3 out, an SQS queue between (docs/bulk.md).
- ``release/``     — at build and release time: engine build, engine manifest, publishing to S3.
- ``podstart/``    — at pod start, in the init container: the preflight check.
- ``pod_ranker.py`` — in the cluster: marks GPU pods with their node's instance type and deletion cost.
- ``deploy/``      — the deploy tool of ``make deploy`` / ``make destroy`` (docs/deploy.md).
- ``workstation/`` — on a developer's machine: local Triton, the CLI client, sizing and prices, API keys.
- ``image/``       — the serving image's Dockerfile (built from the repository root).
- ``contracts/``   — the floor of the import layers: plain definitions ``settings`` reads too.
- ``paths.py``     — the repository root (:data:`whisper_build.paths.REPO_ROOT`).
"""
