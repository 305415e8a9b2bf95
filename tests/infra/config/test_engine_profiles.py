"""An engine is one unit: one :class:`settings.engines.EngineProfile` per kind, read everywhere by lookup.

A fitness test in the shape of tests/deploy/plans/test_deploy_layout.py: no product module compares an engine
name as a string; and the table is what the refusals, the chart env and the factory follow.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest
from k8s_support import config_with

from k8s_charts import workload
from settings import ConfigError, engines
from settings.engines import ENGINE_PROFILES, EngineKind

PACKAGES = ("settings", "stacks", "k8s_charts", "whisper_build", "observability")


def _product_roots() -> list[Path]:
    roots = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        roots.append(Path(spec.origin).parent)
    return [*roots, roots[0].parent / "scripts"]


def _names_an_engine(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in ENGINE_PROFILES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_an_engine(element) for element in node.elts)
    return False


def engine_name_compares(source: str) -> Iterator[int]:
    """Lines of ``source`` that compare (``==``, ``!=``, ``in``, ``match``) against an engine-name literal."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        else:
            continue
        if any(map(_names_an_engine, operands)):
            yield node.lineno


def test_no_product_module_compares_engine_names_as_strings() -> None:
    roots = _product_roots()
    modules = [path for root in roots for path in sorted(root.rglob("*.py"))]
    assert len(modules) > 200
    found = [
        f"{path.relative_to(roots[-1].parent)}:{line}"
        for path in modules
        for line in engine_name_compares(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "look the kind up in settings.engines.ENGINE_PROFILES instead"


def test_the_scan_sees_each_form_of_compare() -> None:
    source = 'a == "torch"\n"ctranslate2" != b\nc in ("tensorrt_llm", "x")\nmatch d:\n    case "torch": pass\n'
    assert list(engine_name_compares(source)) == [1, 2, 3, 5]
    assert list(engine_name_compares('kind = "torch"\nf(engine="torch")\ne == other\n')) == []


def test_one_profile_per_kind_and_each_runtime_names_its_class() -> None:
    assert tuple(ENGINE_PROFILES) == get_args(EngineKind)
    for kind, profile in ENGINE_PROFILES.items():
        assert profile.kind == kind
        spec = importlib.util.find_spec(profile.module)
        assert spec is not None and spec.origin is not None, profile.runtime
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))  # not imported: its runtime may be absent
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        assert profile.class_name in classes, profile.runtime
        # one decode path: the engine generates, the decoding layer (decode_windows) turns that into text
        methods = {n.name for n in classes[profile.class_name].body if isinstance(n, ast.FunctionDef)}
        assert "generate" in methods and "transcribe_batch" not in methods, profile.runtime


def test_an_unknown_kind_is_refused_naming_the_kinds() -> None:
    with pytest.raises(ValueError, match="engine must be one of tensorrt_llm, ctranslate2, torch, got 'onnx'"):
        engines.profile("onnx")


# ---------------------------------------------------------------- the table drives its readers
def _with(monkeypatch: pytest.MonkeyPatch, kind: EngineKind, **changes: object) -> None:
    monkeypatch.setitem(ENGINE_PROFILES, kind, dataclasses.replace(ENGINE_PROFILES[kind], **changes))  # type: ignore[arg-type]


def test_the_synthesis_refusals_follow_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    groups = [{"name": "g5", "instance_type": "ml.g5.2xlarge", "serving_engine": "ctranslate2"}]
    config_with(gpu_groups=groups, model={"beam_width": 5})  # accepted as the table stands
    _with(monkeypatch, "ctranslate2", beam_search=False)
    with pytest.raises(ConfigError, match="ctranslate2 decodes greedily but model.beam_width is 5"):
        config_with(gpu_groups=groups, model={"beam_width": 5})
    _with(monkeypatch, "ctranslate2", min_compute_capability=(9, 0))
    with pytest.raises(ConfigError, match=r"ctranslate2 needs a GPU of compute capability 9\.0 or newer"):
        config_with(gpu_groups=groups)


def test_the_chart_env_follows_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_with(gpu_groups=[{"name": "g5", "instance_type": "ml.g5.2xlarge", "serving_engine": "ctranslate2"}])
    group = config.gpu_groups[0]
    assert workload.engine_env(config, group) == {
        "WHISPER_TRITON_ENGINE__MODEL_PATH": f"{workload.MODEL_MOUNT_PATH}/ctranslate2",
        "WHISPER_TRITON_ENGINE__DEVICE": "cuda",
        "WHISPER_TRITON_ENGINE__COMPUTE_TYPE": "float16",
    }
    _with(monkeypatch, "ctranslate2", beam_search=False, compute_type=None)
    env = workload.engine_env(config, group)
    assert env["WHISPER_TRITON_ENGINE__BEAM_SIZE"] == 1
    assert env["WHISPER_TRITON_ENGINE__COMPUTE_TYPE"] == config.model.dtype
    _with(monkeypatch, "ctranslate2", chart_engine_params=False)
    assert workload.engine_env(config, group) == {}
