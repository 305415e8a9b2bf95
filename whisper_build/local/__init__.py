"""Local (no Docker) runners for development and tests."""
