"""Pure parts of benchmarks/gpu_whisper_random.py (the GPU run itself needs torch + a GPU)."""

from __future__ import annotations

import pytest

from benchmarks.gpu_whisper_random import EOT_ID, MODEL_SHAPES, PROMPT_IDS, summarize_batch, whisper_v3_vocabulary


def test_vocabulary_places_whisper_v3_special_tokens() -> None:
    vocabulary = whisper_v3_vocabulary(MODEL_SHAPES["large-v3-turbo"]["vocab_size"])
    assert len(vocabulary) == len(set(vocabulary)) == 51866
    assert vocabulary[EOT_ID] == "<|endoftext|>"
    assert [vocabulary[i] for i in PROMPT_IDS] == [
        "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"
    ]  # fmt: skip
    assert (vocabulary[50365], vocabulary[-1]) == ("<|0.00|>", "<|30.00|>")
    with pytest.raises(ValueError, match="51865"):
        whisper_v3_vocabulary(51865)


def test_summarize_batch_rtfx_and_rates() -> None:
    row = summarize_batch(8, 100, {"encoder_s": 0.1, "total_s": 0.5, "generated_tokens": 90})
    assert row["rtfx"] == pytest.approx(8 * 30.0 / 0.5)
    assert row["windows_per_s"] == pytest.approx(16.0)
    assert row["tokens_per_s"] == pytest.approx(8 * 90 / 0.5)  # measured tokens win over requested
    assert summarize_batch(1, 100, {"encoder_s": 0.1, "total_s": 1.0})["tokens_per_s"] == pytest.approx(100.0)
