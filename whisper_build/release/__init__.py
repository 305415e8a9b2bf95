"""Build and release time: engine builds, the engine manifest, publishing to S3."""
