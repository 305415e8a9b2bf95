"""Workstation tools: the local (no Docker) Triton + gateway launcher and the CLI client.

Docs: docs/serving.md, "Local run (no Docker)".
"""
