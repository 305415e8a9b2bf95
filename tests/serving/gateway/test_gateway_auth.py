"""API-key authentication of the gateway: the official ``openai`` client and plain HTTP against a real
socket (local ``WHISPER_GATEWAY_API_KEYS``), and key rotation through AWS Secrets Manager (moto)
picked up without a restart."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import boto3
import httpx
import openai
import pytest
import speech_samples as samples
from fake_backend import FakeBackend
from gateway_server import running_gateway
from moto import mock_aws
from pydantic import ValidationError

from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.auth import ApiKeyAuth, parse_secret
from whisper_build.serving.gateway.settings import GatewaySettings

WAV = samples.encode(samples.tone(2.0, 16000), 16000, "wav_s16")
KEYS = ("key-one-3f9a", "key-two-c41e")


@pytest.fixture(scope="module")
def gateway() -> str:
    settings = GatewaySettings(api_keys=",".join(KEYS))
    with running_gateway(settings, lambda _: FakeBackend()) as url:
        yield url


def _transcribe(url: str, api_key: str) -> str:
    """Transcribe with the official client; an empty ``api_key`` sends no Authorization header at all."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=api_key or "unused", max_retries=0, timeout=30)
    omit = {} if api_key else {"extra_headers": {"Authorization": openai.Omit()}}
    return client.audio.transcriptions.create(model="whisper", file=("a.wav", WAV, "audio/wav"), **omit).text


@pytest.mark.parametrize(
    "api_key", ["", "key-three-0000", KEYS[0][:-1], KEYS[0] + "x"], ids=["none", "wrong", "prefix", "longer"]
)
def test_openai_client_without_a_valid_key_gets_401_invalid_api_key(gateway: str, api_key: str) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        _transcribe(gateway, api_key)
    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"
    assert "Authorization: Bearer" in caught.value.message


@pytest.mark.parametrize("key", KEYS)
def test_openai_client_with_an_active_key_gets_the_transcript(gateway: str, key: str) -> None:
    assert _transcribe(gateway, key) == "w0:2.0"


def test_invocations_takes_x_api_key_and_answers_401_in_its_own_shape(gateway: str) -> None:
    body = {"audio_data": base64.b64encode(WAV).decode()}
    denied = httpx.post(f"{gateway}/invocations", json=body, timeout=30)
    assert denied.status_code == 401 and denied.headers["www-authenticate"].startswith("Bearer")
    assert denied.json()["code"] == 1008 and "API key" in denied.json()["message"]
    assert KEYS[0] not in denied.text and KEYS[1] not in denied.text
    ok = httpx.post(f"{gateway}/invocations", json=body, headers={"X-Api-Key": KEYS[1]}, timeout=30)
    assert ok.status_code == 200 and ok.json()["transcribe_text"] == "w0:2.0"


def test_health_checks_stay_open_and_401s_are_counted(gateway: str) -> None:
    assert httpx.get(f"{gateway}/ping", timeout=10).status_code == 200
    assert httpx.get(f"{gateway}/live", timeout=10).status_code == 200
    httpx.post(f"{gateway}/invocations", json={}, timeout=10)
    metrics = httpx.get(f"{gateway.metrics}/metrics", timeout=10).text
    assert 'whisper_gateway_requests_total{route="/invocations",status="401"}' in metrics


def test_metrics_are_not_on_the_traffic_port(gateway: str) -> None:
    assert httpx.get(f"{gateway}/metrics", timeout=10).status_code == 404
    assert "whisper_gateway_capacity_requests" in httpx.get(f"{gateway.metrics}/metrics", timeout=10).text


def test_without_keys_authentication_is_off() -> None:
    with running_gateway(GatewaySettings(), lambda _: FakeBackend()) as url:
        assert _transcribe(url, "anything") == "w0:2.0"


def test_one_key_source_at_a_time() -> None:
    with pytest.raises(ValidationError, match="not both"):
        GatewaySettings(api_keys="a", api_keys_secret="whisper/gateway-api-keys")
    with pytest.raises(ValidationError, match="holds no key"):
        GatewaySettings(api_keys=" , ")


@pytest.mark.parametrize(
    ("value", "keys"),
    [('{"primary": "a", "next": "b"}', {"a", "b"}), ('["a", "b", "a"]', {"a", "b"})],
)
def test_secret_formats(value: str, keys: set[str]) -> None:
    assert parse_secret(value) == keys


@pytest.mark.parametrize("value", ["not json s3cr3t", '{"primary": ""}', '{"primary": 5}', "[]", '"s3cr3t"'])
def test_a_malformed_secret_is_refused_without_echoing_it(value: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_secret(value)
    assert "s3cr3t" not in str(caught.value)


def test_the_same_key_set_accepts_exact_matches_only() -> None:
    auth = ApiKeyAuth(keys=["abc", "xyz"])
    assert [auth.accepts(k) for k in ("abc", "xyz", "ab", "abcd", "", None)] == [True, True, False, False, False, False]


@pytest.fixture
def secrets_manager(monkeypatch: pytest.MonkeyPatch):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="us-east-1")


def test_key_rotation_is_picked_up_without_restart(secrets_manager) -> None:
    arn = secrets_manager.create_secret(
        Name="whisper-hyperpod/gateway-api-keys", SecretString=json.dumps({"primary": "old-key"})
    )["ARN"]
    settings = GatewaySettings(api_keys_secret=arn, api_keys_refresh_seconds=0.05)

    async def scenario() -> None:
        app = create_app(settings, lambda _: FakeBackend())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:

                async def status(key: str) -> int:
                    files = {"file": ("a.wav", WAV, "audio/wav")}
                    headers = {"Authorization": f"Bearer {key}"}
                    return (await client.post("/v1/audio/transcriptions", files=files, headers=headers)).status_code

                async def until(key: str, expected: int) -> None:
                    deadline = time.monotonic() + 10
                    while (got := await status(key)) != expected:
                        assert time.monotonic() < deadline, f"{key}: still {got}, expected {expected}"
                        await asyncio.sleep(0.05)

                assert [await status("old-key"), await status("new-key")] == [200, 401]
                # step 1 of a rotation: both keys active
                secrets_manager.put_secret_value(
                    SecretId=arn, SecretString=json.dumps({"primary": "old-key", "next": "new-key"})
                )
                await until("new-key", 200)
                assert await status("old-key") == 200
                # a broken value keeps the keys last read
                secrets_manager.put_secret_value(SecretId=arn, SecretString="{broken")
                await asyncio.sleep(0.3)
                assert [await status("old-key"), await status("new-key")] == [200, 200]
                # step 2: only the new key
                secrets_manager.put_secret_value(SecretId=arn, SecretString=json.dumps(["new-key"]))
                await until("old-key", 401)
                assert await status("new-key") == 200

    asyncio.run(scenario())


def test_an_unreadable_secret_fails_closed_with_503(secrets_manager) -> None:
    settings = GatewaySettings(api_keys_secret="whisper-hyperpod/missing", api_keys_refresh_seconds=60)

    async def scenario() -> None:
        app = create_app(settings, lambda _: FakeBackend())
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://gw") as client,
        ):
            denied = await client.post("/invocations", json={"audio_data": ""}, headers={"X-Api-Key": "k"})
            assert denied.status_code == 503 and denied.headers["retry-after"] == "1"
            assert "not loaded" in denied.json()["message"]
            assert (await client.get("/ping")).status_code == 200

    asyncio.run(scenario())


def test_make_transcribe_sends_the_local_key(gateway: str, tmp_path, monkeypatch, capsys) -> None:
    from whisper_build.workstation.cli import main

    wav = tmp_path / "a.wav"
    wav.write_bytes(WAV)
    monkeypatch.delenv("WHISPER_API_KEY", raising=False)
    monkeypatch.delenv("WHISPER_GATEWAY_API_KEYS", raising=False)
    assert main([str(wav), "--url", gateway]) == 1
    assert "gateway error 401" in capsys.readouterr().err
    monkeypatch.setenv("WHISPER_GATEWAY_API_KEYS", f"{KEYS[1]},{KEYS[0]}")
    assert main([str(wav), "--url", gateway]) == 0
    assert capsys.readouterr().out.strip() == "w0:2.0"


def test_inference_operator_workers_serve_metrics_on_the_traffic_port() -> None:
    settings = GatewaySettings(metrics_on_traffic_port=True)
    with running_gateway(settings, lambda _: FakeBackend()) as url:
        assert "whisper_gateway_capacity_requests" in httpx.get(f"{url}/metrics", timeout=10).text


def test_a_failed_first_read_is_retried_with_back_off_not_after_the_refresh_period() -> None:
    """aws/aws-network-policy-agent#345: a new pod's first connections can fail until its policies are programmed."""
    from whisper_build.serving.gateway.auth import ApiKeyAuth

    calls: list[float] = []

    async def flaky_loader() -> frozenset[str]:
        calls.append(asyncio.get_running_loop().time())
        if len(calls) < 3:
            raise ConnectionResetError("reply dropped before the policy was programmed")
        return frozenset({"key"})

    async def scenario() -> None:
        auth = ApiKeyAuth(loader=flaky_loader, refresh_seconds=600, first_retry_seconds=0.05, source="test")
        await auth.start()
        try:
            deadline = asyncio.get_running_loop().time() + 30  # slack for a busy CI machine
            while not auth.loaded and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.02)
            assert auth.loaded and auth.accepts("key")
            assert len(calls) == 3  # two retries within seconds, not after the 600 s refresh period
        finally:
            await auth.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer key-three-0000"}], ids=["none", "wrong"])
def test_a_websocket_without_a_valid_key_is_refused_at_the_handshake(gateway: str, headers: dict[str, str]) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    url = gateway.replace("http://", "ws://") + "/v1/realtime?intent=transcription"

    async def handshake(extra: dict[str, str]) -> str:
        async with connect(url, additional_headers=extra) as ws:
            return json.loads(await ws.recv())["type"]

    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(handshake(headers))
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
    assert asyncio.run(handshake({"Authorization": f"Bearer {KEYS[0]}"})) == "session.created"


def test_a_browser_sends_the_key_as_a_websocket_subprotocol_and_gets_realtime_echoed(gateway: str) -> None:
    """A browser cannot set headers on a WebSocket: OpenAI's browser clients offer ``realtime`` and
    ``openai-insecure-api-key.<key>``; the handshake answers with ``realtime`` (never the key), a wrong key is 401."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    url = gateway.replace("http://", "ws://") + "/v1/realtime?intent=transcription"

    async def handshake(key: str) -> tuple[str | None, str]:
        async with connect(url, subprotocols=["realtime", f"openai-insecure-api-key.{key}"]) as ws:  # type: ignore[list-item]
            return ws.subprotocol, json.loads(await ws.recv())["type"]

    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(handshake("key-three-0000"))
    assert refused.value.response.status_code == 401  # refused before accept
    assert asyncio.run(handshake(KEYS[1])) == ("realtime", "session.created")
