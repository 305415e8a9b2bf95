"""HTTP gateway in front of Triton's ``whisper`` model.

``whisper_build.serving.gateway.app:app`` is the ASGI app (``create_app(settings)`` builds one over the
composition root, :class:`~whisper_build.serving.gateway.runtime.GatewayRuntime`);
``python -m whisper_build.serving.gateway`` serves it with graceful drain on SIGTERM.
Docs: docs/gateway.md.
"""
