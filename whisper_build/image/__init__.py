"""Production serving image: Dockerfile and the entrypoint supervisor (Triton + gateway)."""
