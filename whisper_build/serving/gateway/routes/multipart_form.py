"""Multipart uploads named only through ``filename*=UTF-8''…`` are files, not text fields.

Starlette's :class:`~starlette.formparsers.MultiPartParser` makes a part a file when its
``Content-Disposition`` has a ``filename`` parameter, read with python-multipart's
``parse_options_header``, which drops the RFC 5987 / RFC 8187 extended form ``filename*``
(RFC 7578 §4.2: senders should not use it in ``multipart/form-data``). Clients that follow RFC 6266
§4.3 still send it, alone or beside ``filename``; their audio then reached the route as a str and
FastAPI answered 400 "Expected UploadFile". :class:`ExtendedFilenameRoute` (a FastAPI custom route
class, https://fastapi.tiangolo.com/how-to/custom-request-and-route/) parses forms with
:class:`ExtendedFilenameParser`, which makes such a part a file (spooled like any upload, the same
``max_files`` limit) named by the decoded ``filename*`` (RFC 6266 §4.3: it wins over ``filename``).
The extended value is decoded by the standard library's RFC 2231 code (``email.message``).
Docs: docs/gateway.md, "OpenAI API parity".
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextlib import aclosing
from email.message import Message
from email.utils import collapse_rfc2231_value
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute
from python_multipart.multipart import parse_options_header
from starlette.datastructures import FormData
from starlette.formparsers import MultiPartException, MultiPartParser

__all__ = ["ExtendedFilenameParser", "ExtendedFilenameRequest", "ExtendedFilenameRoute", "extended_filename"]

MULTIPART = "multipart/form-data"
FIELD_BYTES = 4 * 1024 * 1024
"""Largest text field: Starlette's 1 MiB is below a 10 s stereo 48 kHz WAV reference in base64 (2.6 MB)."""


def extended_filename(content_disposition: bytes) -> str | None:
    """The decoded ``filename*`` of a part's ``Content-Disposition`` (raw header bytes), or None without one.

    ``form-data; name="file"; filename*=UTF-8''n%C3%A4me.wav`` → ``"näme.wav"``. Header bytes are
    read as latin-1 (as python-multipart reads them); the charset named in the value decodes it.
    """
    header = Message()
    header["Content-Disposition"] = content_disposition.decode("latin-1")
    for name, value in header.get_params(header="content-disposition") or []:
        if name.lower() == "filename" and isinstance(value, tuple):
            return collapse_rfc2231_value(value).strip()
    return None


class ExtendedFilenameParser(MultiPartParser):
    """Starlette's multipart parser, with ``filename*`` making a part a file (module docstring)."""

    def on_headers_finished(self) -> None:
        """Make a part with ``filename*`` a file named by its decoded value, then parse it as Starlette does."""
        part = self._current_part
        disposition = part.content_disposition or b""
        name = extended_filename(disposition)
        if name is not None and b"filename" not in parse_options_header(disposition)[1]:
            part.content_disposition = disposition + b'; filename=""'
        super().on_headers_finished()
        if name is not None and part.file is not None:
            part.file.filename = name


class ExtendedFilenameRequest(Request):
    """A request whose multipart form is parsed by :class:`ExtendedFilenameParser`."""

    async def _get_form(
        self, *, max_files: int | float = 1000, max_fields: int | float = 1000, max_part_size: int = 1024 * 1024
    ) -> FormData:
        max_part_size = max(max_part_size, FIELD_BYTES)  # known_speaker_references[] data URLs
        content_type = self.headers.get("content-type", "").split(";")[0].strip().lower()
        if self._form is None and content_type == MULTIPART:
            try:
                async with aclosing(self.stream()) as stream:
                    parser = ExtendedFilenameParser(
                        self.headers, stream, max_files=max_files, max_fields=max_fields, max_part_size=max_part_size
                    )
                    self._form = await parser.parse()
            except MultiPartException as exc:
                raise HTTPException(status_code=400, detail=exc.message) from exc
        return await super()._get_form(max_files=max_files, max_fields=max_fields, max_part_size=max_part_size)


class ExtendedFilenameRoute(APIRoute):
    """Route class whose handler sees an :class:`ExtendedFilenameRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, given the request as an :class:`ExtendedFilenameRequest` (same scope and receive)."""
        handler = super().get_route_handler()

        async def extended_filename_handler(request: Request) -> Response:
            return await handler(ExtendedFilenameRequest(request.scope, request.receive))

        return extended_filename_handler
