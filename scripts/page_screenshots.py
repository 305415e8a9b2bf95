#!/usr/bin/env python3
"""Screenshots of the try-it page's two tabs, for the docs: ``make page-screenshots``.

Starts what ``make serve`` starts (local Triton with CPU tiny.en and the speaker model, and the
gateway) on free 127.0.0.1 ports, then drives headless Chromium (:mod:`whisper_build.workstation.browser`):
the Live tab hears espeak-ng speech through the fake microphone, the File tab transcribes
``tests/data/speakers/male_female.flac`` as ``diarized_json``. Writes ``docs/page-live.png`` and
``docs/page-file.png`` (``--out`` to change the folder). Needs ``chromium``, ``espeak-ng`` and ``sox``
(.ci/apt-packages.txt). Docs: docs/gateway.md, "The page".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from whisper_build.paths import REPO_ROOT
from whisper_build.workstation.browser import Tab, chromium
from whisper_build.workstation.ports import free_ports

SPEECH = "Good morning everyone. The page shows each turn as soon as it is spoken, then its final text."
DIALOGUE = REPO_ROOT / "tests" / "data" / "speakers" / "male_female.flac"
WAIT = 600.0


def _serve(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    http, grpc, metrics, port, gateway_metrics = free_ports(5)
    env = {**os.environ, "WHISPER_GATEWAY_PORT": str(port), "WHISPER_GATEWAY_METRICS_PORT": str(gateway_metrics),
           "WHISPER_TRITON_SPEAKER__WARMUP": "false"}  # fmt: skip
    command = [sys.executable, "-m", "whisper_build.workstation.local_triton", "--http-port", str(http),
               "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--workdir", str(workdir), "--gateway"]  # fmt: skip
    log = (workdir / "serve.log").open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"make serve's launcher exited: {(workdir / 'serve.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/ping", timeout=5).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    process.terminate()
    raise SystemExit("the gateway did not become ready")


def _live(url: str, speech: Path, out: Path) -> None:
    with chromium(fake_microphone=speech) as tab:
        tab.navigate(f"{url}/")
        tab.wait_for("document.getElementById('status').textContent === 'Ready.'", WAIT)
        tab.click("#live-start")
        tab.wait_for("!!document.querySelector('#transcript li.final, #transcript li.failed')", WAIT)
        tab.click("#live-stop")
        tab.wait_for("document.getElementById('status').textContent === 'Stopped.'", WAIT)
        _shoot(tab, out / "page-live.png")


def _file(url: str, out: Path) -> None:
    with chromium() as tab:
        tab.navigate(f"{url}/")
        tab.wait_for("document.getElementById('status').textContent === 'Ready.'", WAIT)
        tab.click("#tab-file")
        tab.set_files("#file", [DIALOGUE])
        tab.click("#file-send")
        tab.wait_for(
            "document.getElementById('result').dataset.done || document.getElementById('error').textContent", WAIT
        )
        _shoot(tab, out / "page-file.png")


def _shoot(tab: Tab, path: Path) -> None:
    error = tab.evaluate("document.getElementById('error').textContent")
    if error:
        print(f"warning: the page shows an error in {path.name}: {error}", file=sys.stderr)
    tab.screenshot(path)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    """Start the local stack, write both screenshots, stop the stack; 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs", help="folder of the PNG files")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="page-shots-") as tmp:
        workdir = Path(tmp)
        speech = workdir / "speech.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "130", "-w", str(workdir / "raw.wav"), SPEECH], check=True)
        subprocess.run(["sox", str(workdir / "raw.wav"), "-r", "16000", str(speech), "pad", "0.5", "2.5"], check=True)
        process, url = _serve(workdir)
        try:
            _live(url, speech, args.out)
            _file(url, args.out)
        finally:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
