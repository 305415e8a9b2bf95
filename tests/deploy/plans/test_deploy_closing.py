"""The closing messages (:mod:`whisper_build.deploy.closing`): how to reach an internal NLB, TLS and its
DNS record, the OpenAI example the docs show."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence

import yaml
from deploy_helpers import (
    CONTEXT,
    DEPLOY_DOC,
    _dry_run_lines,
)

from settings import DEFAULT_CONFIG_PATH, load_config, parse_config
from whisper_build.deploy import (
    cli,
    closing,
    endpoint_wait,
)


def test_endpoint_message_for_an_internal_nlb() -> None:
    config = load_config()
    status = {
        "status": {"loadBalancer": {"ingress": [{"hostname": "internal-k8s-whisper-abc.elb.us-east-1.amazonaws.com"}]}}
    }
    seen: list[Sequence[str]] = []

    def kubectl(argv: Sequence[str]) -> str:
        seen.append(argv)
        return json.dumps(status)

    hostname = endpoint_wait.endpoint_address(config, "123456789012", kubectl)
    assert seen == [("kubectl", "--context", CONTEXT, "-n", "whisper", "get", "service", "whisper", "-o", "json")]
    message = closing.how_to_reach(config, "123456789012", hostname)
    assert "export LB=internal-k8s-whisper-abc.elb.us-east-1.amazonaws.com" in message
    assert f"kubectl --context {CONTEXT} -n whisper port-forward service/whisper 8080:80 &" in message
    assert "synthetic speech from make bench-audio (then: cp bench-audio/utterance_0.wav recording.wav)" in message
    assert "export BASE=http://127.0.0.1:8080" in message and 'curl -s "$BASE/ping"' in message
    assert "OpenAI(base_url=os.environ['BASE'] + '/v1'" in message
    # API keys are on by default: the secret's ARN comes from the stack output, then the key is sent
    assert "describe-stacks --stack-name WhisperHyperpodWorkloads" in message
    assert 'secretsmanager get-secret-value --secret-id "$SECRET"' in message
    assert '"$BASE/invocations" -H "Authorization: Bearer $KEY"' in message
    assert "CNAME" not in message  # no TLS, no DNS record
    assert endpoint_wait.endpoint_address(config, "123456789012", lambda argv: json.dumps({"status": {}})) is None


def test_endpoint_message_with_tls_names_the_dns_record_and_keeps_verification_on() -> None:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    arn = "arn:aws:acm:us-east-1:123456789012:certificate/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
    data["endpoint"] = {**data.get("endpoint", {}), "certificate_arn": arn}
    message = closing.how_to_reach(
        parse_config(data, "tls"), "123456789012", "internal-k8s-whisper-abc.elb.us-east-1.amazonaws.com"
    )
    assert f"export NAME=$(aws acm describe-certificate --certificate-arn {arn} --region us-east-1" in message
    assert "a CNAME record  $NAME -> $LB" in message and "aws route53 change-resource-record-sets" in message
    assert f"kubectl --context {CONTEXT} -n whisper port-forward service/whisper 8443:443 &" in message
    assert 'curl -s --resolve $NAME:8443:127.0.0.1 "$BASE/ping"' in message
    assert "export BASE=https://$NAME:8443" in message and "/etc/hosts" in message
    data["endpoint"]["domain_name"] = "asr.example.com"
    assert "export NAME=asr.example.com" in closing.how_to_reach(parse_config(data, "tls"), "123456789012", None)
    exports = cli.env_exports(parse_config(data, "tls"), "c.yaml")
    assert f"export CERTIFICATE_ARN={arn}" in exports and "export NAME=asr.example.com" in exports


def test_the_route53_change_batch_is_valid_json_once_the_shell_expands_it() -> None:
    (command,) = [line for line in closing.dns_record_lines(load_config()) if "change-resource-record-sets" in line]
    batch = subprocess.run(
        ["bash", "-c", f"NAME=asr.example.com LB=lb.elb.amazonaws.com ZONE_ID=Z1; aws() {{ printf %s \"${{@: -1}}\"; }}; {command.strip()}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    record = json.loads(batch)["Changes"][0]["ResourceRecordSet"]
    assert record == {"Name": "asr.example.com", "Type": "CNAME", "TTL": 300,
                      "ResourceRecords": [{"Value": "lb.elb.amazonaws.com"}]}  # fmt: skip


def test_openai_example_is_the_same_command_in_the_dry_run_and_the_docs() -> None:
    text = "\n".join(_dry_run_lines("deploy", DEFAULT_CONFIG_PATH))
    (printed,) = [line.strip() for line in text.splitlines() if "from openai import OpenAI" in line]
    assert printed.startswith(".venv/bin/python -c ")
    documented = [line for line in DEPLOY_DOC.read_text(encoding="utf-8").splitlines() if "from openai import" in line]
    assert documented and all(line.startswith(".venv/bin/python -c ") for line in documented)
    assert printed in documented
