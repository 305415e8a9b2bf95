"""Bulk work at Triton's lower priority level, in a queue of its own, at most half a batch per call."""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from whisper_build.bulk.worker import bulk_plan
from whisper_build.serving import contract
from whisper_build.serving.engines import EngineParams
from whisper_build.serving.transcription.windows import WindowPlan
from whisper_build.serving.triton_model.contract_files import config_template
from whisper_build.serving.triton_model.repository import BatchingConfig, render_config


def _batching(text: str) -> model_config_pb2.ModelDynamicBatching:
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return text_format.Parse(body, model_config_pb2.ModelConfig()).dynamic_batching


def test_rendered_and_committed_configs_have_a_bulk_level_with_its_own_queue() -> None:
    rendered = render_config(
        EngineParams(engine="ctranslate2", device="cpu"), BatchingConfig(bulk_max_queue_size=8), False
    )
    for batching, bulk_queue in ((_batching(rendered), 8), (_batching(config_template()), 64)):
        assert batching.priority_levels == contract.PRIORITY_LEVELS == 3
        assert batching.default_priority_level == contract.SYNC_PRIORITY == 2
        assert batching.default_queue_policy.max_queue_size == 64
        assert batching.priority_queue_policy[contract.BULK_PRIORITY].max_queue_size == bulk_queue


def test_bulk_calls_carry_at_most_half_a_batch() -> None:
    plan = WindowPlan(30.0, 5.0, 1e-3, group_size=16, max_audio_seconds=3600.0, call_timeout_seconds=60.0)
    assert bulk_plan(plan, 16).group_size == 8
    assert bulk_plan(plan, 64) is plan
    assert bulk_plan(plan, 2).group_size == 1
