"""The ``whisper`` Triton python-backend model: its repository template and the logic its model runs.

``repository`` renders the model repository (``model_repository/``) for one machine, ``settings`` are the
Triton server's, ``contract_files`` the files rendered from the wire contract. Per request: ``front`` (the
decoupled model's parameters, waiting, errors) and ``inflight_front`` (the in-flight scheduler's);
``scheduler`` and ``scheduler_metrics`` (priority queues, static batches; their series), ``batching`` (request
tensors → windows), ``decoding`` (fallback, silence), ``early_end`` (a final segment that jumps speech), ``language`` (one per request), ``segments`` (a window's
segments), ``cancellation`` (a batch nobody waits for stops), ``stages`` (where the time goes).
Docs: docs/serving.md, "Model repository".
"""
