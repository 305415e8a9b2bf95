"""Live transcription: OpenAI Realtime transcription sessions (``GET /v1/realtime?intent=transcription``).

Transport-agnostic core of the WebSocket endpoint; imports nothing of ``whisper_build.serving.gateway``
(the gateway wires it: a session limiter, health recording and metrics are constructor arguments).

- ``events`` — client and server events (pydantic), the session configuration and its partial update.
- ``audio`` — ``audio/pcm`` 24 kHz, ``audio/pcmu``, ``audio/pcma`` → 16 kHz float32.
- ``vad`` — Silero VAD v6 streamed per session and the ``server_vad`` turn detector.
- ``agreement`` — LocalAgreement-2 (append-only deltas); ``context`` — earlier turns before each decode.
- ``session`` — one session's turns, updates and events; ``limits`` — its cadence, limits and config checks;
  ``decoder`` — its model calls (a turn's decode, the final's retry); ``speakers`` — its speaker labels.
- ``endpoint`` — the WebSocket loop (limits, drain, close codes).
- ``ports`` — what the host gives a session: a session limiter, health recording, the metrics.

Docs: docs/gateway.md, "Live transcription".
"""
