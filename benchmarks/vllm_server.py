"""``vllm serve`` as the peer server of the side-by-side benchmark: its command, its model folder, its process.

:func:`vllm_command` holds every flag (vLLM's Whisper example settings, its own defaults otherwise);
:func:`model_folder` lays the files vLLM's processor needs over the folder our ``torch`` engine loads
(the same weights, linked); :class:`VllmServer` starts it, waits for ``/health`` and ``/v1/models``, keeps
its log and start-up lines, reads its token counters and stops it. Run by :mod:`benchmarks.vllm_peer` on the
GPU machine; the tests drive it with a stand-in command. Docs: docs/benchmarks.md, "Side by side with vLLM".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from whisper_build.workstation.process import wait_until_ready

SERVED_NAME = "whisper"
"""``--served-model-name``: the ``model`` form field both servers get."""

FIXED_TOKENS_PROCESSOR = "benchmarks.vllm_fixed_tokens:FixedTokens"

STARTUP_LINES = (
    r"Model loading took .*",
    r"torch\.compile take.*",
    r"Compiling a graph .* takes .*",
    r"Graph capturing finished in .*",
    r"Available KV cache memory: .*",
    r"GPU KV cache size: .*",
    r"Maximum concurrency for .*",
    r"init engine \(profile, create kv cache, warmup model\) took .*",
    r"Overriding cudagraph_mode to .*",
    r"Model Runner V2 .*",
)
"""vLLM 0.24.0's start-up log lines kept in the result (load, compile, graph capture, KV cache)."""


def vllm_command(
    model: Path,
    port: int,
    *,
    random_weights: bool,
    gpu_memory_utilization: float,
    max_num_seqs: int | None = None,
    extra: Sequence[str] = (),
    launcher: Sequence[str] = (sys.executable, "-m", "vllm.entrypoints.cli.main"),
) -> list[str]:
    """The ``vllm serve`` command line (``python -m vllm.entrypoints.cli.main serve``: ``--target`` installs no script).

    Flags: fp16 (``--dtype float16``, ours is fp16 too), ``--max-model-len 448`` and one audio per prompt
    (vLLM's Whisper examples: examples/offline_inference/encoder_decoder_multimodal.py ``run_whisper``),
    ``--gpu-memory-utilization`` (the KV-cache share it reserves), 127.0.0.1 only, seed 0. CUDA graphs
    stay vLLM's default (for encoder-decoder models ``FULL_DECODE_ONLY``, vllm/config/vllm.py), and so do
    ``max_num_seqs`` and ``max_num_batched_tokens`` (1024 and 8192 for its API server on a GPU of ≥ 70 GiB,
    vllm/engine/arg_utils.py) unless ``max_num_seqs`` is given. Random weights: ``--load-format dummy``
    (vLLM fills the weights itself) and :data:`FIXED_TOKENS_PROCESSOR` (exact decode lengths).
    ``extra``: more flags, appended last (a flag that makes vLLM faster is tried through it).
    """
    command = [
        *launcher, "serve", str(model),
        "--host", "127.0.0.1", "--port", str(port), "--served-model-name", SERVED_NAME,
        "--dtype", "float16", "--max-model-len", "448", "--limit-mm-per-prompt", json.dumps({"audio": 1}),
        "--gpu-memory-utilization", str(gpu_memory_utilization), "--seed", "0",
    ]  # fmt: skip
    if random_weights:
        command += ["--load-format", "dummy", "--logits-processors", FIXED_TOKENS_PROCESSOR]
    if max_num_seqs is not None:
        command += ["--max-num-seqs", str(max_num_seqs)]
    return [*command, *extra]


def model_folder(source: Path, folder: Path, mel_bins: int) -> Path:
    """``folder``: ``source``'s files (weights linked, the small JSON files copied) plus what vLLM's processor loads.

    vLLM builds Whisper's processor with ``AutoProcessor.from_pretrained`` (vllm/model_executor/models/
    whisper.py, ``get_speech_to_text_config``), which needs ``preprocessor_config.json`` (the feature
    extractor; transformers 5 writes it into ``processor_config.json``) and ``tokenizer_config.json``; the
    folder our engine loads has neither, and the random-weight folder's ``config.json`` names no
    ``architectures`` (vLLM picks the model class by it: ``WhisperForConditionalGeneration`` is added). Written by
    transformers' own classes: ``WhisperFeatureExtractor(feature_size=mel_bins)`` (80 for tiny.en, 128 for
    large-v3-turbo shapes) and ``WhisperTokenizerFast`` over ``source``'s ``tokenizer.json``.
    """
    from transformers import WhisperFeatureExtractor, WhisperProcessor, WhisperTokenizerFast

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for path in source.iterdir():
        if path.suffix == ".json":
            shutil.copy(path, folder / path.name)
        elif path.is_file():
            (folder / path.name).symlink_to(path.resolve())
    config = json.loads((folder / "config.json").read_text())
    if not config.get("architectures"):  # the random-weight folder's config has none; vLLM picks its class by it
        config["architectures"] = ["WhisperForConditionalGeneration"]
        (folder / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer = WhisperTokenizerFast(tokenizer_file=str(source / "tokenizer.json"), model_max_length=448)
    processor = WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=mel_bins), tokenizer=tokenizer)
    processor.save_pretrained(str(folder))
    return folder


def prometheus_counter(text: str, name: str) -> float:
    """Sum of every sample of counter ``name`` (any labels) in Prometheus text; 0 when absent."""
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", re.MULTILINE)
    return sum(float(value) for value in pattern.findall(text))


class VllmServer:
    """``vllm serve`` in a process group of its own on 127.0.0.1, alive while the ``with`` block runs.

    ``command``: :func:`vllm_command`'s list; ``env``: the process's extra environment (vLLM's site
    directory on ``PYTHONPATH``); the log goes to ``log_path``. Attributes after start: ``url``,
    ``ready_s`` (start to ``/v1/models`` listing :data:`SERVED_NAME`), ``startup`` (:data:`STARTUP_LINES` found).

    Raises:
        whisper_build.workstation.process.NotReady: it exited or was not ready within ``timeout_s``
            (the message ends with the log's tail).
    """

    def __init__(
        self, command: list[str], port: int, log_path: Path, env: Mapping[str, str], timeout_s: float = 900.0
    ) -> None:
        self.command, self.url, self.log_path = command, f"http://127.0.0.1:{port}", log_path
        self.env, self.timeout_s = {**os.environ, **env}, timeout_s
        self.ready_s: float | None = None
        self.startup: list[str] = []
        self._process: subprocess.Popen[bytes] | None = None

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> VllmServer:
        started = time.monotonic()
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        try:
            wait_until_ready(f"{self.url}/health", self._process, self.timeout_s, "vllm serve", self.log_tail, 1.0)
            left = self.timeout_s - (time.monotonic() - started)
            wait_until_ready(f"{self.url}/v1/models", self._process, max(left, 5.0), "vllm serve", self.log_tail)
        except BaseException:
            self.stop()
            raise
        self.ready_s = round(time.monotonic() - started, 1)
        text = self.log_path.read_text(errors="replace")
        self.startup = [m.group(0) for p in STARTUP_LINES for m in re.finditer(p, text)]
        return self

    def counters(self) -> dict[str, float]:
        """Generated tokens and finished requests so far (vLLM's ``/metrics``)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:  # noqa: S310 - local URL
            text = response.read().decode()
        return {
            "generation_tokens": prometheus_counter(text, "vllm:generation_tokens_total"),
            "requests": prometheus_counter(text, "vllm:request_success_total"),
        }

    def stop(self) -> None:
        """SIGTERM to the server's process group (its engine core included), SIGKILL after 30 s."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def __exit__(self, *_: object) -> None:
        self.stop()
