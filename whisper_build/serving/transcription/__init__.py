"""The transcription core every front end shares: HTTP routes, the stream, bulk jobs, live sessions.

Transport-agnostic: imports no web framework and nothing of ``whisper_build.serving.gateway``.

- ``request`` — :class:`~.request.WindowRequest`, what every window of one request is decoded with.
- ``backend`` — the model-server Protocol (``infer``), its errors, the wrapper base.
- ``triton`` — the Triton gRPC backend; ``triton_inputs`` — the request's tensors; ``recovery`` — a retry on reload.
- ``speakers`` — the speaker model's one way in: a whole file's turns, a live session's stable labels.
- ``windows`` — the window pipeline (:class:`~.windows.Transcriber`).
- ``formats`` — the response formats table (:data:`~.formats.FORMATS`).
- ``service`` — :class:`~.service.TranscriptionService`: admission, timeouts, failure accounting;
  ``metrics`` — the counters a front end implements; ``failures`` — a failure's code, for every front end.
- ``admission`` — the requests and audio-seconds budget, drain; ``health`` — model health, canary;
  ``triton_load`` — Triton's view of the model's load; ``pod_view`` — pod-wide figures over workers.
Docs: docs/gateway.md, "What happens to a request".
"""
