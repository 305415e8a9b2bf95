"""Secure endpoint by default (docs/deploy.md, Security): synthesis refuses an exposed endpoint
without TLS, keys or narrow source ranges; TLS listeners and source ranges reach the load balancer;
NetworkPolicies isolate the serving pods; EKS Secrets and the API keys use customer-managed KMS keys;
checkov gates templates and manifests with every skip explained."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_logs as logs
from cdk_assembly import CONFIGS, REPO_ROOT, synthesized
from k8s_support import CERTIFICATE_ARN, PUBLIC_TLS_ENDPOINT, config_with, of_kind, synth, validate

from k8s_charts import network_policy
from k8s_charts.endpoint import TLS_POLICY
from settings import ConfigError
from stacks.checkov_skips import GLOBAL_SKIPS, skip_check
from stacks.gates import run_checkov
from whisper_build.serving.gateway.auth import parse_secret
from whisper_build.workstation import api_keys as api_keys_cli

NLB = "service.beta.kubernetes.io/aws-load-balancer-"


# --- refusals (one per rule; the message names the field) -------------------------------------


def _synth_script(tmp_path: Path, endpoint: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    data = yaml.safe_load((REPO_ROOT / "config" / "default.yaml").read_text())
    data["endpoint"] = {**data["endpoint"], **endpoint}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return subprocess.run(
        [sys.executable, "-m", "scripts.synth", "--config", str(path), "--outdir", str(tmp_path / "out")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"certificate_arn": None}, "endpoint.certificate_arn: required for scheme internet-facing"),
        ({"auth": "none"}, "endpoint.auth: 'none' leaves an internet-facing endpoint unauthenticated"),
        ({"allowed_cidrs": None}, "endpoint.allowed_cidrs: required for scheme internet-facing"),
        ({"allowed_cidrs": ["203.0.113.0/24", "0.0.0.0/0"]}, "endpoint.allowed_cidrs: 0.0.0.0/0 opens the endpoint"),
    ],
    ids=["no-certificate", "auth-off", "no-source-ranges", "open-to-internet"],
)
def test_internet_facing_is_refused_unless_secured(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_with(endpoint={**PUBLIC_TLS_ENDPOINT, **change})
    assert field in str(caught.value)


def test_a_certificate_of_another_region_or_account_is_refused() -> None:
    in_oregon = CERTIFICATE_ARN.replace(":us-east-1:", ":us-west-2:")
    with pytest.raises(ConfigError) as caught:
        config_with(endpoint={**PUBLIC_TLS_ENDPOINT, "certificate_arn": in_oregon})
    message = str(caught.value)
    assert "endpoint.certificate_arn: the certificate is in us-west-2" in message
    assert "request or import the certificate in us-east-1" in message
    with pytest.raises(ConfigError, match="endpoint.certificate_arn: the certificate belongs to account 123456789012"):
        config_with(account="210987654321", endpoint={**PUBLIC_TLS_ENDPOINT})
    assert config_with(account="123456789012", endpoint={**PUBLIC_TLS_ENDPOINT}).endpoint.tls


def test_the_refusal_names_every_violated_field_and_fails_make_synth(tmp_path: Path) -> None:
    endpoint = {"scheme": "internet-facing", "auth": "none", "allowed_cidrs": ["0.0.0.0/0"]}
    result = _synth_script(tmp_path, endpoint)
    assert result.returncode == 2, result.stdout + result.stderr
    for field in ("endpoint.certificate_arn", "endpoint.auth", "endpoint.allowed_cidrs"):
        assert field in result.stderr
    assert not (tmp_path / "out").exists()


def test_an_acknowledged_open_endpoint_is_accepted() -> None:
    config = config_with(
        endpoint={**PUBLIC_TLS_ENDPOINT, "allowed_cidrs": ["0.0.0.0/0"], "acknowledge_open_to_internet": True}
    )
    assert config.endpoint_source_cidrs == ["0.0.0.0/0"]


def test_an_nlb_tls_listener_keeps_its_fixed_idle_timeout() -> None:
    with pytest.raises(ValueError, match=r"endpoint.idle_timeout_seconds \(600\).*fixed 350 s"):
        synth(config_with(endpoint={**PUBLIC_TLS_ENDPOINT, "idle_timeout_seconds": 600}))


# --- TLS and source ranges on the load balancer --------------------------------------------


def test_nlb_with_a_certificate_listens_with_tls_only() -> None:
    (service,) = of_kind(synth(config_with(endpoint=PUBLIC_TLS_ENDPOINT)), "Service").values()
    annotations = service["metadata"]["annotations"]
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("https", 443)]  # no plaintext port
    assert annotations[NLB + "ssl-cert"] == CERTIFICATE_ARN and annotations[NLB + "ssl-ports"] == "443"
    assert annotations[NLB + "ssl-negotiation-policy"] == TLS_POLICY == "ELBSecurityPolicy-TLS13-1-2-2021-06"
    assert annotations["service.beta.kubernetes.io/load-balancer-source-ranges"] == "203.0.113.0/24"
    assert annotations[NLB + "scheme"] == "internet-facing"
    assert "preserve_client_ip.enabled=false" in annotations[NLB + "target-group-attributes"]
    assert not [key for key in annotations if "listener-attributes.TCP" in key]


def test_the_default_internal_endpoint_admits_only_the_vpc() -> None:
    config = config_with()
    (service,) = of_kind(synth(config), "Service").values()
    annotations = service["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/load-balancer-source-ranges"] == config.network.vpc_cidr
    assert annotations[NLB + "scheme"] == "internal" and service["spec"]["ports"][0]["port"] == 80


def test_alb_with_a_certificate_listens_with_https_only() -> None:
    (ingress,) = of_kind(synth(config_with(endpoint={"kind": "alb", **PUBLIC_TLS_ENDPOINT})), "Ingress").values()
    annotations = {
        k.removeprefix("alb.ingress.kubernetes.io/"): v for k, v in ingress["metadata"]["annotations"].items()
    }
    assert json.loads(annotations["listen-ports"]) == [{"HTTPS": 443}]
    assert annotations["certificate-arn"] == CERTIFICATE_ARN and annotations["ssl-policy"] == TLS_POLICY
    assert annotations["inbound-cidrs"] == "203.0.113.0/24"


# --- NetworkPolicies ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def policies() -> dict[str, dict[str, Any]]:
    config = config_with()
    manifests = synth(config)
    found = [m for m in manifests if m["kind"] == "NetworkPolicy"]
    for manifest in found:
        assert validate(manifest, config.cluster.kubernetes_version).startswith("k8s:")
    # the GPU metrics namespace: default deny + the DCGM exporter port from the scraper only
    exporters = {m["metadata"]["name"]: m["spec"] for m in found if m["metadata"]["namespace"] == "whisper-gpu-metrics"}
    assert set(exporters) == {"default-deny", "metrics-ingress"}
    assert _ports(exporters["metrics-ingress"]["ingress"]) == {9400}
    return {m["metadata"]["name"]: m["spec"] for m in found if m["metadata"]["namespace"] == config.serving.namespace}


def test_default_deny_covers_every_pod_both_ways(policies) -> None:
    assert policies["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def _ports(rules: list[dict[str, Any]]) -> set[int]:
    return {port["port"] for rule in rules for port in rule["ports"]}


def test_only_the_gateway_and_metrics_ports_are_reachable(policies) -> None:
    config = config_with()
    ingress = [rule for spec in policies.values() for rule in spec.get("ingress", [])]
    assert _ports(ingress) == {8080, 8081, 8002}  # never Triton's HTTP/gRPC (8000, 8001)
    gateway = policies["gateway-ingress"]["ingress"]
    assert gateway == [
        {"from": [{"ipBlock": {"cidr": config.network.vpc_cidr}}], "ports": [{"port": 8080, "protocol": "TCP"}]}
    ]


def test_egress_is_dns_pod_identity_and_https_in_the_vpc(policies) -> None:
    egress = policies["serving-egress"]["egress"]
    dns, pod_identity, https = egress
    assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert pod_identity == {
        "to": [{"ipBlock": {"cidr": network_policy.POD_IDENTITY_AGENT_CIDR}}],
        "ports": [{"port": 80, "protocol": "TCP"}],
    }
    assert https["to"] == [{"ipBlock": {"cidr": config_with().network.vpc_cidr}}] and _ports([https]) == {443}


# --- AWS: customer-managed keys, network policy add-on, API keys secret -----------------------


@pytest.fixture(scope="module")
def default():
    result = synthesized(CONFIGS["default"])
    assert result.stacks is not None, result.error
    return result


def _of_type(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == resource_type}


@pytest.mark.slow
def test_eks_secrets_use_a_rotating_customer_managed_key(default) -> None:
    template = default.template_json(default.stacks.cluster.artifact_id)
    (cluster,) = _of_type(template, "AWS::EKS::Cluster").values()
    (encryption,) = cluster["Properties"]["EncryptionConfig"]
    assert encryption["Resources"] == ["secrets"]
    key_id = encryption["Provider"]["KeyArn"]["Fn::GetAtt"][0]
    assert template["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True
    assert template["Resources"][key_id]["DeletionPolicy"] == "Retain"  # make destroy lists it (docs/deploy.md)


@pytest.mark.slow
def test_vpc_cni_enforces_network_policies(default) -> None:
    template = default.template_json(default.stacks.cluster.artifact_id)
    (cni,) = [a for a in _of_type(template, "AWS::EKS::Addon").values() if a["Properties"]["AddonName"] == "vpc-cni"]
    assert json.loads(cni["Properties"]["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}


@pytest.mark.slow
def test_api_keys_secret_is_kms_encrypted_and_readable_by_the_serving_pods_only(default) -> None:
    template = default.template_json(default.stacks.workloads.artifact_id)
    ((secret_id, secret),) = _of_type(template, "AWS::SecretsManager::Secret").items()
    # CloudFormation names it and deletes it with the stack: a redeploy after `make destroy` never collides
    assert "Name" not in secret["Properties"] and secret["DeletionPolicy"] == "Delete"
    generated = secret["Properties"]["GenerateSecretString"]
    assert json.loads(generated["SecretStringTemplate"]) == {} and generated["GenerateStringKey"] == "primary"
    key_id = secret["Properties"]["KmsKeyId"]["Fn::GetAtt"][0]
    assert template["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True
    assert template["Resources"][key_id]["DeletionPolicy"] == "Delete"  # goes with its secret
    associations = [a["Properties"] for a in _of_type(template, "AWS::EKS::PodIdentityAssociation").values()]
    (serving,) = [a for a in associations if a["Namespace"] == default.config.serving.namespace]
    assert serving["ServiceAccount"] == "whisper-serving"
    role_id = serving["RoleArn"]["Fn::GetAtt"][0]
    statements = [
        s
        for p in _of_type(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    secret_reads = [s for s in statements if "secretsmanager:GetSecretValue" in s["Action"]]
    assert secret_reads and all(s["Resource"] == {"Ref": secret_id} for s in secret_reads)
    outputs = template["Outputs"]
    assert any(k.startswith("ApiKeysSecretArn") for k in outputs)


@pytest.mark.slow
def test_secrets_manager_is_reached_inside_the_vpc(default) -> None:
    template = default.template_json(default.stacks.network.artifact_id)
    endpoints = _of_type(template, "AWS::EC2::VPCEndpoint").values()
    (endpoint,) = [e for e in endpoints if e["Properties"].get("VpcEndpointType") == "Interface"]
    assert "secretsmanager" in json.dumps(endpoint["Properties"]["ServiceName"])
    assert endpoint["Properties"]["PrivateDnsEnabled"] is True


def test_auth_off_creates_no_secret_and_no_key_variable() -> None:
    config = config_with(endpoint={"auth": "none"})
    manifests = synth(config)
    for deployment in of_kind(manifests, "Deployment").values():
        env = {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert "WHISPER_GATEWAY_API_KEYS_SECRET" not in env


# --- checkov gate ------------------------------------------------------------------------------


@pytest.mark.slow
def test_checkov_finds_nothing_unexplained_in_templates_and_manifests(default, tmp_path: Path) -> None:
    from k8s_charts.synth import synth_yaml

    manifests = synth_yaml(default.config, tmp_path)
    result = run_checkov([*default.templates.values(), *manifests])
    assert result.findings == [], "\n".join(map(str, result.findings))
    assert result.passed > 500
    assert result.skipped and all(len(reason) >= 20 for _, _, reason in result.skipped)


def _probe_template(tmp_path: Path, skip: bool) -> Path:
    app = cdk.App(outdir=str(tmp_path / "cdk"))
    stack = cdk.Stack(app, "Probe")
    group = logs.LogGroup(stack, "Logs", retention=logs.RetentionDays.ONE_DAY)
    if skip:
        skip_check(group, "CKV_AWS_158", "probe: CloudWatch Logs encrypts at rest by default")
    app.synth()
    path = tmp_path / "cdk" / "Probe.template.json"
    assert path.exists()
    return path


def test_checkov_gate_catches_an_unencrypted_log_group_and_honours_a_reasoned_skip(tmp_path: Path) -> None:
    failing = run_checkov([_probe_template(tmp_path / "a", skip=False)])
    assert {f.rule for f in failing.findings} == {"CKV_AWS_158"}
    assert failing.findings[0].gate == "checkov"
    skipped = run_checkov([_probe_template(tmp_path / "b", skip=True)])
    assert skipped.findings == []
    assert [(check, reason) for check, _, reason in skipped.skipped] == [
        ("CKV_AWS_158", "probe: CloudWatch Logs encrypts at rest by default")
    ]


def test_every_skip_has_a_specific_reason() -> None:
    assert all(len(reason) >= 60 for reason in GLOBAL_SKIPS.values())
    with pytest.raises(ValueError, match="specific reason"):
        skip_check(cdk.Stack(cdk.App(), "S"), "CKV_AWS_1", "because")


# --- make api-key ------------------------------------------------------------------------------


def test_api_key_instructions_rotate_through_valid_secret_values(tmp_path: Path) -> None:
    text = api_keys_cli.instructions(config_with())
    assert "--stack-name WhisperHyperpodWorkloads" in text and "OutputKey=='ApiKeysSecretArn'" in text
    values = []
    for line in text.splitlines():
        if "put-secret-value" in line:
            # the shell command as printed, with aws replaced by printing its --secret-string
            argument = line.split("--secret-string ", 1)[1]
            out = subprocess.run(
                ["bash", "-c", f"KEY=old-key NEW=new-key; printf %s {argument}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            values.append(parse_secret(out))
    assert values == [{"old-key", "new-key"}, {"new-key"}]


def test_api_key_instructions_without_auth() -> None:
    assert "checks no API key" in api_keys_cli.instructions(config_with(endpoint={"auth": "none"}))


@pytest.mark.slow
def test_docs_list_every_explained_exception_of_the_default_config(default, tmp_path: Path) -> None:
    from k8s_charts.synth import synth_yaml
    from stacks.gate_report import explained_exceptions, markdown

    report = markdown(explained_exceptions(default.outdir, synth_yaml(default.config, tmp_path)))
    docs = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    assert report in docs, "docs/deploy.md Security is stale: paste `python -m stacks.gate_report` output"


def test_metrics_ports_follow_the_serving_target() -> None:
    from k8s_charts.workload import metrics_env, serving_env
    from observability import queries
    from observability.scrape_config import scrape_jobs

    deployments = config_with()
    operator = config_with(REPO_ROOT / "config" / "examples" / "inference-operator.yaml")
    gateway_port = {
        c.serving.target: {j.name: j.port for j in scrape_jobs(c)}[queries.JOB_GATEWAY] for c in (deployments, operator)
    }
    assert gateway_port == {"deployments": 8081, "inference_operator": operator.serving.gateway_port}
    assert metrics_env(operator) == {"WHISPER_GATEWAY_METRICS_ON_TRAFFIC_PORT": "true"}
    # the operator's SageMaker endpoint authenticates with IAM: its workers get no API-key secret
    assert "WHISPER_GATEWAY_API_KEYS_SECRET" not in serving_env(operator, operator.gpu_groups[0], "arn:x")
