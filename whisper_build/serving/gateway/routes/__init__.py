"""One FastAPI router per API.

:mod:`.sagemaker` serves ``/invocations`` and ``/ping``, :mod:`.openai` serves ``/v1/...`` (both
share the app's :class:`whisper_build.serving.gateway.pipeline.Pipeline`),
:mod:`.liveness` serves ``/live``.
"""
