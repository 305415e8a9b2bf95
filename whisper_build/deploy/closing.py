"""What ``make deploy`` / ``make endpoint`` / ``make destroy`` print at the end.

How to reach the endpoint (load balancer, DNS record for TLS, port-forward for an internal one, API
key, first requests), what to check when the load balancer has no address, and what ``make destroy``
leaves on purpose.

Every ``kubectl`` command names the cluster's context (:func:`.kube.context_name` of the account),
as the tool's own calls do, never the current one.
Docs: docs/deploy.md, "After the deploy: reaching the endpoint".
"""

from __future__ import annotations

import shlex

from settings import DeploymentConfig, names
from whisper_build.deploy import kube
from whisper_build.workstation import api_keys

LOCAL_PORT = 8443
"""Local end of ``kubectl port-forward`` in the closing message (8443 with TLS, else 8080)."""


def _certificate_name(config: DeploymentConfig) -> str:
    """Shell expression for the DNS name clients use with TLS: ``endpoint.domain_name`` or the certificate's own."""
    if config.endpoint.domain_name:
        return config.endpoint.domain_name
    return (
        f"$(aws acm describe-certificate --certificate-arn {config.endpoint.certificate_arn} "
        f"--region {config.region} --query Certificate.DomainName --output text)"
    )  # the certificate's primary name


def dns_record_lines(config: DeploymentConfig) -> list[str]:
    """How to point the certificate's DNS name at the load balancer (TLS only): a CNAME ``$NAME`` → ``$LB``.

    TLS clients check that the certificate covers the name they connect to, and the load balancer's
    own ``*.elb.amazonaws.com`` name is not on the certificate. Expects ``NAME`` and ``LB`` exported.
    """
    change = (
        '{"Changes":[{"Action":"UPSERT","ResourceRecordSet":{"Name":"\'"$NAME"\'","Type":"CNAME","TTL":300,'
        '"ResourceRecords":[{"Value":"\'"$LB"\'"}]}}]}'
    )
    return [
        "TLS: clients must connect with the certificate's DNS name. Create a DNS record for it (once per deploy;",
        "the load balancer's name changes when it is re-created):",
        "  a CNAME record  $NAME -> $LB  in the DNS zone of $NAME (Route 53: a CNAME, or an alias A record to the",
        "  load balancer), e.g. with Route 53, ZONE_ID being the hosted zone's id (aws route53 list-hosted-zones):",
        f"  aws route53 change-resource-record-sets --hosted-zone-id \"$ZONE_ID\" --change-batch '{change}'",
    ]


def _endpoint_lines(config: DeploymentConfig, context: str, hostname: str | None, dry_run: bool) -> list[str]:
    """The message's head: the load balancer, ``export LB``, and ``export NAME`` plus the DNS record with TLS."""
    endpoint = config.endpoint
    kind = "service" if endpoint.kind == "nlb" else "ingress"
    port = names.ENDPOINT_TLS_PORT if endpoint.tls else names.ENDPOINT_SERVICE_PORT
    lookup = (
        f"$(kubectl --context {context} -n {config.serving.namespace} get {kind} {names.ENDPOINT_SERVICE_NAME} "
        "-o jsonpath='{.status.loadBalancer.ingress[0].hostname}')"
    )
    lines = [
        "",
        "(dry run) once every step has run and the pods are ready, it prints:" if dry_run else "Whisper is serving.",
        f"Load balancer ({endpoint.scheme} {endpoint.kind.upper()}, port {port}): "
        + (hostname or "still provisioning; LB below reads its name once it exists"),
        f"  export LB={hostname or lookup}",
    ]
    if endpoint.tls:
        lines.append(f"  export NAME={_certificate_name(config)}")
        lines += dns_record_lines(config)
    return lines


def _base_url_lines(config: DeploymentConfig, context: str) -> tuple[list[str], str]:
    """How this machine reaches the endpoint (a port-forward when internal) and ``curl``'s extra options.

    Returns:
        ``(lines ending with export BASE, curl options)``; the options are ``--resolve …`` for an
        internal endpoint with TLS, else empty.
    """
    endpoint, namespace, service = config.endpoint, config.serving.namespace, names.ENDPOINT_SERVICE_NAME
    port = names.ENDPOINT_TLS_PORT if endpoint.tls else names.ENDPOINT_SERVICE_PORT
    lines: list[str] = []
    curl_opts = ""
    if endpoint.scheme == "internal":
        local = LOCAL_PORT if endpoint.tls else 8080
        lines += [
            "It is reachable from inside the VPC only. From this machine, forward a local port (leave it running):",
            f"  kubectl --context {context} -n {namespace} port-forward service/{service} {local}:{port} &",
        ]
        if endpoint.tls:
            base = f"https://$NAME:{local}"
            curl_opts = f"--resolve $NAME:{local}:127.0.0.1 "
            lines.append(
                "  # TLS verification stays on: curl --resolve sends $NAME's requests to the forward; other clients "
                "(openai): add the line '127.0.0.1 $NAME' to /etc/hosts while you test"
            )
        else:
            base = "http://127.0.0.1:8080"
    else:
        base = "https://$NAME"  # internet-facing requires a certificate (settings validation)
    lines.append(f"  export BASE={base}")
    return lines, curl_opts


def _request_lines(config: DeploymentConfig, curl_opts: str) -> list[str]:
    """The API key (``endpoint.auth: api_key``) and the first requests: curl and the official openai client."""
    endpoint = config.endpoint
    lines: list[str] = []
    auth = endpoint.auth == "api_key"
    if auth:
        lines += [
            "  # the API key (make api-key CONFIG=… prints how to rotate it):",
            f"  {api_keys.secret_arn_command(config)}",
            f"  {api_keys.fetch_key_command(config)}",
        ]
    key_header = ' -H "Authorization: Bearer $KEY"' if auth else ""
    body = (
        'python3 -c \'import base64,json,sys; print(json.dumps({"audio_data": '
        'base64.b64encode(open(sys.argv[1], "rb").read()).decode(), "whisper_prompt": ""}))\' recording.wav'
    )
    lines += [
        "  # recording.wav: a recording of your own, or synthetic speech from make bench-audio "
        "(then: cp bench-audio/utterance_0.wav recording.wav)",
        f'  curl -s {curl_opts}"$BASE/ping"',
        f"  {body} \\",
        f"    | curl -s {curl_opts}\"$BASE/invocations\"{key_header} -H 'Content-Type: application/json' -d @-",
        '  # → {"code": 0, "message": "Success", "transcribe_text": "<what recording.wav says>"}',
        "  # OpenAI client (the official openai package, in .venv after make install):",
        "  .venv/bin/python -c \"import os; from openai import OpenAI; c = OpenAI(base_url=os.environ['BASE'] + '/v1', "
        "api_key=os.environ.get('KEY', 'unused')); "
        "print(c.audio.transcriptions.create(model='whisper', file=open('recording.wav', 'rb')).text)\"",
    ]
    if endpoint.scheme == "internal" and not endpoint.tls:
        lines.append("  # or: WHISPER_API_KEY=$KEY WHISPER_GATEWAY_PORT=8080 make transcribe FILE=recording.wav")
    if endpoint.scheme == "internal":
        lines.append(
            "  # through the load balancer itself, from inside the VPC (a HyperPod node over SSM, or CloudShell in "
            "the VPC): docs/deploy.md, After the deploy"
        )
    return lines


def how_to_reach(config: DeploymentConfig, account: str, hostname: str | None, dry_run: bool = False) -> str:
    """The closing message: load balancer, DNS record (TLS), port-forward (internal), API key, first requests.

    Requests use curl and the official openai client (``.venv/bin/python``: ``make install`` put
    ``openai`` there) with TLS verification on. ``dry_run``: worded as what the deploy would print.
    Its ``kubectl`` commands name the cluster's context (:func:`.kube.context_name` of ``account``),
    as the tool's own calls do, never the current one.
    """
    context = kube.context_name(config, account)
    base_lines, curl_opts = _base_url_lines(config, context)
    lines = [
        *_endpoint_lines(config, context, hostname, dry_run),
        *base_lines,
        *_request_lines(config, curl_opts),
        f"Grafana, metrics and alerts: docs/observability.md. Tear down: make destroy CONFIG=<this config> "
        f"(region {config.region}).",
    ]
    return "\n".join(lines)


def endpoint_timeout_help(config: DeploymentConfig, config_file: str, account: str, wait_s: float) -> str:
    """What to run when the load balancer has no address after ``wait_s`` seconds: why, then how to resume.

    The ``kubectl`` commands name the cluster's context of ``account`` (:func:`.kube.context_name`).
    """
    namespace, service = config.serving.namespace, names.ENDPOINT_SERVICE_NAME
    context = kube.context_name(config, account)
    kind = "service" if config.endpoint.kind == "nlb" else "ingress"
    waited = f"{wait_s / 60:.0f} min" if wait_s >= 60 else f"{wait_s:.0f} s"
    return "\n".join([
        f"the load balancer has no address after {waited}. Why (the Events at the end):",
        f"  kubectl --context {context} -n {namespace} describe {kind} {service}    # the AWS Load Balancer Controller's events: subnets, "
        "quota, permission or certificate errors",
        f"  make pods CONFIG={config_file}    # the pods behind it (the address does not wait for them)",
        f"  kubectl --context {context} -n kube-system logs deployment/aws-load-balancer-controller --tail=50    # needs the cluster-admin "
        "access entry (docs/deploy.md, Access)",
        f"then resume: make endpoint CONFIG={config_file} (waits again and prints how to reach it), or make deploy "
        f"CONFIG={config_file} (every step is skipped or a no-op; the rollout restarts the pods once more)",
    ])  # fmt: skip


def after_destroy_lines(config: DeploymentConfig, account: str) -> list[str]:
    """What ``make destroy`` leaves on purpose outside AWS billing: the kubeconfig entry and the CDK bootstrap."""
    arn = kube.context_name(config, account)
    return [
        "Left on purpose (docs/deploy.md, Tear down):",
        f"  your kubeconfig still has the deleted cluster (context, cluster and user named {arn}); remove them:",
        f"    kubectl config delete-context {arn} && kubectl config delete-cluster {arn} && "
        f"kubectl config delete-user {arn}",
        f"  the CDKToolkit stack (CDK bootstrap of aws://{account}/{config.region}) is shared by every CDK app of "
        "the account and region, so it stays; its staging bucket holds cents of assets. To remove it when no CDK "
        f"app there needs it: empty its cdk-*-assets-{account}-{config.region} bucket, then "
        f"aws cloudformation delete-stack --stack-name CDKToolkit --region {config.region}",
    ]


def operator_endpoint_message(config: DeploymentConfig, account: str) -> str:
    """How to reach ``serving.target: inference_operator``: its SageMaker endpoints, their status, a first call."""
    region = config.region
    lines = [
        "",
        "serving.target inference_operator: the HyperPod inference operator registers these SageMaker endpoints "
        "(make endpoint does not wait for them: waiting on the operator is not built or verified here):",
    ]
    for name in names.operator_endpoint_names(config):
        lines += [
            f"  aws sagemaker describe-endpoint --endpoint-name {name} --region {region} --query EndpointStatus"
            "    # InService once ready",
            f"  .venv/bin/python -m whisper_build.workstation.cli recording.wav --sagemaker-endpoint {name} "
            f"--region {region}",
        ]
    describe = shlex.join(kube.kubectl_argv(config, account, "describe", names.INFERENCE_ENDPOINT_CONFIGS))
    lines.append(f"The operator's objects and their status: {describe} (docs/serving-targets.md, Invoking)")
    return "\n".join(lines)
