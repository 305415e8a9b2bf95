"""Free ports and the bounded retry when another process takes one first (whisper_build/workstation/ports.py)."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from fixtures_triton import cpu_triton_settings

import whisper_build.workstation.local_triton as local_triton
import whisper_build.workstation.ports as ports
from whisper_build.bulk.local import LocalAws
from whisper_build.workstation.ports import PortTaken, port_taken_in, start_on_free_ports


def test_a_taken_port_is_retried_on_fresh_ports_a_bounded_number_of_times() -> None:
    # GIVEN a start that finds its port taken twice
    tried: list[list[int]] = []

    def start(picked: list[int]) -> str:
        tried.append(picked)
        if len(tried) < 3:
            raise PortTaken(f"{picked[0]} is taken")
        return "up"

    # THEN the third start, on fresh ports, is the answer
    assert start_on_free_ports(start, 2) == "up"
    assert len(tried) == 3 and all(len(set(p)) == 2 for p in tried)
    # ... and a port that stays taken is an error after ATTEMPTS starts
    tried.clear()

    def always_taken(picked: list[int]) -> str:
        tried.append(picked)
        raise PortTaken("taken")

    with pytest.raises(PortTaken):
        start_on_free_ports(always_taken, 1)
    assert len(tried) == ports.ATTEMPTS
    with pytest.raises(ValueError, match="at least 1"):
        start_on_free_ports(start, 1, attempts=0)


def test_the_servers_bind_failure_messages_read_as_a_taken_port() -> None:
    # as measured (ports.py docstring): Triton, uvicorn, prometheus-client's server, prometheus
    for line in (
        "E1201 main.cc:293] \"failed to start Metrics service: Unavailable - Socket '127.0.0.1:58595' already in use \"",
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 57457): address already in use",
        "OSError: [Errno 98] Address already in use",
        'msg="Unable to start web listener" err="listen tcp 127.0.0.1:57457: bind: address already in use"',
    ):
        assert port_taken_in(line), line
    assert not port_taken_in("failed to load 'whisper' version 1: model.bin not found")


def test_local_aws_binds_a_port_the_os_picks_and_refuses_a_taken_one() -> None:
    with LocalAws() as one, LocalAws() as two:
        assert one.port and two.port and one.port != two.port
        assert one.endpoint_url == f"http://127.0.0.1:{one.port}"
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        with pytest.raises(PortTaken), LocalAws(other.getsockname()[1]):
            pass


@pytest.mark.integration
def test_triton_started_again_on_fresh_ports_when_its_metrics_port_was_taken(monkeypatch, tmp_path, caplog) -> None:
    # GIVEN another process that takes the metrics port after it was picked (the launcher's check passes)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        picks, real_pick = [[*ports.free_ports(2), taken]], ports.free_ports
        monkeypatch.setattr(ports, "free_ports", lambda count: picks.pop() if picks else real_pick(count))
        checks, real_check = [], local_triton.ports_in_use

        def first_check_passes(host: str, wanted: dict[str, int]) -> list[str]:
            checks.append(wanted)
            return [] if len(checks) == 1 else real_check(host, wanted)

        monkeypatch.setattr(local_triton, "ports_in_use", first_check_passes)
        # WHEN Triton starts (tritonserver keeps running with its metrics port taken, only logging it)
        with local_triton.LocalTriton(cpu_triton_settings(), workdir=tmp_path) as server:
            # THEN it was stopped and started again on fresh ports, and its metrics are its own
            assert len(checks) == 2 and server.settings.metrics_port not in (0, taken)
            assert f"{taken}' already in use" in caplog.text  # the first tritonserver's log, in the retry's warning
            with urllib.request.urlopen(server.settings.metrics_url, timeout=5) as response:  # noqa: S310 - local URL
                assert b'nv_inference_exec_count{model="whisper"' in response.read()
            assert "already in use" not in server.log_tail(400)
