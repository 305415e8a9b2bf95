"""``python -m whisper_build.workstation.cli FILE``: send an audio file to the gateway and print the text.

The gateway URL defaults to ``http://<WHISPER_GATEWAY_HOST>:<WHISPER_GATEWAY_PORT>`` (the same
settings the gateway reads). Exit status: 0 success, 1 the gateway answered an error, 2 bad
arguments or the file cannot be read, 3 the gateway cannot be reached.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

from pydantic import ValidationError

from whisper_build.serving.gateway.settings import GatewaySettings


def _default_url() -> str:
    """``http://HOST:PORT`` from the gateway's settings (environment), defaults if unset/invalid."""
    try:
        settings = GatewaySettings()
    except ValidationError:
        settings = GatewaySettings.model_construct()
    return f"http://{settings.host}:{settings.port}"


def transcribe_file(
    path: Path, url: str, prompt: str = "", language: str | None = None, timeout: float = 600.0
) -> dict:
    """POST ``path`` to ``{url}/invocations`` and return the decoded JSON answer.

    Raises:
        OSError: the file cannot be read.
        urllib.error.HTTPError: the gateway answered 4xx/5xx (body in the error's ``read()``).
        urllib.error.URLError: the gateway cannot be reached.
    """
    audio = base64.b64encode(path.read_bytes()).decode("ascii")
    payload: dict[str, str] = {"audio_data": audio, "whisper_prompt": prompt}
    if language:
        payload["language"] = language
    request = urllib.request.Request(
        f"{url.rstrip('/')}/invocations",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (URL from user/settings)
        return json.loads(response.read())


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.workstation.cli", description="Transcribe an audio file with the gateway."
    )
    parser.add_argument("file", type=Path, help="audio file (WAV, FLAC, MP3, OGG, M4A...)")
    parser.add_argument("--url", default=None, help="gateway base URL (default from settings)")
    parser.add_argument("--prompt", default="", help="context text or special-token prompt")
    parser.add_argument("--language", default=None, help="Whisper language code, e.g. en")
    parser.add_argument("--json", action="store_true", help="print the whole JSON answer")
    args = parser.parse_args(argv)
    url = args.url or _default_url()
    if args.file.is_file() and args.file.stat().st_size == 0:
        print(f"{args.file} is empty: nothing to transcribe", file=sys.stderr)
        return 2
    try:
        answer = transcribe_file(args.file, url, args.prompt, args.language)
    except urllib.error.HTTPError as exc:
        print(f"gateway error {exc.code}: {exc.read().decode('utf-8', 'replace')}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"cannot reach the gateway at {url}: {reason} (is `make serve` running?)", file=sys.stderr)
        return 3
    except OSError as exc:
        print(f"cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(json.dumps(answer, indent=2) if args.json else answer.get("transcribe_text", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
