"""Base64 audio payloads as existing clients send them. Docs: docs/gateway.md, "`POST /invocations`"."""

import base64
import binascii
import re

from whisper_build.serving.audio.errors import EmptyAudioError, InvalidBase64Error

# RFC 2397 data URI: data:[<mediatype>][;params];base64,<data>
_DATA_URI = re.compile(r"^data:[^,]*?;base64,", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")


def decode_base64(text: str) -> bytes:
    """Decode base64 audio text to bytes.

    Accepts the standard and the URL-safe alphabet, missing ``=`` padding, embedded
    whitespace/newlines (MIME line wrapping), and an optional ``data:audio/...;base64,``
    prefix (RFC 2397).

    Canonical base64 (what ``base64.b64encode`` writes) is decoded in one strict pass
    (``binascii.a2b_base64(strict_mode=True)``, Python ≥ 3.11); anything else is normalised first.

    Raises:
        EmptyAudioError: the text (after removing the prefix) is empty.
        InvalidBase64Error: the text holds characters outside the base64 alphabets or
            has an impossible length.
    """
    if text[:5].lower() != "data:":
        try:  # the common case, canonical base64: one pass in C, no copy of the text
            decoded = binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError):
            pass  # whitespace, URL-safe alphabet, missing padding, or invalid: normalise below
        else:
            if decoded:
                return decoded
    body = _DATA_URI.sub("", text.strip(), count=1)
    body = _WHITESPACE.sub("", body)
    if not body:
        raise EmptyAudioError("audio_data is empty: send the audio file's bytes encoded as base64")
    if "-" in body or "_" in body:
        body = body.replace("-", "+").replace("_", "/")
    body = body.rstrip("=")
    if len(body) % 4 == 1:
        raise InvalidBase64Error(
            "audio_data is not valid base64: its length is impossible for base64 (truncated payload?)"
        )
    body += "=" * (-len(body) % 4)
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidBase64Error(
            "audio_data is not valid base64: use the standard alphabet A-Z a-z 0-9 + / "
            "(or URL-safe - _), optionally prefixed by 'data:audio/<type>;base64,'"
        ) from exc
