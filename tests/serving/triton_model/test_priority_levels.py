"""Bulk work at the model scheduler's lowest level, in a queue of its own, at most half a batch per call."""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from whisper_build.bulk.worker import bulk_plan
from whisper_build.serving import contract
from whisper_build.serving.engines import EngineParams
from whisper_build.serving.transcription.windows import WindowPlan
from whisper_build.serving.triton_model.contract_files import config_template
from whisper_build.serving.triton_model.repository import BatchingConfig, render_config
from whisper_build.serving.triton_model.scheduler import SchedulerConfig


def _scheduling(text: str) -> SchedulerConfig:
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    config = text_format.Parse(body, model_config_pb2.ModelConfig())
    strings = {key: value.string_value for key, value in config.parameters.items()}
    max_engine_batch = int(strings["max_engine_batch"])
    return SchedulerConfig.from_batching(BatchingConfig.from_model_parameters(strings), max_engine_batch)


def test_rendered_and_committed_configs_have_a_bulk_level_with_its_own_queue() -> None:
    rendered = render_config(
        EngineParams(engine="ctranslate2", device="cpu"), BatchingConfig(bulk_max_queue_size=8), False
    )
    for scheduling, bulk_queue in ((_scheduling(rendered), 8), (_scheduling(config_template()), 64)):
        assert contract.PRIORITY_LEVELS == 3 and contract.SYNC_PRIORITY == 2
        assert scheduling.queue_size(contract.SYNC_PRIORITY) == scheduling.queue_size(contract.LIVE_PRIORITY) == 64
        assert scheduling.queue_size(contract.BULK_PRIORITY) == bulk_queue
        assert (scheduling.mode, scheduling.max_queue_delay_s) == ("static", 0.02)


def test_bulk_calls_carry_at_most_half_a_batch() -> None:
    plan = WindowPlan(30.0, 5.0, 1e-3, group_size=16, max_audio_seconds=3600.0, call_timeout_seconds=60.0)
    assert bulk_plan(plan, 16).group_size == 8
    assert bulk_plan(plan, 64) is plan
    assert bulk_plan(plan, 2).group_size == 1
