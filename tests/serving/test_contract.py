"""The serving contract (``whisper_build/serving/contract.py``) is the one source of the Triton tensors:
the committed config.pbtxt and docs tables are current, no other module spells a tensor name, and a
tensor added to the table reaches the rendered config, the model's parse and the gateway's inputs."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.model_config_pb2 as model_config_pb2
from google.protobuf import text_format
from tritonclient.utils import deserialize_bytes_tensor

from whisper_build.paths import REPO_ROOT
from whisper_build.serving import contract
from whisper_build.serving.engines import EngineParams
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.transcription.request import WindowRequest
from whisper_build.serving.transcription.triton_inputs import infer_inputs
from whisper_build.serving.triton_model.batching import parse_request
from whisper_build.serving.triton_model.contract_files import stale_files
from whisper_build.serving.triton_model.repository import BatchingConfig, render_config

NAMES = {t.name for t in (*contract.INPUTS, *contract.OUTPUTS)}
SPELL_NAMES = {
    "tests/serving/triton_model/test_triton_model.py": "checks the committed config against the names written out, independently of the table",
    "tests/serving/transcription/test_triton_integration.py": "talks to Triton without the gateway, as an outside client would",
    "tests/support/gateway_cases.py": "'WAV' there is soundfile's container format, not the tensor",
    "tests/serving/audio/test_audio.py": "'WAV' there is soundfile's container format, not the tensor",
    "tests/serving/diarization/test_diarization.py": "'WAV' there is soundfile's container format, not the tensor",
    "tests/serving/diarization/test_diarization_integration.py": "'WAV' there is soundfile's container format, not the tensor",
}
"""Files allowed to spell a tensor name, and why."""


def test_the_committed_config_and_docs_are_rendered_from_the_table() -> None:
    assert stale_files() == [], "run make model-contract"


def _names_spelled(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in NAMES}


def test_no_module_but_the_contract_spells_a_tensor_name() -> None:
    files = [
        *(REPO_ROOT / "whisper_build").rglob("*.py"),
        *(REPO_ROOT / "benchmarks").rglob("*.py"),
        *(REPO_ROOT / "tests").rglob("*.py"),
    ]
    found = {
        str(p.relative_to(REPO_ROOT)): names
        for p in files
        if p != REPO_ROOT / "whisper_build/serving/contract.py" and (names := _names_spelled(p))
    }
    assert {path: names for path, names in found.items() if path not in SPELL_NAMES} == {}
    assert set(SPELL_NAMES) <= set(found), "a file on the named list no longer needs to be there"


FAKE = contract.Tensor("FAKE_GAIN", "TYPE_FP32", (1,), True, "a tensor only this test adds", default=0.5)


@pytest.fixture
def fake_tensor(monkeypatch: pytest.MonkeyPatch) -> contract.Tensor:
    monkeypatch.setattr(contract, "INPUTS", (*contract.INPUTS, FAKE))
    return FAKE


def test_a_tensor_added_to_the_table_reaches_config_parse_and_gateway(fake_tensor: contract.Tensor) -> None:
    config = text_format.Parse(render_config(EngineParams(), BatchingConfig(), None), model_config_pb2.ModelConfig())
    [declared] = [i for i in config.input if i.name == fake_tensor.name]
    assert model_config_pb2.DataType.Name(declared.data_type) == "TYPE_FP32"
    assert list(declared.dims) == [1] and declared.optional

    wav = np.zeros((2, 160), np.float32)
    sent = parse_request({contract.WAV.name: wav, fake_tensor.name: np.array([[0.7], [0.9]], np.float32)})
    assert sent.rows[fake_tensor.name] == pytest.approx([0.7, 0.9])
    assert parse_request({contract.WAV.name: wav}).rows[fake_tensor.name] == [0.5, 0.5]

    inputs = {i.name(): i for i in infer_inputs(list(wav), WindowRequest())}
    assert inputs[fake_tensor.name].datatype() == "FP32" and inputs[fake_tensor.name].shape() == [2, 1]


def _as_numpy(item: object, tensor: contract.Tensor) -> np.ndarray:
    """An ``InferInput``'s array as Triton receives it (its raw content, in the table's type)."""
    raw = item._get_content()  # type: ignore[attr-defined]  # noqa: SLF001 - the bytes put on the wire
    if tensor.wire_type == "BYTES":
        return deserialize_bytes_tensor(raw).reshape(item.shape())  # type: ignore[attr-defined]
    return np.frombuffer(raw, dtype=tensor.numpy_type).reshape(item.shape())  # type: ignore[attr-defined]


def test_what_the_gateway_sends_the_model_parses_back() -> None:
    options = contract.DecodeOptions(timestamps=True, word_timestamps=True, temperature=0.5)  # exact in FP32
    windows = [np.full(320, 0.25, np.float32), np.full(160, 0.5, np.float32)]
    inputs = infer_inputs(windows, WindowRequest(DecodePrompt(language="en"), 1.25, options))
    assert [(i.name(), i.datatype()) for i in inputs] == [(t.name, t.wire_type) for t in contract.INPUTS]
    parsed = parse_request({t.name: _as_numpy(i, t) for i, t in zip(inputs, contract.INPUTS, strict=True)})
    assert [w.tolist() for w in parsed.audio] == [w.tolist() for w in windows]
    assert parsed.options == [options, options]
    assert parsed.repetition_penalty == [1.25, 1.25]
    assert [p.language for p in parsed.prompts] == ["en", "en"]
