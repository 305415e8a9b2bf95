"""Live transcription: OpenAI Realtime transcription sessions (``GET /v1/realtime?intent=transcription``).

Transport-agnostic core of the WebSocket endpoint; imports nothing of ``whisper_build.serving.gateway``
(the gateway wires it: a session limiter, health recording and metrics are constructor arguments).

- ``events`` — the session configuration (pydantic) and its partial update; ``server_events`` — server events.
- ``audio`` — ``audio/pcm`` 24 kHz, ``audio/pcmu``, ``audio/pcma`` → 16 kHz float32; ``timeline`` — samples ↔ ms, s.
- ``vad`` — Silero VAD v6 streamed per session and the ``server_vad`` turn detector.
- ``agreement`` — LocalAgreement-2 (append-only deltas); ``context`` — earlier turns before each decode.
- ``session`` — one session's turns, updates and events; ``limits`` — its cadence, limits and config checks;
  ``buffer`` — its audio and the client's pace; ``decoder`` — its model calls; ``speakers`` — its speaker labels.
- ``endpoint`` — the WebSocket loop (limits, drain, close codes); ``ports`` — what the host gives a session.

Docs: docs/gateway.md, "Live transcription".
"""
