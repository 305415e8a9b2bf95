"""The step types of ``make deploy`` / ``make destroy``: what a step runs and how a re-run treats it.

A step is a title, duration and cost notes, the actions it runs (each printed by ``--dry-run``),
an optional ``skip`` check that makes re-running it cheap and an optional ``diagnose`` printed when
it fails. AWS actions, skip checks and diagnoses are functions of the runner's
:class:`whisper_build.deploy.session.DeploySession`; building a step calls none of them.
Docs: docs/deploy.md, "Resuming".
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from whisper_build.deploy.session import DeploySession

Diagnosis = Callable[[DeploySession], list[str]]
"""Lines explaining a failed step, printed before the error (or a wait's progress)."""


@dataclass(frozen=True)
class Command:
    """A program to run from the repository root, e.g. ``npx cdk deploy ...``."""

    argv: tuple[str, ...]

    def __str__(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class AwsCall:
    """An AWS API action done with boto3; ``text`` is its AWS CLI equivalent (what ``--dry-run`` prints)."""

    text: str
    run: Callable[[DeploySession], None] = field(compare=False, repr=False)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class WaitAll:
    """Commands that wait under ONE deadline: each gets ``--timeout=<seconds left of the deadline>s``.

    ``kubectl rollout status`` takes a timeout per call; running one per GPU group with a fixed
    timeout each would let the waits add up (two groups, 30 min each: an hour). The runner
    (:class:`whisper_build.deploy.runner.Runner`) appends what is left of ``deadline_s`` to
    each argv in turn and fails once nothing is left.
    """

    argvs: tuple[tuple[str, ...], ...]
    deadline_s: int
    progress: Diagnosis | None = field(default=None, compare=False, repr=False)
    """Lines printed every :attr:`progress_every_s` while the commands wait (e.g. HyperPod's nodes per type)."""
    progress_every_s: float = 60.0

    def __str__(self) -> str:
        return " && ".join(shlex.join(argv) for argv in self.argvs) + (
            f"  # one deadline for all: {self.deadline_s // 60} min together (each gets --timeout=<seconds left>)"
        )


Action = Command | AwsCall | WaitAll
SkipCheck = Callable[[DeploySession], bool]
"""True when the step's work is already done (the runner then skips it)."""


@dataclass(frozen=True)
class Step:
    """One step of the journey.

    Attributes:
        name: short id, e.g. ``stacks``.
        title: what it does.
        duration: expected wall time (estimate).
        cost: what starts billing in this step, or "" when nothing notable.
        actions: run in order.
        rerun: what running it again does, after success or after a failure (docs/deploy.md, Resuming).
        skip: ``(description, check)``: the step is skipped when ``check(session)`` is true (re-runs).
        diagnose: on failure, ``diagnose(session)`` returns lines explaining it (printed before the error).
    """

    name: str
    title: str
    duration: str
    cost: str
    actions: tuple[Action, ...]
    rerun: str = ""
    skip: tuple[str, SkipCheck] | None = None
    diagnose: Diagnosis | None = None


def cdk(*args: str, config_file: str) -> Command:
    """``npx cdk <args> -c config=<config_file>``."""
    return Command(("npx", "cdk", *args, "-c", f"config={config_file}"))


def cdk_app(*args: str, assembly: str) -> Command:
    """``npx cdk <args> --app <assembly>``: CDK reads that cloud assembly instead of synthesizing the app again."""
    return Command(("npx", "cdk", *args, "--app", assembly))


def diff_command(config_file: str) -> Command:
    """``make diff CONFIG=…``: ``cdk diff`` of every stack against what is deployed (needs credentials)."""
    return cdk("diff", "--all", config_file=config_file)
