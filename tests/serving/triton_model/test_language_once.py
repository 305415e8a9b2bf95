"""One language per request, set by the shared decoding layer for every engine (fake engine, no runtime).

Also the pure pieces the torch and TensorRT-LLM engines detect with (``best_language``,
``read_language_outputs`` against a fake runner's return dict); those engines cannot run here.
"""

from __future__ import annotations

import numpy as np
import pytest
from fake_engine import Decoded, ScriptedEngine

from whisper_build.serving import contract
from whisper_build.serving.engines.tensorrt_llm_engine import read_language_outputs
from whisper_build.serving.engines.tokens import best_language, language_token_ids
from whisper_build.serving.prompt import LANGUAGE_CODES
from whisper_build.serving.triton_model.batching import parse_request, run_batch
from whisper_build.serving.triton_model.decoding import DecodingPolicy

LOUD, QUIET = 0.5, 0.0


def _engine(detect, multilingual: bool = True) -> ScriptedEngine:
    """Answers "<language>|<task>" per window; ``detect(window)`` is its language detector."""
    engine = ScriptedEngine(lambda _a, p, _t: Decoded([f"{p.language}|{p.task}"]), multilingual=multilingual)
    engine.detect = detect
    return engine


def _request(*levels: float, prefix: bytes = b""):
    # 0.1 s windows: ``level`` for 75 ms, then a 25 ms pause (a window ending in speech loses its last word)
    wav = np.array([[level] * 1200 + [0.0] * 400 for level in levels], dtype=np.float32)
    return parse_request(
        {contract.WAV.name: wav, contract.TEXT_PREFIX.name: np.array([[prefix]] * len(levels), dtype=object)}
    )


def test_one_detection_on_the_first_non_silent_window_sets_every_window_of_the_request():
    # window 0 is silent, window 1 is detected as Spanish, window 2 would be detected as German
    detected = iter(["es", "de"])
    engine = _engine(lambda _w: next(detected))
    [result] = run_batch(engine, [_request(QUIET, LOUD, LOUD)])
    assert len(engine.detections) == 1 and len(engine.detections[0]) == 1  # one window, once
    assert [w.text for w in result] == ["", "es|transcribe", "es|transcribe"]
    assert [w.language for w in result[1:]] == ["es", "es"]


def test_detections_of_all_requests_of_a_batch_are_one_engine_call():
    languages = {1: "fr", 2: "de"}
    engine = _engine(lambda w: languages[round(float(w[0]) * 10)])
    results = run_batch(
        engine, [_request(0.1, 0.2), _request(0.2, 0.1), _request(LOUD, prefix=b"<|startoftranscript|><|ja|>")]
    )
    assert [len(call) for call in engine.detections] == [2]  # the third request named its language
    assert [[w.text for w in r] for r in results] == [
        ["fr|transcribe", "fr|transcribe"],
        ["de|transcribe", "de|transcribe"],
        ["ja|transcribe"],
    ]


def test_a_requested_language_is_never_replaced_and_translate_keeps_the_source_language_token():
    engine = _engine(lambda _w: "es")
    [named, translated] = run_batch(
        engine,
        [
            _request(LOUD, prefix=b"<|startoftranscript|><|de|>"),
            _request(LOUD, prefix=b"<|startoftranscript|><|translate|>"),
        ],
    )
    assert named[0].text == "de|transcribe"
    assert translated[0].text == "es|translate"  # the detected source language, the translate task


def test_default_language_only_where_the_engine_cannot_detect():
    engine = _engine(lambda _w: None)
    [result] = run_batch(engine, [_request(LOUD, LOUD)], DecodingPolicy(default_language="pt"))
    assert [w.text for w in result] == ["pt|transcribe", "pt|transcribe"]


def test_silent_requests_and_english_only_models_are_not_asked():
    engine = _engine(lambda _w: "es")
    [silent] = run_batch(engine, [_request(QUIET, QUIET)])
    assert engine.detections == [] and [w.text for w in silent] == ["", ""]
    english = _engine(lambda _w: pytest.fail("an English-only model is never asked"), multilingual=False)
    [result] = run_batch(english, [_request(LOUD)])
    assert result[0].text == "None|transcribe" and result[0].language == "en"


def test_a_detector_returning_the_wrong_count_fails_the_batch():
    engine = _engine(lambda _w: "es")
    engine.detect_language = lambda audio: []  # type: ignore[method-assign]
    [result] = run_batch(engine, [_request(LOUD)])
    assert isinstance(result, RuntimeError) and "detected 0 languages for 1 windows" in str(result)


# --- the pieces the torch and TensorRT-LLM engines detect with -------------------------------

VOCAB = {f"<|{code}|>": 50259 + k for k, code in enumerate(LANGUAGE_CODES[:99])}  # base: no <|yue|>
LANGUAGE_IDS = language_token_ids(VOCAB.get)


def _logits(winner: int, runner_up: int | None = None) -> np.ndarray:
    logits = np.zeros(51865, dtype=np.float32)
    logits[winner] = 5.0
    if runner_up is not None:
        logits[runner_up] = 9.0
    return logits


def test_language_token_ids_reads_the_models_language_tokens():
    assert len(LANGUAGE_IDS) == 99 and LANGUAGE_IDS[50259] == "en" and LANGUAGE_IDS[50262] == "es"


def test_best_language_masks_everything_but_language_tokens():
    # a text token (id 400) scores higher than any language: masked out, as openai/whisper does
    assert best_language(_logits(VOCAB["<|de|>"], runner_up=400), LANGUAGE_IDS) == "de"


def test_tensorrt_llm_language_from_context_logits_else_the_generated_token():
    sot = 50258
    with_logits = {
        "output_ids": np.array([[[sot, 50262]], [[sot, 50265]]]),
        "sequence_lengths": np.array([[2], [2]]),
        "context_logits": np.stack([_logits(VOCAB["<|fr|>"], 11), _logits(VOCAB["<|ja|>"])])[:, None, :],
    }
    assert read_language_outputs(with_logits, LANGUAGE_IDS) == ["fr", "ja"]  # the logits decide
    without = {"output_ids": np.array([[[sot, 50262, 50257]], [[sot, 400, 50257]]]), "sequence_lengths": [[2], [2]]}
    assert read_language_outputs(without, LANGUAGE_IDS) == ["es", None]  # a text token: cannot tell


def test_an_english_only_model_refusing_a_translation_names_how_to_serve_a_multilingual_one():
    english = _engine(lambda _w: "es", multilingual=False)
    [result] = run_batch(english, [_request(LOUD, prefix=b"<|startoftranscript|><|translate|>")])
    assert "it cannot translate" in str(result) and "make serve MODEL=base" in str(result)
    [result] = run_batch(english, [_request(LOUD, prefix=b"<|startoftranscript|><|de|>")])
    assert "language 'de' is not supported" in str(result) and "make serve MODEL=base" in str(result)
