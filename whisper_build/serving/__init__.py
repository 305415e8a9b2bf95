"""Code that runs in the serving pod.

Packages: ``triton_model`` (the Triton ``whisper`` model), ``engines`` (Whisper engines), ``engine_core`` (an
engine in a process of its own), ``audio`` (what users send → 16 kHz windows), ``transcription`` (the core every
front end shares), ``diarization`` (speakers), ``gateway`` (HTTP), ``realtime`` (live sessions).
Modules: ``contract`` and ``results`` (the wire between gateway and model), ``prompt`` (decoder prompts),
``silence`` (silence levels and rules), ``supervisor`` and ``supervisor_config`` (the image's entrypoint),
``triton_cleanup`` (what a dead tritonserver leaves), ``backoff`` (restart delays), ``flat_settings`` (grouped
settings, flat variables), ``native_code`` (unguarded AVX-512), ``prometheus_text`` (reading a ``/metrics``).
Docs: docs/serving.md.
"""
