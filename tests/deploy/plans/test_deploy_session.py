"""The step/session seam (:mod:`whisper_build.deploy.session`): the boto3 session offers every call the
steps may make, with the same parameters, and the steps call nothing else."""

from __future__ import annotations

import inspect
from typing import get_type_hints

from settings import DEFAULT_CONFIG_PATH, load_config
from whisper_build.deploy.aws_session import AwsSession
from whisper_build.deploy.ctranslate2_plan import ctranslate2_steps
from whisper_build.deploy.deploy_plan import deploy_steps
from whisper_build.deploy.destroy_plan import destroy_steps
from whisper_build.deploy.session import DeploySession
from whisper_build.deploy.steps import AwsCall, WaitAll

PROTOCOL_METHODS = {
    name for name, _ in inspect.getmembers(DeploySession, inspect.isfunction) if not name.startswith("_")
}


def test_the_aws_session_implements_every_protocol_method_with_its_signature() -> None:
    assert len(PROTOCOL_METHODS) == 20
    for name in PROTOCOL_METHODS:
        wanted, got = getattr(DeploySession, name), getattr(AwsSession, name)
        assert list(inspect.signature(got).parameters) == list(inspect.signature(wanted).parameters), name
        assert get_type_hints(got) == get_type_hints(wanted), name


class Recorder:
    """Records the name of every attribute the steps read from their session."""

    def __init__(self) -> None:
        self.called: set[str] = set()

    def __getattr__(self, name: str) -> object:
        self.called.add(name)
        return lambda *args, **kwargs: []


def test_the_steps_call_only_what_the_protocol_declares() -> None:
    data = load_config(DEFAULT_CONFIG_PATH)
    groups = [group.model_copy(update={"serving_engine": "ctranslate2"}) for group in data.gpu_groups]
    steps = [
        *deploy_steps(data, "c.yaml", "1"),
        *destroy_steps(data, "c.yaml", True, "1"),
        *ctranslate2_steps(data.model_copy(update={"gpu_groups": groups}), "1", None),
    ]
    session = Recorder()
    for step in steps:
        for action in step.actions:
            if isinstance(action, AwsCall):
                action.run(session)  # type: ignore[arg-type]
            if isinstance(action, WaitAll) and action.progress is not None:
                action.progress(session)  # type: ignore[arg-type]
        if step.skip is not None:
            step.skip[1](session)  # type: ignore[arg-type]
        if step.diagnose is not None:
            step.diagnose(session)  # type: ignore[arg-type]
    assert session.called == PROTOCOL_METHODS
