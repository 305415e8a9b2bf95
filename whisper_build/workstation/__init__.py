"""Workstation tools: what runs on a developer's machine.

:mod:`.local_triton` launches the local (no Docker) Triton + gateway (:mod:`.local_gateway`, :mod:`.ports`,
:mod:`.process`, :mod:`.triton_wheel`, :mod:`.triton_stop`);
:mod:`.browser` drives headless Chromium for the page's tests;
:mod:`.cli` is the CLI client; :mod:`.sizing_cli` (``make sizing``, with :mod:`.sizing` and
:mod:`.sizing_bulk`) sizes a fleet and :mod:`.price_lookup` (``make prices``) lists prices;
:mod:`.api_keys` (``make api-key``) prints how to read and rotate the gateway's API key;
:mod:`.ct2_whisper_to_hf` maps a CTranslate2 Whisper model into a Hugging Face checkpoint.

Docs: docs/serving.md, "Local run (no Docker)".
"""
