"""What a dead tritonserver leaves behind, and its removal before Triton starts again.

Triton's python backend runs each model instance in a stub process (``triton_python_backend_stub``)
that it forks into tritonserver's own process group, and the two talk through POSIX shared-memory
regions under ``/dev/shm`` named ``<prefix><uuid>`` (python_backend README, "Running Multiple
Instances of Triton Server": ``--backend-config=python,shm-region-prefix-name=<prefix>``; the
default prefix is ``triton_python_backend_shm_region_``). When tritonserver is killed, a stub busy
in ``execute()`` can outlive it (reparented to PID 1, it ignores SIGTERM), keeping its memory — on a
GPU its CUDA context and the model's weights — and the regions stay in ``/dev/shm`` (tmpfs, i.e.
RAM). :class:`TritonLaunch` gives one launcher its own region prefix and, after each exit of its
tritonserver, SIGKILLs whatever is left of that process group and removes the regions of that
prefix, so a restarted Triton starts with the memory the last one held.

Linux only (``/proc``); elsewhere the group kill still runs and the region sweep finds nothing.
Docs: docs/serving.md, "Under pressure: disconnect, timeout, overload, fault".
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SHM_DIR", "TritonLaunch", "group_members", "kill_process_group", "remove_shm_regions"]

log = logging.getLogger("whisper.supervisor")

SHM_DIR = Path("/dev/shm")
"""Where POSIX shared-memory objects live on Linux (``shm_open``)."""


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, from ``/proc``."""
    members = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def kill_process_group(pgid: int, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL every process left in group ``pgid`` and wait (≤ ``timeout_s``) until none is alive.

    Children of this process among them are reaped. Returns the pids that were killed.

    Raises:
        TimeoutError: a member is still alive after ``timeout_s`` (e.g. stuck in the kernel).
    """
    killed = group_members(pgid)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return []
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        for pid in killed:
            with contextlib.suppress(ChildProcessError):  # not ours: PID 1 reaps it
                os.waitpid(pid, os.WNOHANG)
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes {group_members(pgid)} of group {pgid} survived SIGKILL for {timeout_s:g} s")
        time.sleep(0.05)
    return killed


def remove_shm_regions(prefix: str, shm_dir: Path = SHM_DIR) -> list[Path]:
    """Delete the shared-memory regions named ``<prefix>*``; returns those removed."""
    removed = []
    for path in shm_dir.glob(f"{prefix}*") if shm_dir.is_dir() else ():
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def _new_prefix() -> str:
    return f"whisper_{os.getpid()}_{secrets.token_hex(4)}_"


@dataclass(frozen=True)
class TritonLaunch:
    """One launcher's tritonserver runs: their region prefix and the clean-up after each exit.

    Attributes:
        prefix: ``shm-region-prefix-name`` of every run (``whisper_<launcher pid>_<random>_``).
        shm_dir: where the regions are (:data:`SHM_DIR`).
    """

    prefix: str = field(default_factory=_new_prefix)
    shm_dir: Path = SHM_DIR

    @property
    def args(self) -> list[str]:
        """The tritonserver flag that puts this launch's regions under :attr:`prefix`."""
        return [f"--backend-config=python,shm-region-prefix-name={self.prefix}"]

    def regions(self) -> list[Path]:
        """This launch's regions present now."""
        return sorted(self.shm_dir.glob(f"{self.prefix}*")) if self.shm_dir.is_dir() else []

    def clean_up(self, process: subprocess.Popen[bytes]) -> None:
        """After ``process`` (a tritonserver started in its own session) exited: kill its group, drop its regions.

        Logs what it removed; never raises (a failed clean-up is logged, the restart goes on).
        """
        try:
            killed = kill_process_group(process.pid)
        except (TimeoutError, PermissionError) as err:
            log.error("could not kill what tritonserver (pid %s) left running: %s", process.pid, err)
            killed = []
        removed = remove_shm_regions(self.prefix, self.shm_dir)
        if killed or removed:
            log.warning(
                "tritonserver (pid %s) left %d process(es) (killed: %s) and %d shared-memory region(s) "
                "(removed: %s)", process.pid, len(killed), killed, len(removed), ", ".join(p.name for p in removed),
            )  # fmt: skip
