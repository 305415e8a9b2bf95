"""What a dead tritonserver leaves behind is removed (whisper_build/serving/triton_cleanup.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from whisper_build.serving.triton_cleanup import TritonLaunch, group_members, kill_process_group

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups through /proc")

# A leader that starts a child ignoring SIGTERM (as a busy python stub does) and exits at once.
ORPHAN_MAKER = (
    "import os, signal, subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(120)'],"
    " stdout=sys.stdout)\n"
    "print(child.pid, flush=True)\n"
)


def _leader_with_orphan() -> tuple[subprocess.Popen[bytes], int]:
    leader = subprocess.Popen([sys.executable, "-c", ORPHAN_MAKER], stdout=subprocess.PIPE, start_new_session=True)
    assert leader.stdout is not None
    lines = [leader.stdout.readline(), leader.stdout.readline()]
    orphan = int(next(line for line in lines if line.strip()))
    leader.wait(timeout=30)
    return leader, orphan


def test_clean_up_kills_the_orphan_and_removes_only_this_launchs_regions(tmp_path: Path) -> None:
    # GIVEN a dead leader whose child outlived it and ignores SIGTERM, and shared-memory regions
    leader, orphan = _leader_with_orphan()
    assert psutil.pid_exists(orphan) and group_members(leader.pid) == [orphan]
    launch = TritonLaunch(prefix="whisper_1_abcd_", shm_dir=tmp_path)
    (tmp_path / "whisper_1_abcd_0b3c").write_bytes(b"x")
    (tmp_path / "whisper_2_ffff_0b3c").write_bytes(b"x")  # another launch's: kept
    assert [p.name for p in launch.regions()] == ["whisper_1_abcd_0b3c"]
    # WHEN the launcher cleans up after the exit
    launch.clean_up(leader)
    # THEN nothing of the group is left, and only this launch's region is gone
    assert group_members(leader.pid) == []
    assert not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["whisper_2_ffff_0b3c"]
    # ... and doing it twice is harmless
    launch.clean_up(leader)
    assert kill_process_group(leader.pid) == []


def test_the_flag_names_the_prefix() -> None:
    launch = TritonLaunch()
    assert launch.args == [f"--backend-config=python,shm-region-prefix-name={launch.prefix}"]
    assert launch.prefix.startswith("whisper_") and launch.prefix != TritonLaunch().prefix
