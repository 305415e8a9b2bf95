"""Code that runs in the serving pod: Triton model, engines, audio, prompt, transcription core, gateway, supervisor.

Docs: docs/serving.md.
"""
