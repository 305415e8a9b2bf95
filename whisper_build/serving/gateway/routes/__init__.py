"""One FastAPI router per API.

:mod:`.sagemaker` serves ``/invocations`` and ``/ping``, :mod:`.openai` serves ``/v1/...`` (both
share the app's :class:`whisper_build.serving.gateway.pipeline.Pipeline`), :mod:`.liveness` serves
``/live``, :mod:`.page` the try-it page at ``/``; :mod:`.multipart_form` reads uploads named only through ``filename*`` as files and
:mod:`.form_fields` refuses a single-valued field sent twice; :mod:`.speaker_fields` reads the
speaker (diarization) fields.
Docs: docs/gateway.md, "Endpoints".
"""
