"""The try-it page in a real browser: headless Chromium with a fake microphone, against a gateway and CPU tiny.en.

Chromium plays a WAV of espeak-ng speech as its microphone (once, then silence); the test presses Start
and Stop with the mouse like a user, and reads what the page shows. The live tab's text is held to the
file endpoint's on the same clip (WER within 0.1); a wrong key shows the refusal in words. The speakers
of the File tab: test_page_speakers_browser.py. Nothing is written into the tree.
"""

from __future__ import annotations

import subprocess
import wave
from pathlib import Path
from typing import Any

import httpx
import pytest
import speech_samples as samples
from gateway_server import running_gateway

from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.workstation.browser import Tab, chromium, chromium_path

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox"),
    pytest.mark.skipif(chromium_path() is None, reason="needs chromium (.ci/apt-packages.txt)"),
]

KEY = "sk-page-test"
TEXT = " ".join(samples.SENTENCES[:2])
WAIT = 240.0
"""Seconds any one page state may take to appear on a slow, shared CPU (a decode of tiny.en takes seconds)."""


@pytest.fixture(scope="module")
def gateway(triton_server) -> Any:
    settings = GatewaySettings(
        triton_url=triton_server.settings.grpc_url,
        api_keys=KEY,
        body_timeout_seconds=5.0,
        realtime_call_timeout_seconds=120.0,  # slack for a shared CPU: a final decode may queue behind others' work
    )
    with running_gateway(settings) as url:
        yield url


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """TEXT spoken (16 kHz mono WAV) with 0.5 s of silence before and 2.5 s after."""
    folder = tmp_path_factory.mktemp("page")
    spoken = samples.speak(TEXT, folder / "spoken.wav")
    padded = folder / "clip.wav"
    subprocess.run(["sox", str(spoken), str(padded), "pad", "0.5", "2.5"], check=True)
    return padded


def _use_key(tab: Tab, key: str) -> None:
    tab.wait_for("!document.getElementById('key-panel').hidden", WAIT)
    tab.type_text("#key", key)
    tab.click("#key-use")


def test_live_tab_transcribes_the_microphone_as_well_as_the_file_endpoint(gateway, clip: Path) -> None:
    with wave.open(str(clip)) as w:
        seconds = w.getnframes() / w.getframerate()
    with chromium(fake_microphone=clip) as tab:
        tab.navigate(f"{gateway}/")
        _use_key(tab, KEY)
        tab.wait_for("document.getElementById('status').textContent === 'Key accepted.'", WAIT)
        tab.click("#live-start")
        tab.wait_for("document.getElementById('status').textContent.startsWith('Listening')", WAIT)
        # the fake microphone plays the clip in real time from when it opened: wait for its end, on the page's clock
        tab.evaluate(f"new Promise((done) => setTimeout(done, {int((seconds + 0.5) * 1000)}))")
        assert tab.evaluate("document.querySelectorAll('#transcript li').length") >= 1, tab.console
        tab.click("#live-stop")
        tab.wait_for("document.getElementById('status').textContent === 'Stopped.'", 2 * WAIT)  # the last turn's final
        turns = tab.evaluate(
            "[...document.querySelectorAll('#transcript li')].map((li) => [li.className, li.textContent])"
        )
        error = tab.evaluate("document.getElementById('error').textContent")
    assert not error, error
    assert turns and all(kind == "final" for kind, _ in turns), turns  # each turn's deltas replaced by its final text
    live = " ".join(text for _, text in turns)
    response = httpx.post(
        f"{gateway}/v1/audio/transcriptions",
        headers={"Authorization": f"Bearer {KEY}"},
        files={"file": ("clip.wav", clip.read_bytes(), "audio/wav")},
        data={"model": "whisper-1", "response_format": "text"},
        timeout=WAIT,
    )
    response.raise_for_status()
    live_wer, file_wer = samples.wer(TEXT, live), samples.wer(TEXT, response.text)
    assert live_wer <= file_wer + 0.1, (live, response.text, live_wer, file_wer)


def test_a_wrong_key_is_refused_in_words_and_a_right_one_is_accepted(gateway) -> None:
    with chromium() as tab:
        tab.navigate(f"{gateway}/")
        assert "needs an API key" in tab.wait_for("document.getElementById('status').textContent", WAIT)
        _use_key(tab, "sk-wrong")
        message = tab.wait_for("document.getElementById('error').textContent", WAIT)
        assert "refused the API key (401)" in message
        assert not tab.evaluate("document.getElementById('key-panel').hidden")
        _use_key(tab, KEY)
        tab.wait_for("document.getElementById('key-panel').hidden", WAIT)
        assert tab.evaluate("document.getElementById('error').hidden")
        assert tab.console == [] or not any("Content Security Policy" in line for line in tab.console), tab.console
