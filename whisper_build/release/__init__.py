"""Build and release time: engine builds, the engine manifest, publishing to S3.

Docs: docs/engines.md, "Publishing, versions and rollback".
"""
