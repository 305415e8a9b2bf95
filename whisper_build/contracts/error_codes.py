"""The error codes every front end answers with: the ``code`` of an error, whatever carries it.

The HTTP gateway puts them in ``{"code", "message"}`` bodies and (as lower-case names) in OpenAI's
``{"error": {..., "code"}}`` objects and stream events; a WebSocket front end puts them in its
``error`` events. Values are stable: docs/gateway.md, "Errors".
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ErrorCode"]


class ErrorCode(IntEnum):
    """Machine-readable error codes (the ``code`` field); ``0`` is success."""

    INVALID_JSON = 1001
    INVALID_REQUEST = 1002
    INVALID_FIELD = 1003
    INVALID_AUDIO = 1004
    BODY_TOO_LARGE = 1005
    AUDIO_TOO_LONG = 1006
    NOT_FOUND = 1007
    UNAUTHORIZED = 1008
    MODEL_NOT_FOUND = 1009
    REQUEST_TIMEOUT = 1010
    METHOD_NOT_ALLOWED = 1011
    AUDIO_TOO_SHORT = 1012
    OVERLOADED = 2001
    UNAVAILABLE = 2002
    BACKEND_ERROR = 2003
    TIMEOUT = 2004
    INTERNAL = 2005
