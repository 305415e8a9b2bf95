"""Shared fixtures. Fixture modules live in tests/support/ (on the path, pytest.ini) and are imported
here so that every test module can request them by name. The suite runs on pytest-xdist workers (pytest.ini); the
collection hook below groups and orders modules for them (docs/development.md, "Test tiers")."""

# triton_server: real tritonserver + CPU whisper on free ports, session-scoped (tests/support/fixtures_triton.py);
# speaker_triton_server: the same with the speaker model; slow_triton_server: another one whose engine a
# test slows down (tests/support/slow_engine.py)
import os
import shutil
from pathlib import Path

import pytest
from fixtures_triton import slow_triton_server, speaker_triton_server, triton_server  # noqa: F401

CI_TOOLS = ("espeak-ng", "sox", "prometheus", "promtool", "chromium")
"""Debian tools some tests need (.ci/apt-packages.txt). Locally a missing tool skips those tests;
in CI it fails the run, so a broken install can never turn into silently skipped tests."""

SHARED_GROUPS = {
    "speaker": ("speaker_triton_server",),
    "cdk": ("synthesized(",),
}
"""xdist groups of modules that share a costly per-process resource, so that one worker pays for it:
the speaker model's Triton (~1 GB, ~60 CPU s), and the CDK syntheses cached by tests/support/cdk_assembly.py
(its ``synthesized``). A module joins the group whose words its source holds."""

REAL_TRITON = frozenset({"triton_server", "speaker_triton_server", "slow_triton_server"})
"""The session fixtures that start a real tritonserver (tests/support/fixtures_triton.py). A test that asks
for one is marked ``integration``, and a test of the ``cdk`` group (:data:`SHARED_GROUPS`: about a minute
of synthesis per config) ``slow``, as if each said so itself: ``make test-fast`` leaves both out."""

HEAVY_FIRST = (  # seconds per group on 2 workers of a loaded 2-core machine: ~450 ... 20
    "tests/bench/test_live_wer.py",
    "tests/infra/synthesis/test_examples_synth.py",
    "cdk",
    "tests/serving/transcription/test_transcripts_integration.py",
    "tests/serving/gateway/test_gateway_integration.py",
    "tests/serving/gateway/test_pressure_integration.py",
    "tests/serving/realtime/test_realtime_integration.py",
    "tests/bulk/test_bulk_resilience.py",
    "speaker",
    "tests/serving/gateway/test_long_upload_load.py",
    "tests/serving/transcription/test_multilingual_integration.py",
    "tests/serving/transcription/test_shared_triton_integration.py",
    "tests/serving/transcription/test_one_transcript.py",
    "tests/bench/test_torch_pipeline.py",
    "tests/bench/test_torch_words.py",
    "tests/serving/engines/test_torch_words_integration.py",
    "tests/bulk/test_bulk_jobs.py",
    "tests/serving/test_self_healing.py",
    "tests/deploy/calls/test_deploy_credentials.py",
    "tests/serving/transcription/test_streaming_integration.py",
    "tests/bench/test_bench_integration.py",
    "tests/serving/gateway/test_slow_clients.py",
    "tests/serving/transcription/test_triton_integration.py",
    "tests/observability/test_observability_live.py",
    "tests/infra/charts/test_k8s_validation.py",
    "tests/workstation/test_local_triton.py",
    "tests/bulk/test_bulk_spot_eviction.py",
    "tests/serving/engines/test_sampling_seed.py",
    "tests/serving/triton_model/test_cancellation.py",
    "tests/serving/engines/test_ctranslate2_engine.py",
    "tests/infra/synthesis/test_k8s_workloads_stack.py",
    "tests/bulk/test_bulk_demo.py",
)
"""Groups (module paths or :data:`SHARED_GROUPS` names), longest first: xdist hands out work units
in collection order, so the long ones start early and none ends the run alone."""


def pytest_sessionstart(session: pytest.Session) -> None:
    missing = [tool for tool in CI_TOOLS if shutil.which(tool) is None]
    if missing and os.environ.get("CI"):
        pytest.exit(f"CI needs {', '.join(missing)} on PATH (install .ci/apt-packages.txt)", returncode=3)


def _group(path: Path, rootpath: Path, cache: dict[Path, str]) -> str:
    if path not in cache:
        source = path.read_text(encoding="utf-8")
        shared = [name for name, words in SHARED_GROUPS.items() if any(word in source for word in words)]
        cache[path] = shared[0] if shared else path.relative_to(rootpath).as_posix()
    return cache[path]


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test the xdist group of its module (or of its shared resource, :data:`SHARED_GROUPS`):
    with ``--dist loadgroup`` a module's tests then share one worker and its module fixtures; mark the
    tests :data:`REAL_TRITON` names; and order the groups longest first (:data:`HEAVY_FIRST`), the rest
    in collection order. Runs before the ``-m`` selection, which sees the marks added here."""
    cache: dict[Path, str] = {}
    rank = {group: i for i, group in enumerate(HEAVY_FIRST)}
    groups = {item.nodeid: _group(item.path, config.rootpath, cache) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
        if REAL_TRITON & set(item.fixturenames):
            item.add_marker(pytest.mark.integration)
        if groups[item.nodeid] == "cdk":
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: rank.get(groups[item.nodeid], len(rank)))  # stable: the rest keep their order
