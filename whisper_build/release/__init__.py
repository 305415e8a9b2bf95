"""Build and release time: engine builds, the engine manifest, publishing to S3.

``engine_build`` (the engine build tool), ``manifest`` (the engine manifest), ``publish`` (publishing to S3),
``invocations`` (the release tools' command lines for a deployment config).
Docs: docs/engines.md, "Publishing, versions and rollback".
"""
