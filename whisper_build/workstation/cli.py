"""``python -m whisper_build.workstation.cli FILE``: send an audio file to the gateway and print the text.

The gateway URL defaults to ``http://<WHISPER_GATEWAY_HOST>:<WHISPER_GATEWAY_PORT>`` (the same
settings the gateway reads). With ``--sagemaker-endpoint NAME`` the same request goes to the
SageMaker endpoint the HyperPod inference operator registered (``serving.target:
inference_operator``) through boto3's ``sagemaker-runtime`` ``InvokeEndpoint``, signed with the
caller's AWS credentials (IAM auth; no API key). Exit status: 0 success, 1 the gateway or endpoint
answered an error, 2 bad arguments or the file cannot be read, 3 the gateway or endpoint cannot be
reached (or no AWS credentials). For the gateway the API key is ``--api-key``, else
``WHISPER_API_KEY``, else the first key of ``WHISPER_GATEWAY_API_KEYS`` (so
``WHISPER_GATEWAY_API_KEYS=k make serve`` and ``WHISPER_GATEWAY_API_KEYS=k make transcribe`` work
together); none is sent when all are unset. ``--stream`` (a long file: text as it is made, exempt
from the request timeout) and ``--translate`` (to English, multilingual models) go through the
official ``openai`` client to ``/v1/audio/*`` (docs/gateway.md, "Streaming").
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from whisper_build.serving.gateway.settings import GatewaySettings


def _default_url() -> str:
    """``http://HOST:PORT`` from the gateway's settings (environment), defaults if unset/invalid."""
    try:
        settings = GatewaySettings()
    except ValidationError:
        settings = GatewaySettings.model_construct()
    return f"http://{settings.server.host}:{settings.server.port}"


def invocation_body(path: Path, prompt: str = "", language: str | None = None) -> bytes:
    """The ``/invocations`` request body for ``path``: ``{"audio_data": <base64>, "whisper_prompt": …}``.

    Raises:
        OSError: the file cannot be read.
    """
    audio = base64.b64encode(path.read_bytes()).decode("ascii")
    payload: dict[str, str] = {"audio_data": audio, "whisper_prompt": prompt}
    if language:
        payload["language"] = language
    return json.dumps(payload).encode()


def default_api_key() -> str | None:
    """``WHISPER_API_KEY``, else the first of ``WHISPER_GATEWAY_API_KEYS`` (comma-separated), else ``None``."""
    if os.environ.get("WHISPER_API_KEY"):
        return os.environ["WHISPER_API_KEY"]
    keys = [key.strip() for key in os.environ.get("WHISPER_GATEWAY_API_KEYS", "").split(",") if key.strip()]
    return keys[0] if keys else None


def transcribe_file(
    path: Path,
    url: str,
    prompt: str = "",
    language: str | None = None,
    timeout: float = 600.0,
    api_key: str | None = None,
) -> dict:
    """POST ``path`` to ``{url}/invocations`` (with ``X-Api-Key: api_key`` if given) and return the decoded JSON answer.

    Raises:
        OSError: the file cannot be read.
        urllib.error.HTTPError: the gateway answered 4xx/5xx (body in the error's ``read()``).
        urllib.error.URLError: the gateway cannot be reached.
    """
    request = urllib.request.Request(
        f"{url.rstrip('/')}/invocations",
        data=invocation_body(path, prompt, language),
        headers={"Content-Type": "application/json", **({"X-Api-Key": api_key} if api_key else {})},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (URL from user/settings)
        return json.loads(response.read())


def transcribe_with_sagemaker(
    path: Path, endpoint: str, client: Any, prompt: str = "", language: str | None = None
) -> dict:
    """``InvokeEndpoint`` of ``endpoint`` with the ``/invocations`` body; returns the decoded JSON answer.

    The operator forwards the body to the worker's ``/invocations`` (``invocationEndpoint``), so the
    request and answer are the gateway's contract.

    Args:
        path: Audio file (any format the gateway decodes).
        endpoint: SageMaker endpoint name (the ``InferenceEndpointConfig``'s ``endpointName``).
        client: A boto3 ``sagemaker-runtime`` client (signs the request with the caller's credentials).
        prompt: ``whisper_prompt`` of the request.
        language: Whisper language code, or ``None`` to detect it.

    Raises:
        OSError: the file cannot be read.
        botocore.exceptions.ClientError: the endpoint answered an error (``ModelError`` carries the
            gateway's status and message), or is unknown / not allowed.
        botocore.exceptions.BotoCoreError: no credentials, or the endpoint cannot be reached.
    """
    response = client.invoke_endpoint(
        EndpointName=endpoint,
        ContentType="application/json",
        Accept="application/json",
        Body=invocation_body(path, prompt, language),
    )
    return json.loads(response["Body"].read())


def openai_text(
    path: Path,
    url: str,
    api_key: str | None,
    *,
    translate: bool,
    out: Any,
    prompt: str = "",
    language: str | None = None,
) -> None:
    """Write ``path``'s text to ``out`` through ``/v1/audio/*`` with the ``openai`` client.

    ``translate`` False: ``/v1/audio/transcriptions`` with ``stream=true``, each
    ``transcript.text.delta`` written as it arrives; True: ``/v1/audio/translations`` (English text,
    ``language`` not sent: OpenAI's translations take none). A newline ends it.

    Raises:
        openai.APIStatusError: the gateway answered 4xx/5xx.
        openai.APIConnectionError: the gateway cannot be reached.
        OSError: the file cannot be read.
    """
    import openai

    client = openai.OpenAI(base_url=f"{url.rstrip('/')}/v1", api_key=api_key or "unused", max_retries=0)
    with path.open("rb") as audio:
        if translate:
            # openai marks the method deprecated for ITS hosted endpoint (whisper-1, shut down 2027-02-26);
            # this gateway serves /v1/audio/translations itself (docs/gateway.md): the warning is not the user's
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                translation = client.audio.translations.create(
                    model="whisper-1", file=audio, prompt=prompt or openai.omit
                )
            out.write(translation.text)
        else:
            events = client.audio.transcriptions.create(
                model="whisper-1",
                file=audio,
                stream=True,
                prompt=prompt or openai.omit,
                language=language or openai.omit,
            )
            for event in events:
                if event.type == "transcript.text.delta":
                    out.write(event.delta)
                    out.flush()
    out.write("\n")


def _openai_mode(args: argparse.Namespace, url: str) -> int:
    """Run ``--stream`` / ``--translate``; the exit status."""
    import openai

    try:
        openai_text(args.file, url, args.api_key or default_api_key(), translate=args.translate, out=sys.stdout,
                    prompt=args.prompt, language=args.language)  # fmt: skip
    except openai.APIStatusError as exc:
        print(f"gateway error {exc.status_code}: {exc.message}", file=sys.stderr)
        return 1
    except openai.APIConnectionError:
        print(f"cannot reach the gateway at {url} (is `make serve` running?)", file=sys.stderr)
        return 3
    except OSError as exc:
        print(f"cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def _sagemaker(args: argparse.Namespace, client: Any) -> tuple[int, dict | None]:
    """Run the ``--sagemaker-endpoint`` mode; (exit status, answer or None)."""
    from botocore.exceptions import BotoCoreError, ClientError

    if client is None:
        import boto3

        client = boto3.client("sagemaker-runtime", region_name=args.region)
    try:
        return 0, transcribe_with_sagemaker(args.file, args.sagemaker_endpoint, client, args.prompt, args.language)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = exc.response.get("OriginalStatusCode")
        detail = f" (model answered {status})" if status else ""
        print(
            f"SageMaker endpoint {args.sagemaker_endpoint} error {error.get('Code')}{detail}: {error.get('Message')}",
            file=sys.stderr,
        )
        return 1, None
    except BotoCoreError as exc:
        print(f"cannot call SageMaker endpoint {args.sagemaker_endpoint}: {exc}", file=sys.stderr)
        return 3, None


def main(argv: list[str] | None = None, sagemaker_client: Any = None) -> int:
    """Command-line entry point; returns the exit status.

    Args:
        argv: Arguments (default ``sys.argv[1:]``).
        sagemaker_client: A ``sagemaker-runtime`` client for ``--sagemaker-endpoint`` (tests pass a
            stubbed one); default ``boto3.client("sagemaker-runtime", region_name=--region)``.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    _refuse_conflicts(parser, args)
    url = args.url or _default_url()
    if args.file.is_file() and args.file.stat().st_size == 0:
        print(f"{args.file} is empty: nothing to transcribe", file=sys.stderr)
        return 2
    if args.stream or args.translate:
        return _openai_mode(args, url)
    if args.sagemaker_endpoint:
        if not args.file.is_file():
            print(f"cannot read {args.file}: no such file", file=sys.stderr)
            return 2
        status, result = _sagemaker(args, sagemaker_client)
        if result is not None:
            print(json.dumps(result, indent=2) if args.json else result.get("transcribe_text", ""))
        return status
    return _invocations_mode(args, url)


def _parser() -> argparse.ArgumentParser:
    """The command's arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.workstation.cli", description="Transcribe an audio file with the gateway."
    )
    parser.add_argument("file", type=Path, help="audio file (WAV, FLAC, MP3, OGG, M4A...)")
    parser.add_argument("--url", default=None, help="gateway base URL (default from settings)")
    parser.add_argument("--prompt", default="", help="context text or special-token prompt")
    parser.add_argument("--language", default=None, help="Whisper language code, e.g. en")
    parser.add_argument("--json", action="store_true", help="print the whole JSON answer")
    parser.add_argument(
        "--stream",
        action="store_true",
        help="stream the text as it is made (stream=true on /v1/audio/transcriptions; for files that outlast "
        "the request timeout)",
    )
    parser.add_argument("--translate", action="store_true", help="translate to English (/v1/audio/translations)")
    parser.add_argument(
        "--sagemaker-endpoint",
        metavar="NAME",
        default=None,
        help="call this SageMaker endpoint (serving.target inference_operator) with your AWS credentials "
        "instead of a gateway URL",
    )
    parser.add_argument("--region", default=None, help="AWS region of the endpoint (default: AWS config)")
    parser.add_argument(
        "--api-key", default=None, help="gateway API key (default: WHISPER_API_KEY / WHISPER_GATEWAY_API_KEYS)"
    )
    return parser


def _refuse_conflicts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with the usage (status 2) for options that do not go together."""
    openai_mode = args.stream or args.translate
    if args.sagemaker_endpoint and args.url:
        parser.error("give --url or --sagemaker-endpoint, not both")
    openai_mode = args.stream or args.translate
    if openai_mode and (args.sagemaker_endpoint or args.json):
        parser.error("--stream and --translate print text from the gateway: leave out --sagemaker-endpoint and --json")
    if args.translate and args.language:
        parser.error("--translate takes no --language (the source language is detected; the text is English)")
    if args.stream and args.translate:
        parser.error("give --stream or --translate, not both (translations are not streamed)")


def _invocations_mode(args: argparse.Namespace, url: str) -> int:
    """``/invocations`` on the gateway at ``url``: print the text (or the JSON answer); the exit status."""
    try:
        answer = transcribe_file(args.file, url, args.prompt, args.language, api_key=args.api_key or default_api_key())
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", "replace")
        print(f"gateway error {exc.code}: {body}", file=sys.stderr)
        if exc.code == 413 and "stream=true" in body:  # audio_too_long: the CLI streams with --stream
            print('stream it instead: make transcribe FILE="…" STREAM=1 (or --stream)', file=sys.stderr)
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
