"""Code that runs in the serving pod.

Triton model, engines, audio, prompt, transcription core, diarization, gateway, live sessions
(``realtime``), supervisor.
Docs: docs/serving.md.
"""
