"""Sizes held across the product: files of at most 400 lines, functions of at most 60.

The rule of tests/deploy/plans/test_deploy_layout.py, over every product package (``whisper_build/``,
``settings/``, ``stacks/``, ``k8s_charts/`` without its generated ``imports/``, ``observability/``,
``benchmarks/``, ``scripts/`` and ``app.py``). Today's exceptions are listed below with their size:
an entry may only shrink, none may be added, and one within the rule must be removed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("whisper_build", "settings", "stacks", "k8s_charts", "observability", "benchmarks", "scripts")
GENERATED = (("k8s_charts", "imports"),)
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60

FILES_OVER: dict[str, int] = {
    "observability/queries.py": 612,
    "settings/schema.py": 915,
    "stacks/engine_build_stack.py": 491,
    "whisper_build/podstart/preflight.py": 652,
    "whisper_build/serving/engines/torch_engine.py": 419,
    "whisper_build/serving/engines/torch_graphs.py": 411,
}
"""Files over :data:`MAX_FILE_LINES` today, with their line count: may only shrink."""

FUNCTIONS_OVER: dict[tuple[str, str], int] = {
    ("benchmarks/reference.py", "main"): 117,
    ("k8s_charts/bulk.py", "BulkWorkers.__init__"): 88,
    ("k8s_charts/gpu_metrics.py", "GpuMetricsExporter.__init__"): 70,
    ("k8s_charts/network_policy.py", "ServingNetworkPolicies.__init__"): 67,
    ("k8s_charts/pod_ranker.py", "PodRanker.__init__"): 85,
    ("k8s_charts/workload.py", "GpuGroupWorkload.__init__"): 87,
    ("observability/dashboard.py", "dashboard_rows"): 85,
    ("observability/grafana_provisioner/handler.py", "provision"): 72,
    ("stacks/bulk_stack.py", "BulkStack.__init__"): 77,
    ("stacks/cluster_stack.py", "ClusterStack.__init__"): 100,
    ("stacks/engine_build_stack.py", "EngineBuildStack.__init__"): 69,
    ("stacks/engine_build_stack.py", "EngineBuildStack._cluster_project"): 61,
    ("stacks/engine_job.py", "engine_build_manifests"): 88,
    ("stacks/hyperpod.py", "HyperPodCluster.__init__"): 76,
    ("stacks/hyperpod_iam.py", "create_execution_role"): 80,
    ("stacks/inference_operator.py", "InferenceOperatorAddon.__init__"): 70,
    ("stacks/network_stack.py", "NetworkStack.__init__"): 72,
    ("stacks/observability_stack.py", "ObservabilityStack._provision_dashboard"): 78,
    ("stacks/whisper_app.py", "add_whisper_stacks"): 95,
    ("whisper_build/podstart/preflight.py", "main"): 93,
    ("whisper_build/podstart/preflight.py", "run_preflight"): 95,
    ("whisper_build/serving/triton_model/batching.py", "parse_request"): 62,
    ("whisper_build/serving/triton_model/decoding.py", "decode_windows"): 97,
}
"""Functions over :data:`MAX_FUNCTION_LINES` today, ``(file, qualified name)`` to lines: may only shrink."""


def product_files() -> Iterator[Path]:
    """Every Python file of the product, generated code aside."""
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if not any(path.relative_to(REPO).parts[: len(g)] == g for g in GENERATED):
                yield path
    yield REPO / "app.py"


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """``(qualified name, lines)`` of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            yield f"{prefix}{node.name}", node.end_lineno - node.lineno + 1
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def measured() -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """The files and functions over the limits now, with their sizes."""
    files: dict[str, int] = {}
    functions: dict[tuple[str, str], int] = {}
    for path in product_files():
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(REPO).as_posix()
        if len(text.splitlines()) > MAX_FILE_LINES:
            files[name] = len(text.splitlines())
        for function, lines in _functions(ast.parse(text)):
            if lines > MAX_FUNCTION_LINES:
                functions[(name, function)] = lines
    return files, functions


def _problems(now: dict, allowed: dict, limit: int, what: str) -> list[str]:
    problems = []
    for key, size in sorted(now.items()):
        if key not in allowed:
            problems.append(f"{key}: {size} lines, over the {limit}-line limit for {what}: split it into named steps")
        elif size > allowed[key]:
            problems.append(f"{key}: grew from {allowed[key]} to {size} lines: shrink it (the allowlist only shrinks)")
    for key, size in sorted(allowed.items()):
        if key not in now:
            problems.append(f"{key}: now within {limit} lines (or gone): remove its entry from the allowlist")
        elif now[key] < size:
            problems.append(f"{key}: shrank from {size} to {now[key]} lines: lower its entry to {now[key]}")
    return problems


def test_no_file_grows_past_400_lines_and_no_function_past_60() -> None:
    files, functions = measured()
    problems = _problems(files, FILES_OVER, MAX_FILE_LINES, "files")
    problems += _problems(functions, FUNCTIONS_OVER, MAX_FUNCTION_LINES, "functions")
    assert not problems, "\n".join(problems)


def test_the_allowlists_only_shrink_toward_the_targets() -> None:
    assert len(FILES_OVER) <= 6 and len(FUNCTIONS_OVER) <= 25
    assert all(size > MAX_FILE_LINES for size in FILES_OVER.values())
    assert all(size > MAX_FUNCTION_LINES for size in FUNCTIONS_OVER.values())


def test_the_rule_sees_a_long_function_and_a_long_file(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    tree = ast.parse(f"class A:\n    def f(self):\n{body}\n        return 0\n".replace("\n    x", "\n        x"))
    assert dict(_functions(tree)) == {"A.f": MAX_FUNCTION_LINES + 2}
    assert _problems({"a.py": 401}, {}, MAX_FILE_LINES, "files") == [
        "a.py: 401 lines, over the 400-line limit for files: split it into named steps"
    ]
    assert _problems({}, {"a.py": 401}, MAX_FILE_LINES, "files") == [
        "a.py: now within 400 lines (or gone): remove its entry from the allowlist"
    ]
