"""Runs the steps of a plan in order: header, commands, elapsed time, skips, and the error that says how to resume.

A failing step stops the run with its name; re-running the command resumes (each step states what
a re-run does: skips, applies only differences, or waits on work still running). Without a
session (``--dry-run``) every step is printed and nothing runs.
Docs: docs/deploy.md, "Resuming".
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from botocore.exceptions import BotoCoreError, ClientError

from whisper_build.deploy import aws, credentials
from whisper_build.deploy.session import DeploySession
from whisper_build.deploy.steps import Command, Step, WaitAll
from whisper_build.paths import REPO_ROOT

"""Where every command runs (CDK reads ``cdk.json`` there)."""


def elapsed(seconds: float) -> str:
    """``4m05s``, or ``1h02m03s`` from an hour on."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class Runner:
    """Runs steps in order with a header, the commands, and the elapsed time of each step.

    Args:
        steps: The plan.
        session: AWS side; ``None`` in a dry run.
        out: line printer.
        run_command: runs one argv from the repository root, raising on failure (injected by tests).
        clock: monotonic seconds (injected by tests; :class:`WaitAll` deadlines).
    """

    def __init__(
        self,
        steps: Sequence[Step],
        session: DeploySession | None,
        out: Callable[[str], None],
        run_command: Callable[[Sequence[str]], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.steps = steps
        self.session = session
        self.out = out
        self.run_command = run_command
        self.clock = clock

    def wait_all(self, action: WaitAll) -> None:
        """Run ``action``'s commands in turn, each with ``--timeout=`` what is left of the one deadline.

        Raises:
            aws.DeployError: the deadline passed before the last command could start.
        """
        deadline = self.clock() + action.deadline_s
        with self._reporting(action):
            for argv in action.argvs:
                left = int(deadline - self.clock())
                if left <= 0:
                    raise aws.DeployError(
                        f"not ready within {action.deadline_s // 60} min all together; not waited for: "
                        f"{shlex.join(argv)}"
                    )
                self.run_command((*argv, f"--timeout={left}s"))

    @contextlib.contextmanager
    def _reporting(self, action: WaitAll) -> Iterator[None]:
        """While the body runs, print ``action.progress`` every ``action.progress_every_s`` (a daemon thread).

        A progress that raises prints one line and the wait goes on.
        """
        session = self.session
        if action.progress is None or session is None:
            yield
            return
        progress, stop = action.progress, threading.Event()

        def report() -> None:
            while not stop.wait(action.progress_every_s):
                try:
                    lines = progress(session)
                except Exception as err:  # noqa: BLE001 (a report must not end the wait)
                    lines = [f"(could not report progress: {err})"]
                for line in lines:
                    self.out(f"    progress: {line}")

        reporter = threading.Thread(target=report, name="wait-progress", daemon=True)
        reporter.start()
        try:
            yield
        finally:
            stop.set()
            reporter.join()

    def _skips(self, step: Step, session: DeploySession) -> bool:
        """Whether ``step``'s skip check says it is done (checks such as ``cluster_active`` call AWS).

        Raises:
            aws.DeployError: the check's AWS call failed (expired credentials, throttling, no network).
        """
        assert step.skip is not None
        try:
            return step.skip[1](session)
        except (BotoCoreError, ClientError) as err:
            raise aws.DeployError(
                f"step '{step.name}': could not check whether {step.skip[0]}: {err}. Credentials expired? Run "
                "`aws sso login` (or renew them) and run the same command again; every step is safe to re-run "
                "(destroy included)"
            ) from err

    def _print(self, index: int, step: Step) -> None:
        """The step's header: name, title, duration and cost, re-run behaviour, skip check, commands."""
        self.out(f"[{index}/{len(self.steps)}] {step.name}: {step.title}")
        self.out(f"    takes {step.duration}" + (f"; cost: {step.cost}" if step.cost else ""))
        if step.rerun:
            self.out(f"    re-run: {step.rerun}")
        if step.skip is not None:
            self.out(f"    skipped when {step.skip[0]}")
        for action in step.actions:
            self.out(f"    $ {action}")

    def _execute(self, step: Step, session: DeploySession) -> None:
        """Run ``step``'s actions; on failure print its diagnosis and raise naming it and how to resume.

        Raises:
            aws.DeployError: an action failed.
        """
        step_started = time.monotonic()
        try:
            for action in step.actions:
                if isinstance(action, Command):
                    self.run_command(action.argv)
                elif isinstance(action, WaitAll):
                    self.wait_all(action)
                else:
                    action.run(session)
        except (subprocess.CalledProcessError, aws.DeployError, BotoCoreError, ClientError) as err:
            if step.diagnose is not None:
                try:
                    explanation = step.diagnose(session)
                except (BotoCoreError, ClientError) as diagnose_err:
                    explanation = [f"(could not diagnose: {diagnose_err})"]
                for line in explanation:
                    self.out(f"    why: {line}")
            cause = credentials.credential_problem(err) if credentials.is_credential_error(err) else str(err)
            raise aws.DeployError(
                f"step '{step.name}' failed after {elapsed(time.monotonic() - step_started)}: {cause}. "
                "Fix the cause (expired credentials: `aws sso login` or renew them) and run the same command "
                "again; each step's 're-run' line says what repeating it does (docs/deploy.md, Resuming)."
            ) from err

    def run(self) -> float:
        """Run (or, without a session, print) every step; returns the total seconds.

        Raises:
            aws.DeployError: a step failed; the message names it and how to resume.
        """
        started = time.monotonic()
        for index, step in enumerate(self.steps, 1):
            self._print(index, step)
            if self.session is None:
                continue
            step_started = time.monotonic()
            if step.skip is not None and self._skips(step, self.session):
                self.out("    skipped: already done")
                continue
            self._execute(step, self.session)
            self.out(
                f"    done in {elapsed(time.monotonic() - step_started)} (total {elapsed(time.monotonic() - started)})"
            )
        return time.monotonic() - started


def run_in_repo(argv: Sequence[str]) -> None:
    """Run ``argv`` from the repository root with inherited output.

    Raises:
        subprocess.CalledProcessError: it exited non-zero.
    """
    subprocess.run(list(argv), cwd=REPO_ROOT, check=True)
