"""Side by side with vLLM on one GPU: our gateway and ``vllm serve``, the same weights, audio and client.

Per model, each server runs alone on the GPU in turn, ours first (Triton + gateway, started as
:mod:`benchmarks.gpu_served` starts them), then vLLM (:mod:`benchmarks.vllm_server`). Workloads:
``tiny_en`` (tiny.en's real weights: every window file and long file once for WER, then the levels)
and, on large-v3-turbo shapes with random weights, ``dense`` (100 tokens a window) and ``mixed`` (the
seeded lengths), vLLM forced to the same counts (``forced_tokens``). One client drives both: the bench
tool's ``OpenAITarget`` on ``/v1/audio/transcriptions`` (closed loop c=1, 64; open-loop rates, fractions of
each server's own top closed level). Entry point :func:`main`; writes ``<out>/vllm_peer.json``
(:mod:`benchmarks.vllm_peer_report`). Run by ``benchmarks/vllm_peer_run.sh``.
Docs: docs/benchmarks.md, "Side by side with vLLM".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.bench.audio import load_samples
from benchmarks.bench.cli import main as bench_main
from benchmarks.bench.targets import OpenAITarget, TargetSpec
from benchmarks.gpu_served_engine import GpuSampler
from benchmarks.vllm_peer_report import level_records, merge, pooled_wer, report
from benchmarks.vllm_server import SERVED_NAME, VllmServer, model_folder, vllm_command

if TYPE_CHECKING:
    from whisper_build.serving.engines import EngineParams

MODELS = {"tiny_en": "tiny.en", "dense": "large-v3-turbo-random", "mixed": "large-v3-turbo-random"}
"""Each workload's model, in run order; one device call runs one or more of them (``--workloads next``)."""
MEL_BINS = {"tiny.en": 80, "large-v3-turbo-random": 128}


def forms(workload: str, fixed_tokens: int, timestamps: bool) -> dict[str, dict[str, str]]:
    """The form fields each server gets (beyond ``model`` and ``file``), per target.

    Both: greedy (``temperature=0``; our fallback is off in the engine, vLLM has none), English
    (``language=en``: vLLM detects the language otherwise, one more decode per request). Timestamps:
    our gateway always decodes with timestamp tokens (docs/serving.md, "One transcript per audio");
    vLLM does only for ``verbose_json`` (its prompt then ends ``<|0.00|>``, not ``<|notimestamps|>``),
    so ``timestamps`` asks for that on vLLM. Random weights: vLLM gets ``forced_tokens`` (the count the
    engine decodes: ``fixed_tokens``, or ``mixed``) and plain ``json`` (segments of random tokens are
    meaningless).
    """
    common = {"model": SERVED_NAME, "language": "en", "temperature": "0", "response_format": "json"}
    peer = dict(common)
    if workload == "tiny_en":
        peer["response_format"] = "verbose_json" if timestamps else "json"
    else:
        peer["forced_tokens"] = "mixed" if workload == "mixed" else str(fixed_tokens)
    return {"gateway": common, "vllm": peer}


def target_url(base: str, form: dict[str, str]) -> str:
    """``NAME=URL`` value of the bench tool's ``--target`` for an OpenAI route with ``form`` as the query."""
    from urllib.parse import urlencode

    return f"{base}/v1/audio/transcriptions?{urlencode(form)}"


def transcribe_all(base: str, form: dict[str, str], files: list[Path], timeout: float = 120.0) -> dict[str, str]:
    """Each file once, in turn, through the bench tool's client; file name → text ('' on an error)."""

    async def run() -> dict[str, str]:
        target = OpenAITarget(TargetSpec("check", "openai", base, tuple(form.items())), 2)
        texts = {}
        try:
            for sample in load_samples(files):
                answer = await target.transcribe(sample, timeout)
                ok = not isinstance(answer, str) and answer.status_code == 200
                texts[sample.name] = answer.json().get("text", "") if ok else ""  # type: ignore[union-attr]
        finally:
            await target.close()
        return texts

    return asyncio.run(run())


def gpu_memory_mib() -> int | None:
    """GPU 0's memory in use (nvidia-smi), or ``None`` without one."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=20,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return int(out.stdout.split()[0])


def run_levels(
    name: str, url: str, files: list[Path], args: argparse.Namespace, out: Path, gpu: GpuSampler
) -> list[dict]:
    """Closed-loop ``--concurrency`` levels, then open-loop rates (``--rate-fractions`` of the top closed level).

    Returns the bench tool's levels (``bench.json``), closed then open, each with its mean GPU SM %.
    """
    common = ["--audio", *map(str, files), "--quiet", "--warmup", "4", "--timeout", "60", "--target", f"{name}={url}"]
    bench_main([*common, "--duration", str(args.duration), "--concurrency", args.concurrency, "--out", str(out)])
    levels: list[dict] = json.loads((out / "bench.json").read_text())["levels"]
    top = max((lv for lv in levels if lv["ok"]), key=lambda lv: lv["concurrency"], default=None)
    if args.rate_fractions != "none" and top:
        rates = [round(top["requests_per_s"] * float(f), 1) for f in args.rate_fractions.split(",")]
        bench_main([
            *common, "--duration", str(args.open_duration), "--concurrency", "none", "--out", str(out / "open"),
            "--rates", ",".join(f"{r:g}" for r in rates if r > 0), "--clients", str(args.clients),
        ])  # fmt: skip
        levels += json.loads((out / "open" / "bench.json").read_text())["levels"]
    for level in levels:
        level["gpu_sm_util_pct"] = gpu.mean_sm(level.get("started_unix"), level["wall_s"])
    return levels


def measure(run: Run, target: str, base: str, workload: str, counters: Callable[[], dict] | None = None) -> None:
    """One server, one workload: WER (tiny_en: every window file and long file once), then the levels.

    Appends the records to ``run.result``; ``counters`` (vLLM): its token and request counters, read
    around the levels for the tokens it decoded per request.
    """
    args, corpus = run.args, run.corpus
    form = forms(workload, args.fixed_tokens, args.timestamps)[target]
    files = corpus.mixed if workload == "mixed" else corpus.windows
    extra: dict = {"model": run.model, "form": form}
    wer: float | None = None
    if workload == "tiny_en":
        hypotheses = transcribe_all(base, form, [*corpus.windows, *corpus.long])
        scored = pooled_wer(corpus.references, hypotheses)
        long_only = pooled_wer({n: corpus.references[n] for n in corpus.long_names}, hypotheses)
        wer = float(scored["wer"])
        extra |= {"wer_words": scored["words"], "wer_long_files": long_only["wer"]}
        run.result["transcripts"][target] = hypotheses
        print(f"{target} tiny_en WER {100 * wer:.2f} % over {scored['words']} words", flush=True)
    before = counters() if counters else None
    levels = run_levels(target, target_url(base, form), files, args, args.out / f"{target}_{workload}", run.gpu)
    if counters and before:
        after = counters()
        done = after["requests"] - before["requests"]
        extra["vllm_tokens_per_request"] = (
            round((after["generation_tokens"] - before["generation_tokens"]) / done, 2) if done else None
        )
    run.result["records"] += level_records(levels, target, workload, wer, extra)


@dataclass
class Corpus:
    """The run's audio.

    ``windows`` (single-window files: levels and WER), ``long`` (WER only), ``mixed`` (the mixed
    workload's distinct files), ``references`` (file name → spoken text).
    """

    windows: list[Path]
    long: list[Path]
    references: dict[str, str]
    mixed: list[Path] = field(default_factory=list)

    @property
    def long_names(self) -> list[str]:
        """The long files' names."""
        return [p.name for p in self.long]


@dataclass
class Run:
    """What one model's runs share: the arguments, the corpus, the GPU sampler, the result being written."""

    args: argparse.Namespace
    corpus: Corpus
    gpu: GpuSampler
    result: dict
    model: str = ""


def load_corpus(stage: Path, peer: Path) -> Corpus:
    """The staged speech (``stage/audio``, ``references.json``) and the peer's files (``peer/``, :func:`prepare`)."""
    references = dict(json.loads((stage / "references.json").read_text())["spoken"])
    peer_texts = json.loads((peer / "texts.json").read_text())
    references |= peer_texts["windows"] | peer_texts["long"]
    windows = sorted((stage / "audio").glob("*.wav")) + [peer / "windows" / n for n in sorted(peer_texts["windows"])]
    return Corpus(windows, [peer / "long" / n for n in sorted(peer_texts["long"])], references)


def prepare(peer: Path, repo: Path) -> None:
    """Write ``peer/``: the committed real-voice corpus and two long espeak-ng files of known text.

    tests/data/speakers (three Festival speakers, 32–34 s each: long files), tests/data/languages/
    en_hospital.flac (a window), ``long_0.wav`` / ``long_1.wav`` (12 sentences each); ``texts.json``.
    """
    from benchmarks.speech import SENTENCES, say

    (peer / "windows").mkdir(parents=True, exist_ok=True)
    (peer / "long").mkdir(parents=True, exist_ok=True)
    texts: dict[str, dict[str, str]] = {"windows": {}, "long": {}}
    corpus = json.loads((repo / "tests/data/languages/corpus.json").read_text())
    shutil.copy(repo / "tests/data/languages/en_hospital.flac", peer / "windows" / "en_hospital.flac")
    texts["windows"]["en_hospital.flac"] = corpus["en_hospital"]["text"]
    truth = json.loads((repo / "tests/data/speakers/truth.json").read_text())
    for name in ("male_female", "male_male", "three_speakers"):
        shutil.copy(repo / f"tests/data/speakers/{name}.flac", peer / "long" / f"{name}.flac")
        texts["long"][f"{name}.flac"] = " ".join(turn["text"] for turn in truth[name])
    for k, sentences in enumerate((SENTENCES[:12], SENTENCES[12:])):
        say(list(sentences), peer / "long" / f"long_{k}.wav")
        texts["long"][f"long_{k}.wav"] = " ".join(sentences)
    (peer / "texts.json").write_text(json.dumps(texts, indent=1))


@contextlib.contextmanager
def our_server(run: Run, params: EngineParams, label: str) -> Iterator[str]:
    """Triton (the ``torch`` engine with ``params``) and our gateway, as benchmarks/gpu_served.py starts them."""
    from benchmarks.gpu_served_stack import start_triton
    from whisper_build.workstation.process import GatewayProcess

    args, started = run.args, time.monotonic()
    triton = start_triton(params, args.max_batch, args.queue_delay_us, args.triton_env, args.out / f"triton_{label}")
    env = {"WHISPER_GATEWAY_WORKERS": str(args.gateway_workers)}
    with triton, GatewayProcess(triton.settings.grpc_url, capacity=args.gateway_capacity, settings=env) as gateway:
        server = {
            "target": "gateway",
            "model": run.model,
            "workload": label,
            "ready_s": round(time.monotonic() - started, 1),
        }
        yield gateway.url
        server["gpu_memory_mib"] = gpu_memory_mib()
        run.result["servers"].append(server)


def run_ours(run: Run, workload: str) -> None:
    """Our served path on ``workload`` (Triton started for it: the engine's mode is per workload)."""
    from benchmarks.gpu_served_engine import release_gpu_memory, workload_params
    from benchmarks.gpu_served_stack import served_models

    args = run.args
    models = served_models(args.stage / "hf-tiny-en", args.out, args.device, args.max_batch, args.fixed_tokens)
    if workload == "tiny_en":  # greedy on both sides: no temperature fallback
        params = models["tiny.en"].model_copy(update={"temperature_increment": 0.0})
    else:
        params = workload_params(models["large-v3-turbo-random"], workload, args.fixed_tokens)  # type: ignore[arg-type]
    with our_server(run, params, workload) as url:
        measure(run, "gateway", url, workload)
    release_gpu_memory()


def run_vllm(run: Run, workload: str) -> None:
    """``vllm serve`` on ``workload``'s model (random weights: ``--load-format dummy``, forced lengths)."""
    from benchmarks.gpu_whisper_random import random_model_dir
    from whisper_build.workstation.local_triton import free_ports

    args, random_weights = run.args, run.model != "tiny.en"
    tiny = args.stage / "hf-tiny-en"
    source = random_model_dir(tiny, args.out / "random-large-v3-turbo") if random_weights else tiny
    folder = model_folder(source, args.out / f"vllm-{run.model}", MEL_BINS[run.model])
    (port,) = free_ports(1)
    command = vllm_command(folder, port, random_weights=random_weights, gpu_memory_utilization=args.vllm_gpu_memory,
                           max_num_seqs=args.vllm_max_num_seqs, extra=args.vllm_arg)  # fmt: skip
    env = {"PYTHONPATH": args.vllm_pythonpath, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    with VllmServer(command, port, args.out / f"vllm_{workload}.log", env) as server:
        measure(run, "vllm", server.url, workload, server.counters)
        memory = gpu_memory_mib()
    run.result["servers"].append({"target": "vllm", "model": run.model, "workload": workload, "ready_s": server.ready_s,
                                  "startup": server.startup, "command": command, "gpu_memory_mib": memory})  # fmt: skip


def prompt_check(hf_dir: Path, corpus: Corpus) -> dict:
    """tiny.en on this CPU, greedy, with the English-only decoder prompt and with vLLM's (``<|en|><|transcribe|>`` added).

    vLLM 0.24.0 starts every Whisper decode with ``<|startoftranscript|><|{language}|><|{task}|><|notimestamps|>``
    (vllm/model_executor/models/whisper.py, ``get_generation_prompt``), English-only checkpoints included;
    openai/whisper gives those only ``<|startoftranscript|><|notimestamps|>``. Returns each prompt's pooled WER.
    """
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizerFast
    from transformers.generation.utils import GenerationMixin

    model = WhisperForConditionalGeneration.from_pretrained(str(hf_dir)).float().eval()  # fp16 on disk; CPU: fp32
    tokenizer = WhisperTokenizerFast(tokenizer_file=str(hf_dir / "tokenizer.json"))
    features = WhisperFeatureExtractor(feature_size=80)
    prompts = {"english_only": [50257, 50362], "vllm": [50257, 50258, 50358, 50362]}
    out: dict = {}
    for label, prompt in prompts.items():
        texts = {}
        for sample in load_samples([*corpus.windows, *corpus.long]):
            parts = []
            for window in sample.windows:
                mel = features(window, sampling_rate=16000, return_tensors="pt").input_features
                with torch.inference_mode():
                    ids = GenerationMixin.generate(model, input_features=mel, decoder_input_ids=torch.tensor([prompt]),
                                                   max_new_tokens=440, do_sample=False)  # fmt: skip
                parts.append(tokenizer.decode(ids[0, len(prompt) :].tolist(), skip_special_tokens=True).strip())
            texts[sample.name] = " ".join(parts)
        out[label] = pooled_wer(corpus.references, texts) | {"transcripts": texts}
    return out


_OPTIONS = (  # flag, default (its type is the option's), help
    ("--stage", Path("/tmp/gpustage/all"), "the served path's stage: hf-tiny-en/, audio/, references.json"),
    ("--peer", Path("/tmp/vllmstage/all/peer"), "the peer's files (--prepare): windows/, long/, texts.json"),
    ("--out", Path("vllm-peer-out"), "output folder (vllm_peer.json: records of earlier calls kept)"),
    ("--models", ",".join(MODELS), "comma list of tiny.en, large-v3-turbo-random"),
    ("--workloads", "dense,mixed", "random-weight workloads"),
    ("--concurrency", "1,64", "closed-loop levels"),
    ("--duration", 4.0, "seconds per closed-loop level"),
    ("--rate-fractions", "0.75,1.0,1.25,1.5", "open-loop rates: fractions of the server's own top closed level (none = skip)"),
    ("--open-duration", 4.0, "seconds of arrivals per open-loop level"),
    ("--clients", 4, "open-loop sending processes"),
    ("--fixed-tokens", 100, "dense: tokens per window, both servers"),
    ("--mixed-files", 96, "distinct files of the mixed workload"),
    ("--device", "cuda", "our engine's device"),
    ("--max-batch", 64, "ours: Triton max_batch_size = engine max batch"),
    ("--queue-delay-us", 2000, "ours: batching delay"),
    ("--gateway-workers", 4, "ours: WHISPER_GATEWAY_WORKERS"),
    ("--gateway-capacity", 128, "ours: WHISPER_GATEWAY_CAPACITY"),
    ("--vllm-gpu-memory", 0.5, "vLLM --gpu-memory-utilization"),
    ("--vllm-max-num-seqs", 0, "vLLM --max-num-seqs (0 = its default)"),
    ("--vllm-pythonpath", "/tmp/vllm-site", "PYTHONPATH of vllm serve (its site directory, then this code)"),
)  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, default, text in _OPTIONS:
        p.add_argument(flag, type=type(default), default=default, help=f"{text} (default {default})")
    p.add_argument("--timestamps", action=argparse.BooleanOptionalAction, default=True,
                   help="tiny_en: vLLM decodes with timestamp tokens as ours does (verbose_json)")  # fmt: skip
    p.add_argument("--vllm-arg", action="append", default=[], help="one more vllm serve flag (repeatable)")
    p.add_argument("--triton-env", action="append", default=[], metavar="KEY=VALUE", help="tritonserver's environment")
    p.add_argument("--prepare", action="store_true", help="only write --peer here (espeak-ng; the committed corpora)")
    p.add_argument("--prompt-check", action="store_true", help="only tiny.en on this CPU with both decoder prompts")
    p.add_argument("--table", type=Path, metavar="RESULT_JSON", help="only print the report of a result")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI (``--help``): each workload of ``--workloads``, ours then vLLM's; ``<out>/vllm_peer.json`` after each."""
    from benchmarks.gpu_served_engine import mixed_audio, versions
    from whisper_build.paths import REPO_ROOT

    args = _parser().parse_args(argv)
    if args.prepare:
        prepare(args.peer, REPO_ROOT)
        return 0
    if args.table:
        print(report(json.loads(args.table.read_text())))
        return 0
    corpus = load_corpus(args.stage, args.peer)
    if args.prompt_check:
        checked = prompt_check(args.stage / "hf-tiny-en", corpus)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "prompt_check.json").write_text(json.dumps(checked, indent=1))
        print(json.dumps({label: {k: v for k, v in c.items() if k != "transcripts"} for label, c in checked.items()}))
        return 0
    args.vllm_max_num_seqs = args.vllm_max_num_seqs or None
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "vllm_peer.json"
    existing = json.loads(path.read_text()) if path.exists() else None
    workloads = chosen_workloads(args.workloads, existing)
    if not workloads:
        print(f"every workload is measured: {path}\n" + report(existing or {"records": []}))
        return 0
    result: dict = {"versions": versions(), "settings": {k: str(v) for k, v in vars(args).items()},
                    "records": [], "servers": [], "transcripts": {}}  # fmt: skip
    with GpuSampler(args.out / "dmon.txt") as gpu:
        for workload in workloads:
            run = Run(args, corpus, gpu, result, MODELS[workload])
            if workload == "mixed":
                audio = sorted((args.stage / "audio").glob("*.wav"))
                corpus.mixed = mixed_audio(audio, args.out / "mixed-audio", args.mixed_files)
            run_ours(run, workload)
            run_vllm(run, workload)
            path.write_text(json.dumps(merge(existing, result, workloads), indent=1))
    print(report(merge(existing, result, workloads)))
    return 0


def chosen_workloads(text: str, existing: dict | None) -> list[str]:
    """``--workloads``: the listed ones, or ``next``: the first of :data:`MODELS` with no record yet ([] once all have).

    Raises:
        SystemExit: an unknown workload.
    """
    if text != "next":
        if unknown := set(text.split(",")) - set(MODELS):
            raise SystemExit(f"--workloads: unknown {', '.join(sorted(unknown))}; give {', '.join(MODELS)} or next")
        return text.split(",")
    measured = {r["workload"] for r in (existing or {}).get("records", [])}
    return [w for w in MODELS if w not in measured][:1]


if __name__ == "__main__":
    raise SystemExit(main())
