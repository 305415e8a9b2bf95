"""API-key authentication of the gateway's transcription routes.

Entry point: :class:`ApiKeyAuth` (the details, in its docstring).
Docs: docs/gateway.md, "Authentication (API keys)".
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.backoff import Backoff
from whisper_build.serving.gateway.errors import error_response
from whisper_build.serving.gateway.settings import GatewaySettings

log = logging.getLogger(__name__)

PROTECTED_PREFIXES = ("/v1/", "/invocations")
"""Paths that need a key; everything else (``/ping``) is open."""
API_KEY_HEADER = "x-api-key"
KEY_SUBPROTOCOL_PREFIX = "openai-insecure-api-key."
"""A WebSocket subprotocol carrying the key (the handshake's ``Sec-WebSocket-Protocol``; never echoed)."""

KeyLoader = Callable[[], Awaitable[frozenset[str]]]
"""Returns the active keys; raises on failure (the caller keeps the previous keys)."""


def parse_keys_csv(text: str) -> frozenset[str]:
    """``"key1, key2"`` → ``{"key1", "key2"}`` (blanks dropped)."""
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def parse_secret(text: str) -> frozenset[str]:
    """Active keys of a secret value: a JSON object of name → key, or a JSON list of keys.

    Raises:
        ValueError: the value is not one of those shapes or holds no key. The message never
            contains the value.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError('the API keys secret is not JSON; store {"name": "key", ...} or ["key", ...]') from None
    values: list[Any] = list(data.values()) if isinstance(data, dict) else data if isinstance(data, list) else []
    if not values or not all(isinstance(value, str) and value for value in values):
        raise ValueError(
            "the API keys secret must be a JSON object or list whose values are non-empty strings "
            "(docs/deploy.md, Security)"
        )
    return frozenset(values)


def secrets_manager_loader(secret_id: str, client: Any = None) -> KeyLoader:
    """A :data:`KeyLoader` reading ``secret_id`` from AWS Secrets Manager (``GetSecretValue``, current version).

    Args:
        secret_id: Secret ARN or name. The region is taken from an ARN, else from the environment.
        client: A boto3 ``secretsmanager`` client (default: one built with the default credential
            chain, which picks up EKS Pod Identity's container credentials).
    """
    if client is None:
        import boto3

        region = secret_id.split(":")[3] if secret_id.startswith("arn:") else None
        client = boto3.client("secretsmanager", region_name=region)

    async def load() -> frozenset[str]:
        response = await asyncio.to_thread(client.get_secret_value, SecretId=secret_id)
        return parse_secret(response["SecretString"])

    return load


class ApiKeyAuth:
    """The active keys, refreshed in the background from a :data:`KeyLoader`.

    Args:
        loader: Reads the keys (:func:`secrets_manager_loader`), or ``None`` for fixed ``keys``.
        keys: Fixed keys (``WHISPER_GATEWAY_API_KEYS``) when there is no loader.
        refresh_seconds: Period of re-reading through ``loader``.
        source: What the keys come from, for messages (never a key).
        first_retry_seconds: Until the first read succeeds, retries come after this many seconds,
            doubling up to ``refresh_seconds`` (:class:`~whisper_build.serving.backoff.Backoff`): a pod's
            first outbound connections can fail while the VPC CNI's network policy agent programs its
            policies (aws/aws-network-policy-agent#345), and waiting a whole refresh period would
            answer 503 for a minute.

    Keys come from one of two sources (:class:`whisper_build.serving.gateway.settings.GatewaySettings`):

    * ``WHISPER_GATEWAY_API_KEYS=key1,key2`` — comma-separated keys, for local runs (``make serve``);
    * ``WHISPER_GATEWAY_API_KEYS_SECRET=<secret ARN or name>`` — the deployed form: an AWS Secrets Manager
      secret (created by the workloads stack, ``stacks/api_keys.py``) read with the pod's EKS Pod
      Identity credentials and re-read every ``WHISPER_GATEWAY_API_KEYS_REFRESH_SECONDS``, so an added or
      removed key takes effect without a restart. Its value is JSON: an object whose string values are
      the active keys (``{"primary": "...", "next": "..."}``) or a list of keys (``["...", "..."]``).

    Neither set: authentication is off. A request to ``/v1/*`` or ``/invocations`` must carry one active
    key as ``Authorization: Bearer <key>`` (what OpenAI clients send) or ``X-Api-Key: <key>``; otherwise
    it gets 401 (OpenAI's error object with ``code: invalid_api_key`` on ``/v1/*``, the gateway's
    ``{"code", "message"}`` on ``/invocations``). ``/ping`` stays open for load-balancer health checks.
    Keys are compared in constant time (:func:`hmac.compare_digest` against every active key) and never
    logged. If the secret cannot be read, the last keys read stay active; before a first successful read
    protected routes answer 503 (fail closed).
    """

    def __init__(
        self,
        loader: KeyLoader | None = None,
        keys: Iterable[str] = (),
        refresh_seconds: float = 60.0,
        source: str = "WHISPER_GATEWAY_API_KEYS",
        first_retry_seconds: float = 1.0,
    ) -> None:
        self._loader = loader
        self._first_retries = Backoff(initial_s=min(first_retry_seconds, refresh_seconds), max_s=refresh_seconds)
        self._keys: frozenset[str] | None = None if loader is not None else frozenset(keys)
        self.refresh_seconds = refresh_seconds
        self.source = source
        self._task: asyncio.Task[None] | None = None

    @property
    def loaded(self) -> bool:
        """True once keys are known (always, for fixed keys)."""
        return self._keys is not None

    def accepts(self, candidate: str | None) -> bool:
        """True when ``candidate`` equals an active key; compares against every key in constant time."""
        if not candidate or not self._keys:
            return False
        token = candidate.encode()
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(token, key.encode())
        return matched

    async def refresh(self) -> None:
        """Read the keys once; on failure keep the previous ones and log why (without any key)."""
        if self._loader is None:
            return
        try:
            self._keys = await self._loader()
        except Exception as exc:  # noqa: BLE001 (any AWS/parse failure: keep serving with the last keys)
            log.warning("could not read API keys from %s: %s", self.source, exc)

    async def start(self) -> None:
        """First read, then re-read every ``refresh_seconds`` in a background task."""
        if self._loader is None:
            return
        await self.refresh()
        self._task = asyncio.create_task(self._refresh_forever(), name="api-key-refresh")

    async def stop(self) -> None:
        """Stop the background refresh."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_seconds if self.loaded else self._first_retries.next_delay())
            await self.refresh()


def presented_key(headers: Headers, subprotocols: Sequence[str] = ()) -> str | None:
    """The key of a request: ``Authorization: Bearer``, ``X-Api-Key``, or a WebSocket subprotocol.

    Browsers cannot set headers on a WebSocket: OpenAI's browser clients send the key as the subprotocol
    ``openai-insecure-api-key.<key>`` beside ``realtime`` (``Sec-WebSocket-Protocol``; openai-node
    ``src/realtime/websocket.ts``). ``subprotocols`` is the ASGI scope's list of them: uvicorn's wsproto
    protocol passes them there and leaves the header out of the scope's headers.
    """
    authorization = headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    if key := headers.get(API_KEY_HEADER):
        return key
    for protocol in [*headers.get("sec-websocket-protocol", "").split(","), *subprotocols]:
        name = protocol.strip()
        if name.startswith(KEY_SUBPROTOCOL_PREFIX) and len(name) > len(KEY_SUBPROTOCOL_PREFIX):
            return name[len(KEY_SUBPROTOCOL_PREFIX) :]
    return None


def _denied(path: str, status: int, message: str, retry_after: int | None = None) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="whisper"'} if status == 401 else {}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if status == 401:
        return error_response(status, ErrorCode.UNAUTHORIZED, message, headers, path, openai_code="invalid_api_key")
    return error_response(status, ErrorCode.UNAVAILABLE, message, headers, path, openai_code="service_unavailable")


class ApiKeyMiddleware:
    """ASGI middleware rejecting requests to :data:`PROTECTED_PREFIXES` without an active key.

    Runs before the body is read, so an unauthenticated upload costs no bandwidth beyond its headers.
    A WebSocket (``/v1/realtime``) without a key is refused before ``accept``: the handshake gets the
    same 401/503 response (ASGI "websocket.http.response"), or a plain 403 where the server lacks it.
    """

    def __init__(self, app: ASGIApp, auth: ApiKeyAuth, retry_after_seconds: int = 1) -> None:
        self.app = app
        self.auth = auth
        self.retry_after_seconds = retry_after_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 401/503 for a protected path without an active key; pass everything else on."""
        path = scope.get("path", "")
        if scope["type"] not in ("http", "websocket") or not path.startswith(PROTECTED_PREFIXES):
            await self.app(scope, receive, send)
            return
        if not self.auth.loaded:
            response = _denied(
                path, 503, f"API keys are not loaded yet from {self.auth.source}; retry", self.retry_after_seconds
            )
        elif not self.auth.accepts(presented_key(Headers(scope=scope), scope.get("subprotocols") or ())):
            response = _denied(
                path,
                401,
                "missing or invalid API key: send Authorization: Bearer <key> or X-Api-Key: <key> "
                "(make api-key prints how to fetch it)",
            )
        else:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await _deny_websocket(scope, receive, send, response)
            return
        await response(scope, receive, send)


async def _deny_websocket(scope: Scope, receive: Receive, send: Send, response: JSONResponse) -> None:
    """Refuse a WebSocket handshake with ``response`` (or close before accept: 403 without the extension)."""
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": response.status_code,
                    "headers": response.raw_headers})  # fmt: skip
        await send({"type": "websocket.http.response.body", "body": response.body})
    else:
        await send({"type": "websocket.close", "code": 1008})


def auth_from_settings(settings: GatewaySettings, client: Any = None) -> ApiKeyAuth | None:
    """The gateway's :class:`ApiKeyAuth` for its settings, or ``None`` when authentication is off.

    Args:
        settings: ``api_keys`` / ``api_keys_secret`` / ``api_keys_refresh_seconds`` (at most one source;
            :class:`GatewaySettings` checks that).
        client: boto3 ``secretsmanager`` client for the secret (default: built from the environment).
    """
    keys = settings.auth
    if keys.api_keys_secret:
        loader = secrets_manager_loader(keys.api_keys_secret, client)
        return ApiKeyAuth(
            loader, refresh_seconds=keys.api_keys_refresh_seconds, source=f"secret {keys.api_keys_secret}"
        )
    if keys.api_keys is not None:
        return ApiKeyAuth(keys=parse_keys_csv(keys.api_keys.get_secret_value()))
    return None
