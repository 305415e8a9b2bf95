"""The floor of the import layers: plain definitions that ``settings`` and ``whisper_build`` both read.

Standard library only, importing nothing of the tree, so every layer above may import it (the
``layers`` contract in ``pyproject.toml``; docs/development.md, "Layers").

- ``engines`` — :data:`~whisper_build.contracts.engines.EngineKind`, the engines a GPU group can serve.
- ``gateway_metrics`` — the gateway gauges' names that bulk reads.
- ``error_codes`` — :class:`~whisper_build.contracts.error_codes.ErrorCode`, what every front end answers with.
- ``live_metrics`` — the live-transcription series' names the gateway exports and KEDA and dashboards read.
"""
