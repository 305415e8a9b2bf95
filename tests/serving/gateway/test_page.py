"""The try-it page's route: the document and its files, the security headers, the setting that turns it off.

The page itself is tested in a browser (test_page_browser.py); these check what a browser cannot be
trusted to report: that nothing is loaded from elsewhere and nothing inline needs the policy relaxed.
"""

from __future__ import annotations

import re
from importlib import resources

import pytest
from fake_backend import FakeBackend
from fastapi.testclient import TestClient

from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.routes.page import ASSETS, CONTENT_SECURITY_POLICY
from whisper_build.serving.gateway.settings import GatewaySettings


def _client(**settings: object) -> TestClient:
    return TestClient(create_app(GatewaySettings(**settings), lambda _: FakeBackend()))  # type: ignore[arg-type]


def test_the_page_and_its_files_are_served_with_a_strict_policy_and_no_key() -> None:
    with _client(api_keys="sk-page") as client:  # the page is open; the API it calls needs the key
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert "default-src 'none'" in CONTENT_SECURITY_POLICY and "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
        assert page.headers["x-content-type-options"] == "nosniff"
        for name, media_type in ASSETS.items():
            asset = client.get(f"/page/{name}")
            assert asset.status_code == 200 and asset.headers["content-type"] == media_type, name
        assert client.get("/page/../app.py").status_code == 404
        assert client.get("/page/__init__.py").status_code == 404
        assert client.get("/v1/models").status_code == 401


def test_the_setting_turns_the_page_off() -> None:
    with _client(page=False) as client:
        assert client.get("/").status_code == 404
        assert client.get("/page/page.js").status_code == 404


@pytest.mark.parametrize("name", sorted(ASSETS))
def test_no_file_loads_from_another_origin_or_needs_inline_code(name: str) -> None:
    text = resources.files("whisper_build.serving.gateway.page").joinpath(name).read_text()
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", text), name  # same origin only
    assert not re.search(r"\son[a-z]+\s*=", text), name  # no inline handlers (onclick=...)
    if name == "index.html":
        assert re.findall(r"<script[^>]*>", text) == ['<script src="/page/page.js" defer>']
        assert "<style" not in text and " style=" not in text
        assert 'aria-live="polite"' in text
