"""Names of the gateway's pod-wide gauges that other layers read (docs/contracts.md §7).

The gateway exports them (``whisper_build.serving.gateway.metrics``); bulk's yield gate reads the
in-flight gauge off a gateway's ``/metrics``.
"""

INFLIGHT = "whisper_gateway_inflight_requests"
"""Requests admitted or waiting for a slot, per gateway worker."""
HEALTHY = "whisper_gateway_model_healthy"
"""1 while the worker judges the model healthy, else 0."""
RELOADED = "whisper_gateway_model_reloaded_timestamp_seconds"
"""Unix time a worker of the pod last loaded the model again (the highest over workers)."""
