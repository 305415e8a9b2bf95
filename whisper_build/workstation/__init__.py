"""Workstation tools: the local (no Docker) Triton + gateway launcher and the CLI client."""
