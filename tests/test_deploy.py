"""``make deploy`` / ``make destroy`` (``whisper_build.workstation.deploy``): the command sequence in
dry-run for the default and a custom project config, the runner (order, skips, failures, resume
hint), and the AWS calls against botocore's Stubber and moto."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from moto import mock_aws

from settings import DEFAULT_CONFIG_PATH, load_config, parse_config
from whisper_build.workstation.deploy import aws, cli
from whisper_build.workstation.deploy.plan import deploy_steps

REPO_ROOT = Path(__file__).resolve().parent.parent
REGION = "us-east-1"
CONTEXT = "arn:aws:eks:us-east-1:123456789012:cluster/whisper-hyperpod"


@pytest.fixture()
def custom_config(tmp_path: Path) -> Path:
    """The default config with another project name and region."""
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    data.update(project_name="speech-prod", region="eu-west-1")
    path = tmp_path / "my config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _dry_run(action: str, config: Path, *extra: str) -> list[str]:
    lines: list[str] = []

    class NoBoto:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError("a dry run must not touch AWS")

    def no_commands(argv: Sequence[str]) -> None:
        raise AssertionError(f"a dry run must not run {argv}")

    code = cli.main([action, "--config", str(config), "--dry-run", *extra], out=lines.append,
                    run_command=no_commands, boto3_module=NoBoto())  # fmt: skip
    assert code == 0
    return lines


@pytest.mark.parametrize(
    ("config_fixture", "project", "prefix", "region"),
    [(None, "whisper-hyperpod", "WhisperHyperpod", "us-east-1"), ("custom", "speech-prod", "SpeechProd", "eu-west-1")],
)
def test_dry_run_carries_the_config_through_every_step(
    config_fixture: str | None, project: str, prefix: str, region: str, custom_config: Path
) -> None:
    config_path = custom_config if config_fixture else DEFAULT_CONFIG_PATH
    shown = str(config_path) if config_fixture else "config/default.yaml"
    lines = _dry_run("deploy", config_path)
    commands = [line.strip().removeprefix("$ ") for line in lines if line.strip().startswith("$ ")]
    steps = [line.split(":")[0] for line in lines if line.startswith("[")]
    assert steps == [f"[{i}/10] {name}" for i, name in enumerate(
        ["capacity", "bootstrap", "storage", "hyperpod-chart", "stacks", "kubectl", "serving-image", "engines", "rollout", "serving"], 1
    )]  # fmt: skip
    cdk_commands = [c for c in commands if c.startswith("npx cdk")]
    assert len(cdk_commands) == 3
    for command in cdk_commands:
        assert command.endswith(shlex.join(["-c", f"config={shown}"]))
    assert f"npx cdk deploy {prefix}Storage --exclusively" in cdk_commands[1]
    assert shlex.join(["scripts/publish_hyperpod_chart.sh", shown]) in commands
    kubectl = [command for command in commands if command.startswith("kubectl")]
    assert kubectl and all(
        command.startswith(f"kubectl --context 'arn:aws:eks:{region}:<account>:cluster/{project}' -n whisper ")
        for command in kubectl
    ), kubectl
    for command in commands:
        if command.startswith("aws ") or command.startswith("kubectl"):
            assert region in command
            assert project in command or "deployment/whisper-" in command or "instance-type-offerings" in command
    text = "\n".join(lines)
    for name in (
        f"{project}-serving-image",
        f"{project}-engine-sm86",
        f"{project}-engine-sm89",
        f"{project}-rollout",
        f"--name {project} --region {region}",
        f"{project}/charts/hyperpod-helm-chart:0.1.0-067d658",
    ):
        assert name in text  # fmt: skip
    if config_fixture:
        assert "whisper-hyperpod" not in text and "WhisperHyperpod" not in text


def test_dry_run_of_destroy_names_the_config(custom_config: Path) -> None:
    lines = _dry_run("destroy", custom_config, "--purge")
    assert f"$ npx cdk destroy --all --force -c 'config={custom_config}'" in [line.strip() for line in lines]
    assert any("Key=project,Values=speech-prod" in line and "then delete them" in line and "--region eu-west-1" in line
               for line in lines)  # fmt: skip


def test_make_deploy_dry_run_runs_the_same_plan_and_installs_nothing(custom_config: Path) -> None:
    completed = subprocess.run(
        ["make", "-s", "deploy", "DRY_RUN=1", f"CONFIG={custom_config}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "[10/10] serving" in completed.stdout and "speech-prod-rollout" in completed.stdout
    # even with every install input "modified" (-W), a dry run's recipe has no install step
    planned = subprocess.run(
        ["make", "-n", "-W", "requirements.txt", "-W", "requirements-checkov.txt", "-W", "package.json",
         "deploy", "DRY_RUN=1", f"CONFIG={custom_config}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "pip install" not in planned and "npm install" not in planned and "--dry-run" in planned
    planned = subprocess.run(["make", "-n", "-W", "requirements.txt", "deploy", f"CONFIG={custom_config}"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
    assert "pip install" in planned  # the real deploy does install


def test_pipeline_configs_are_refused_with_the_way_to_deploy_them(capsys: pytest.CaptureFixture[str]) -> None:
    config = REPO_ROOT / "config" / "examples" / "pipeline.yaml"
    assert cli.main(["deploy", "--config", str(config), "--dry-run"]) == 2
    assert f"npx cdk deploy --all -c config={config}" in capsys.readouterr().err


# ---------------------------------------------------------------- the runner, with a recording session
class RecordingSession:
    """Stands in for :class:`cli.AwsSession`: records calls; ``have`` lists ECR images that exist."""

    def __init__(self, have: set[str], fail_builds: set[str] | None = None) -> None:
        self.have = have
        self.fail_builds = fail_builds or set()
        self.calls: list[str] = []

    def image_exists(self, repository: str, tag: str) -> bool:
        self.calls.append(f"image_exists {repository}:{tag}")
        return f"{repository}:{tag}" in self.have

    def run_builds(self, projects: Sequence[str]) -> None:
        self.calls.append(f"builds {' '.join(projects)}")
        failed = self.fail_builds & set(projects)
        if failed:
            raise aws.DeployError(f"CodeBuild project {sorted(failed)[0]} ended FAILED")

    def grant_kubectl(self, cluster: str, namespace: str) -> None:
        self.calls.append(f"grant {cluster} {namespace}")

    def check_capacity(self) -> None:
        self.calls.append("capacity")

    def pod_report(self) -> list[str]:
        return ["whisper-g5-abc: waiting: Init:Error, expected on a first deploy"]


def _run_plan(session: RecordingSession, config_path: Path = DEFAULT_CONFIG_PATH) -> tuple[list[str], list[str]]:
    config = load_config(config_path)
    commands: list[str] = []
    lines: list[str] = []
    steps = deploy_steps(config, "cfg.yaml", "123456789012")
    cli.Runner(steps, session, lines.append, lambda argv: commands.append(" ".join(argv)), clock=lambda: 0.0).run()  # type: ignore[arg-type]
    return commands, lines


def test_first_deploy_runs_every_step_in_order() -> None:
    session = RecordingSession(have=set())
    commands, lines = _run_plan(session)
    assert commands == [
        "npx cdk bootstrap aws://123456789012/us-east-1 -c config=cfg.yaml",
        "npx cdk deploy WhisperHyperpodStorage --exclusively --require-approval never --import-existing-resources "
        "-c config=cfg.yaml",
        "scripts/publish_hyperpod_chart.sh cfg.yaml",
        "npx cdk deploy --all --require-approval never -c config=cfg.yaml",
        "aws eks update-kubeconfig --name whisper-hyperpod --region us-east-1",  # kubectl right after the cluster
        # this config's cluster, never the kubeconfig's current context (another config's, maybe)
        f"kubectl --context {CONTEXT} -n whisper rollout status deployment/whisper-g5 --timeout=900s",
        f"kubectl --context {CONTEXT} -n whisper rollout status deployment/whisper-g6e --timeout=900s",  # one deadline
    ]
    assert session.calls == [
        "capacity",
        "image_exists whisper-hyperpod/charts/hyperpod-helm-chart:0.1.0-067d658",
        "grant whisper-hyperpod whisper",
        "image_exists whisper-hyperpod/whisper-serving:0.1.0",
        "builds whisper-hyperpod-serving-image",
        "builds whisper-hyperpod-engine-sm86 whisper-hyperpod-engine-sm89",
        "builds whisper-hyperpod-rollout",
    ]
    assert sum(line.strip().startswith("done in ") for line in lines) == 10


def test_rerun_skips_the_chart_and_image_that_exist() -> None:
    session = RecordingSession(
        have={"whisper-hyperpod/charts/hyperpod-helm-chart:0.1.0-067d658", "whisper-hyperpod/whisper-serving:0.1.0"}
    )
    commands, lines = _run_plan(session)
    assert "scripts/publish_hyperpod_chart.sh cfg.yaml" not in commands
    assert "builds whisper-hyperpod-serving-image" not in session.calls
    assert sum(line.strip() == "skipped: already done" for line in lines) == 2


def test_a_failed_step_stops_the_run_naming_it_and_how_to_resume() -> None:
    session = RecordingSession(have=set(), fail_builds={"whisper-hyperpod-engine-sm89"})
    with pytest.raises(
        aws.DeployError, match=r"step 'engines' failed after .*whisper-hyperpod-engine-sm89.*run the same"
    ):
        _run_plan(session)
    assert "builds whisper-hyperpod-rollout" not in session.calls


def test_a_failing_command_stops_the_run() -> None:
    config = load_config()

    def fail(argv: Sequence[str]) -> None:
        raise subprocess.CalledProcessError(1, list(argv))

    with pytest.raises(aws.DeployError, match="step 'bootstrap' failed"):
        cli.Runner(deploy_steps(config, "c.yaml", "1"), RecordingSession(set()), lambda _: None, fail).run()  # type: ignore[arg-type]


def test_endpoint_message_for_an_internal_nlb() -> None:
    config = load_config()
    status = {
        "status": {"loadBalancer": {"ingress": [{"hostname": "internal-k8s-whisper-abc.elb.us-east-1.amazonaws.com"}]}}
    }
    seen: list[Sequence[str]] = []

    def kubectl(argv: Sequence[str]) -> str:
        seen.append(argv)
        return json.dumps(status)

    hostname = cli.endpoint_address(config, "123456789012", kubectl)
    assert seen == [("kubectl", "--context", CONTEXT, "-n", "whisper", "get", "service", "whisper", "-o", "json")]
    message = cli.how_to_reach(config, "123456789012", hostname)
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
    assert cli.endpoint_address(config, "123456789012", lambda argv: json.dumps({"status": {}})) is None


def test_endpoint_message_with_tls_names_the_dns_record_and_keeps_verification_on() -> None:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    arn = "arn:aws:acm:us-east-1:123456789012:certificate/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
    data["endpoint"] = {**data.get("endpoint", {}), "certificate_arn": arn}
    message = cli.how_to_reach(
        parse_config(data, "tls"), "123456789012", "internal-k8s-whisper-abc.elb.us-east-1.amazonaws.com"
    )
    assert f"export NAME=$(aws acm describe-certificate --certificate-arn {arn} --region us-east-1" in message
    assert "a CNAME record  $NAME -> $LB" in message and "aws route53 change-resource-record-sets" in message
    assert f"kubectl --context {CONTEXT} -n whisper port-forward service/whisper 8443:443 &" in message
    assert 'curl -s --resolve $NAME:8443:127.0.0.1 "$BASE/ping"' in message
    assert "export BASE=https://$NAME:8443" in message and "/etc/hosts" in message
    data["endpoint"]["domain_name"] = "asr.example.com"
    assert "export NAME=asr.example.com" in cli.how_to_reach(parse_config(data, "tls"), "123456789012", None)
    exports = cli.env_exports(parse_config(data, "tls"), "c.yaml")
    assert f"export CERTIFICATE_ARN={arn}" in exports and "export NAME=asr.example.com" in exports


def test_the_route53_change_batch_is_valid_json_once_the_shell_expands_it() -> None:
    (command,) = [line for line in cli.dns_record_lines(load_config()) if "change-resource-record-sets" in line]
    batch = subprocess.run(
        ["bash", "-c", f"NAME=asr.example.com LB=lb.elb.amazonaws.com ZONE_ID=Z1; aws() {{ printf %s \"${{@: -1}}\"; }}; {command.strip()}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    record = json.loads(batch)["Changes"][0]["ResourceRecordSet"]
    assert record == {"Name": "asr.example.com", "Type": "CNAME", "TTL": 300,
                      "ResourceRecords": [{"Value": "lb.elb.amazonaws.com"}]}  # fmt: skip


def test_env_prints_the_config_names_as_shell_exports(custom_config: Path) -> None:
    lines: list[str] = []
    assert cli.main(["env", "--config", str(custom_config)], out=lines.append) == 0
    exported = subprocess.run(["bash", "-c", lines[0] + '\necho "$PROJECT|$REGION|$NAMESPACE|$STACK_PREFIX|$CONFIG"'],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert exported == f"speech-prod|eu-west-1|whisper|SpeechProd|{custom_config}"


def test_only_runs_one_step_and_rejects_unknown_ones(custom_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _dry_run("deploy", custom_config, "--only", "kubectl")
    assert [line.split(":")[0] for line in lines if line.startswith("[")] == ["[1/1] kubectl"]
    assert cli.main(["deploy", "--config", str(custom_config), "--dry-run", "--only", "kubeconfig"]) == 2
    assert "no such step; steps: capacity, bootstrap, storage" in capsys.readouterr().err


# ---------------------------------------------------------------- AWS calls: Stubber and moto
def _client(service: str) -> Any:
    return boto3.client(service, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")


def test_run_builds_waits_for_every_build_and_reports_failures() -> None:
    codebuild = _client("codebuild")
    stub = Stubber(codebuild)
    running = {"id": "a:1", "currentPhase": "BUILD", "buildComplete": False, "buildStatus": "IN_PROGRESS"}
    stub.add_response("list_builds_for_project", {}, {"projectName": "a", "sortOrder": "DESCENDING"})
    stub.add_response("start_build", {"build": {"id": "a:1"}}, {"projectName": "a"})
    stub.add_response("list_builds_for_project", {"ids": ["b:0"]}, {"projectName": "b", "sortOrder": "DESCENDING"})
    stub.add_response("batch_get_builds", {"builds": [{"id": "b:0", "buildStatus": "SUCCEEDED"}]}, {"ids": ["b:0"]})
    stub.add_response("start_build", {"build": {"id": "b:1"}}, {"projectName": "b"})
    stub.add_response("batch_get_builds", {"builds": [running, {**running, "id": "b:1", "currentPhase": "PROVISIONING"}]},
                      {"ids": ["a:1", "b:1"]})  # fmt: skip
    stub.add_response(
        "batch_get_builds",
        {"builds": [{**running, "currentPhase": "COMPLETED", "buildComplete": True, "buildStatus": "SUCCEEDED"},
                    {**running, "id": "b:1", "currentPhase": "BUILD"}]},
        {"ids": ["a:1", "b:1"]},
    )  # fmt: skip
    stub.add_response(
        "batch_get_builds",
        {"builds": [{"id": "b:1", "currentPhase": "COMPLETED", "buildComplete": True, "buildStatus": "FAILED",
                     "logs": {"deepLink": "https://console/logs/b"}}]},
        {"ids": ["b:1"]},
    )  # fmt: skip
    reports: list[str] = []
    sleeps: list[float] = []
    with stub, pytest.raises(aws.DeployError) as raised:
        aws.run_builds(codebuild, ["a", "b"], reports.append, poll_s=7, sleep=sleeps.append)
    stub.assert_no_pending_responses()
    assert str(raised.value) == "CodeBuild project b ended FAILED (build b:1, logs: https://console/logs/b)"
    assert reports == ["a: build", "b: provisioning", "a: completed", "b: build", "b: completed"]
    assert sleeps == [7, 7]


def test_run_builds_waits_for_a_build_still_running_instead_of_starting_another() -> None:
    codebuild = _client("codebuild")
    stub = Stubber(codebuild)
    stub.add_response("list_builds_for_project", {"ids": ["img:7", "img:6"]},
                      {"projectName": "img", "sortOrder": "DESCENDING"})  # fmt: skip
    stub.add_response(
        "batch_get_builds", {"builds": [{"id": "img:7", "buildStatus": "IN_PROGRESS"}]}, {"ids": ["img:7"]}
    )
    done = {"id": "img:7", "currentPhase": "COMPLETED", "buildComplete": True, "buildStatus": "SUCCEEDED"}
    stub.add_response("batch_get_builds", {"builds": [done]}, {"ids": ["img:7"]})
    reports: list[str] = []
    with stub:
        (result,) = aws.run_builds(codebuild, ["img"], reports.append, sleep=lambda _: None)
    stub.assert_no_pending_responses()  # no start_build
    assert result.build_id == "img:7" and reports[0] == "img: build img:7 already running, waiting for it"


def test_image_exists_reads_ecr_errors() -> None:
    ecr = _client("ecr")
    stub = Stubber(ecr)
    params = {"repositoryName": "p/whisper-serving", "imageIds": [{"imageTag": "0.1.0"}]}
    stub.add_response("describe_images", {"imageDetails": [{"imageTags": ["0.1.0"]}]}, params)
    stub.add_client_error("describe_images", "ImageNotFoundException", expected_params=params)
    stub.add_client_error("describe_images", "RepositoryNotFoundException", expected_params=params)
    stub.add_client_error("describe_images", "AccessDeniedException", expected_params=params)
    with stub:
        assert aws.image_exists(ecr, "p/whisper-serving", "0.1.0") is True
        assert aws.image_exists(ecr, "p/whisper-serving", "0.1.0") is False
        assert aws.image_exists(ecr, "p/whisper-serving", "0.1.0") is False
        with pytest.raises(aws.ClientError, match="AccessDenied"):
            aws.image_exists(ecr, "p/whisper-serving", "0.1.0")


def test_access_entry_is_created_once_and_scoped_to_the_namespace() -> None:
    eks = _client("eks")
    stub = Stubber(eks)
    role = "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_1"
    associate = {
        "clusterName": "c", "principalArn": role, "policyArn": aws.EKS_NAMESPACE_ADMIN_POLICY,
        "accessScope": {"type": "namespace", "namespaces": ["whisper"]},
    }  # fmt: skip
    stub.add_response("create_access_entry", {}, {"clusterName": "c", "principalArn": role})
    stub.add_response("associate_access_policy", {}, associate)
    stub.add_client_error("create_access_entry", "ResourceInUseException")
    stub.add_response("associate_access_policy", {}, associate)
    with stub:
        assert aws.ensure_access_entry(eks, "c", role, "whisper") is True
        assert aws.ensure_access_entry(eks, "c", role, "whisper") is False
    stub.assert_no_pending_responses()


@mock_aws
def test_access_entry_principal_keeps_the_role_path() -> None:
    iam = _client("iam")
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    iam.create_role(RoleName="AWSReservedSSO_Admin_1", Path="/aws-reserved/sso.amazonaws.com/",
                    AssumeRolePolicyDocument=trust)  # fmt: skip
    session_arn = "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Admin_1/me@example.com"
    principal = aws.access_entry_principal(session_arn, iam)
    assert principal.endswith(":role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_1")
    user = "arn:aws:iam::123456789012:user/ci"
    assert aws.access_entry_principal(user, iam) == user


@mock_aws
def test_retained_resources_are_listed_and_purged() -> None:
    config = load_config()
    s3 = _client("s3")
    ecr = _client("ecr")
    models = f"whisper-hyperpod-models-123456789012-{REGION}"
    logs = "whisperhyperpodstorage-accesslogs-1x2y3z"
    for bucket in (models, logs):
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_tagging(Bucket=logs, Tagging={"TagSet": [{"Key": "project", "Value": "whisper-hyperpod"}]})
    for version in (b"v1", b"v2"):
        s3.put_object(Bucket=models, Key="models/large-v3-turbo/sm86/current.json", Body=version)
    ecr.create_repository(repositoryName="whisper-hyperpod/whisper-serving")
    tags = [{"TagKey": "project", "TagValue": "whisper-hyperpod"}]
    kms = _client("kms")
    key = kms.create_key(Description="whisper-hyperpod: envelope encryption of Kubernetes Secrets (EKS)", Tags=tags)
    pending = kms.create_key(Description="already scheduled", Tags=tags)["KeyMetadata"]["KeyId"]
    kms.schedule_key_deletion(KeyId=pending, PendingWindowInDays=7)
    kms.create_key(Description="another project", Tags=[{"TagKey": "project", "TagValue": "other"}])
    secrets = _client("secretsmanager")
    old_secret = secrets.create_secret(Name="whisper-hyperpod/gateway-api-keys", SecretString="{}",
                                       Tags=[{"Key": "project", "Value": "whisper-hyperpod"}])["ARN"]  # fmt: skip
    logs_client = _client("logs")
    for group in ("/aws/eks/whisper-hyperpod/cluster", "/aws/codebuild/whisper-hyperpod-engine-sm86",
                  "/aws/lambda/WhisperHyperpodCluster-KubectlHandler-abc", "/aws/eks/whisper-hyperpod-2/cluster",
                  "/aws/lambda/WhisperHyperpodProdCluster-Handler-x"):  # fmt: skip
        logs_client.create_log_group(logGroupName=group)
    lines: list[str] = []
    session = cli.AwsSession(config, "123456789012", "arn:aws:iam::123456789012:user/me",
                             lambda service, region_name: _client(service),
                             lambda service, region_name: boto3.resource(service, region_name=region_name),
                             lines.append)  # fmt: skip

    session.report_retained(purge=False)
    listed = "\n".join(lines)
    assert f"s3-bucket {models}: model engines" in listed
    assert f"s3-bucket {logs}: server access logs" in listed
    assert "ecr-repository whisper-hyperpod/whisper-serving: serving images" in listed
    assert "make destroy CONFIG=<this config> PURGE=1" in listed
    assert "aws ecr delete-repository --repository-name whisper-hyperpod/whisper-serving --force" in listed
    key_id = key["KeyMetadata"]["KeyId"]
    assert f"kms-key {key_id}: KMS key tagged with the project" in listed and pending not in listed
    assert f"aws kms schedule-key-deletion --key-id {key_id} --pending-window-in-days 7 --region {REGION}" in listed
    assert f"secret {old_secret}: secret tagged with the project" in listed
    assert f"aws secretsmanager delete-secret --secret-id {old_secret} --force-delete-without-recovery" in listed
    listed_groups = {item.name for item in session.retained() if item.kind == "log-group"}
    assert listed_groups == {"/aws/eks/whisper-hyperpod/cluster", "/aws/codebuild/whisper-hyperpod-engine-sm86",
                             "/aws/lambda/WhisperHyperpodCluster-KubectlHandler-abc"}  # fmt: skip
    assert f"aws logs delete-log-group --log-group-name /aws/eks/whisper-hyperpod/cluster --region {REGION}" in listed

    session.report_retained(purge=True)
    assert session.retained() == []
    assert s3.list_buckets()["Buckets"] == []
    assert ecr.describe_repositories()["repositories"] == []
    assert kms.describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"] == "PendingDeletion"
    assert {g["logGroupName"] for g in logs_client.describe_log_groups()["logGroups"]} == {
        "/aws/eks/whisper-hyperpod-2/cluster", "/aws/lambda/WhisperHyperpodProdCluster-Handler-x"}  # fmt: skip
