"""GPU live sessions through the served path: ``benchmarks.live`` against gateway → Triton → ``torch`` engine.

For each model of ``benchmarks.gpu_served_stack.served_models`` (``tiny.en`` real weights: latency and WER;
``large-v3-turbo-random``: random weights, fixed decode length, the gateway's test-only confirmation
rule: load only) Triton and the gateway are started once and N = 8, 16, 32, 64 sessions stream the
staged speech at real-time pace. Run by ``benchmarks/gpu_served_run.sh --live`` on the GPU machine;
``--prepare`` writes the speech here (espeak-ng); ``--table`` prints a result file.
Docs: docs/benchmarks.md, "Live sessions (`make bench-live`)".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks import live

if TYPE_CHECKING:
    from whisper_build.serving.engines import EngineParams

KEY = "sk-gpu-live"


def prepare(stage: Path, sentences: int) -> None:
    """Write ``stage/live/``: the first ``sentences`` sentences as 24 kHz PCM16 and their text and spans."""
    folder = stage / "live"
    folder.mkdir(parents=True, exist_ok=True)
    pcm, text, spans = live.utterance(folder, sentences)
    for wav in folder.glob("*.wav"):
        wav.unlink()
    (folder / "speech.pcm").write_bytes(pcm)
    (folder / "speech.json").write_text(json.dumps({"text": text, "spans": spans}))


def load(stage: Path) -> tuple[bytes, str, list[tuple[float, float]]]:
    """The speech :func:`prepare` staged."""
    meta = json.loads((stage / "live" / "speech.json").read_text())
    return (stage / "live" / "speech.pcm").read_bytes(), meta["text"], [tuple(s) for s in meta["spans"]]


def gateway_env(weights: str, max_sessions: int, workers: int) -> dict[str, str]:
    """The gateway's settings: API key, session slots; random weights also get the load-test confirmation rule."""
    env = {
        "WHISPER_GATEWAY_API_KEYS": KEY,
        "WHISPER_GATEWAY_WORKERS": str(workers),
        "WHISPER_GATEWAY_REALTIME_MAX_SESSIONS": str(max_sessions),
    }
    if weights == "random":
        env["WHISPER_GATEWAY_REALTIME_LOAD_TEST_CONFIRMATION"] = "true"
    return env


def run_model(name: str, params: EngineParams, args: argparse.Namespace, speech: tuple) -> list[dict]:
    """Start Triton + gateway for ``params`` and run every session count; the rows."""
    from benchmarks.gpu_served_stack import start_triton
    from whisper_build.workstation.process import GatewayProcess

    triton = start_triton(params, args.max_batch, args.queue_delay_us, args.triton_env, args.work / f"triton_{name}")
    weights = "random" if params.random_weights_fixed_tokens else "real"
    sessions = [int(n) for n in args.sessions.split(",")]
    env = gateway_env(weights, 2 * max(sessions), args.gateway_workers)
    with triton, GatewayProcess(triton.settings.grpc_url, capacity=2 * max(sessions), settings=env) as gateway:
        rows = asyncio.run(live.run(gateway.url, KEY, sessions, speech, weights))
    return [{**row, "model": name} for row in rows]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The CLI's arguments (``--help``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stage", type=Path, default=Path("/tmp/gpustage/all"), help="folder with live/ and hf-tiny-en/")
    p.add_argument("--prepare", action="store_true", help="only write --stage/live (here, with espeak-ng)")
    p.add_argument("--sentences", type=int, default=6, help="sentences of benchmarks/speech.py (--prepare)")
    p.add_argument("--table", type=Path, metavar="RESULT_JSON", help="only print the table of a result file")
    p.add_argument("--out", type=Path, default=Path("gpu-live-out"), help="gpu_live.json goes here")
    p.add_argument("--work", type=Path, default=Path("/tmp/gpu-live"), help="random model, Triton workdirs")
    p.add_argument("--device", default="cuda")
    p.add_argument("--models", default="tiny.en,large-v3-turbo-random")
    p.add_argument("--sessions", default="8,16,32,64", help="comma-separated concurrent session counts")
    p.add_argument("--max-batch", type=int, default=64, help="Triton max_batch_size = engine max batch")
    p.add_argument("--queue-delay-us", type=int, default=2000, help="Triton dynamic batcher max queue delay")
    p.add_argument(
        "--fixed-tokens", type=int, default=32, help="tokens every update of the random-weight model decodes"
    )
    p.add_argument("--gateway-workers", type=int, default=4, help="WHISPER_GATEWAY_WORKERS")
    p.add_argument("--triton-env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of the tritonserver process (repeatable)")  # fmt: skip
    args = p.parse_args(argv)
    if any(int(n) < 1 for n in args.sessions.split(",")):
        p.error("--sessions: positive integers, e.g. 8,16,32,64")
    return args


def main(argv: list[str] | None = None) -> int:
    """Prepare, print a table, or run every model and write ``--out/gpu_live.json`` after each model."""
    args = parse_args(argv)
    if args.prepare:
        prepare(args.stage, args.sentences)
        return 0
    if args.table:
        print(live.table(json.loads(args.table.read_text())["rows"]))
        return 0
    from benchmarks.gpu_served_stack import served_models

    args.out.mkdir(parents=True, exist_ok=True)
    models = served_models(args.stage / "hf-tiny-en", args.work, args.device, args.max_batch, args.fixed_tokens)
    speech, rows = load(args.stage), []
    for name in args.models.split(","):
        started = time.monotonic()
        rows += run_model(name, models[name], args, speech)
        print(f"{name}: {time.monotonic() - started:.0f} s", flush=True)
        (args.out / "gpu_live.json").write_text(json.dumps({"rows": rows}, indent=1))
    print(live.table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
