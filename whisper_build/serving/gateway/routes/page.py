"""``GET /``: the try-it page (live and file transcription in a browser) and its static assets.

Plain HTML, CSS and JavaScript shipped as package data (:mod:`whisper_build.serving.gateway.page`): no
build step, nothing fetched from another origin. Every answer carries a strict Content-Security-Policy
(scripts, styles and the audio worklet from this origin only; connections to this origin only, the
live session's WebSocket included). ``WHISPER_GATEWAY_PAGE=false`` answers 404 instead. The page holds
no key: with API keys on it asks for one and keeps it in the tab's memory. Docs: docs/gateway.md, "The page".
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import Response

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.gateway.errors import ApiError

__all__ = ["ASSETS", "CONTENT_SECURITY_POLICY", "PAGE", "router"]

PAGE = "/"
ASSET_PREFIX = "/page/"
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
    "page.js": "text/javascript; charset=utf-8",
    "pcm-worklet.js": "text/javascript; charset=utf-8",
}
"""The page's files (``whisper_build/serving/gateway/page/``) → their media types; nothing else is served."""

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",  # CSP Level 3: 'self' also matches ws:/wss: to this host (the live session)
        "media-src 'self' blob:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
"""No inline script or style, no other origin (W3C CSP Level 3, §6.7.2.9 "Does url match expression in origin")."""

_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
    "Permissions-Policy": "microphone=(self)",
}

router = APIRouter()


def _asset(request: Request, name: str) -> Response:
    if not request.app.state.runtime.settings.server.page or name not in ASSETS:
        raise ApiError(404, ErrorCode.NOT_FOUND, "no such page (the page is off: WHISPER_GATEWAY_PAGE=false)")
    body = resources.files("whisper_build.serving.gateway.page").joinpath(name).read_bytes()
    return Response(body, media_type=ASSETS[name], headers=_HEADERS)


@router.get(PAGE, include_in_schema=False)
async def page(request: Request) -> Response:
    """The page (an HTML document); 404 when ``WHISPER_GATEWAY_PAGE`` is false."""
    return _asset(request, "index.html")


@router.get(ASSET_PREFIX + "{name}", include_in_schema=False)
async def asset(request: Request, name: str) -> Response:
    """One of :data:`ASSETS`; anything else is 404."""
    return _asset(request, name)
