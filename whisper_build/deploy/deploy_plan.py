"""The steps of ``make deploy``, derived from one config file: one builder per step.

Every step names its commands with the config carried through: step ``synth`` synthesizes and
gates the file once (``make synth CONFIG=<file>``) and every later CDK command deploys that gated
assembly (``--app cdk.out``, :data:`GATED_ASSEMBLY`); the chart publish script gets the file, and
every AWS name (stacks, cluster, CodeBuild projects, ECR repositories, buckets) comes from
:mod:`settings.names` applied to the same config. The step types
are :mod:`.steps`; the runner is :mod:`.runner`.

Durations are estimates (sources in docs/deploy.md, "Deploy", its Durations paragraph), not measurements: no deployment
was run from this repository. Costs come from :mod:`.prices`.
"""

from __future__ import annotations

import shlex

from settings import names
from settings.schema import DeploymentConfig
from whisper_build.deploy import capacity, kube, mig_drain
from whisper_build.deploy.prices import running_cost_items
from whisper_build.deploy.steps import AwsCall, Command, Step, WaitAll, cdk_app

GATED_ASSEMBLY = "cdk.out"
"""Where step ``synth`` (``make synth``) leaves the cloud assembly that passed cfn-lint, cdk-nag and checkov
(``scripts/synth.py`` moves it there only then). Every later ``cdk`` command deploys it with ``--app``:
``cdk deploy`` of the app would synthesize anew, after the gates ran."""
GATES = "cfn-lint + cdk-nag AwsSolutions + checkov"
SERVING_WAIT_S = 15 * 60
"""Step ``serving``: every GPU group's Deployment must be ready within this, all groups together."""
REQUIRE_APPROVAL_NEVER = ("--require-approval", "never")
REQUIRE_APPROVAL_ANY_CHANGE = ("--require-approval", "any-change")
"""``APPROVE=1``: CDK's ``any-change``, "Prompt for approval for any type of change to the stack"
(aws-cdk-lib ``cloud_assembly_schema.RequireApproval``,
https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.cloud_assembly_schema.RequireApproval.html)."""


def _gpu_cost_note(config: DeploymentConfig) -> str:
    expensive = [g.instance_type for g in config.gpu_groups if g.instance.gpus >= 8 and g.instance_count]
    note = "from here on, until `make destroy` (docs/deploy.md, Cost): " + "; ".join(
        f"{item} ({price})" for item, price in running_cost_items(config)
    )
    if expensive:
        note += (
            f". WARNING: {', '.join(sorted(set(expensive)))} is an 8-GPU instance billed at tens of US dollars per "
            "hour each: a forgotten cluster costs hundreds of dollars a day"
        )
    return note


def kubectl_step(config: DeploymentConfig) -> Step:
    """Your ``kubectl`` access: an EKS access entry for the caller, then ``aws eks update-kubeconfig``.

    Also ``make kubeconfig CONFIG=…`` on its own: it waits for the cluster to exist, so it can run in
    a second shell while step ``stacks`` is still creating the HyperPod instances.
    """
    cluster, namespace, region = names.cluster_name(config), config.serving.namespace, config.region
    return Step(
        "kubectl",
        f"kubectl access for you: waits for EKS cluster {cluster}, gives your IAM role an access entry with "
        f"AmazonEKSAdminPolicy on namespace {namespace}, and a kubeconfig context",
        "under 1 min once the cluster is ACTIVE",
        "",
        (
            AwsCall(
                f"aws eks wait cluster-active --name {cluster} --region {region} && "
                f"aws eks create-access-entry --cluster-name {cluster} --principal-arn <your IAM role> "
                f"--region {region}  # skipped if it exists; then associate-access-policy --policy-arn "
                f"arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminPolicy "
                f"--access-scope type=namespace,namespaces={namespace}",
                lambda session: session.grant_kubectl(cluster, namespace),
            ),
            Command(("aws", "eks", "update-kubeconfig", "--name", cluster, "--region", region)),
        ),
        "idempotent: an existing access entry is kept, the policy association and kubeconfig entry are rewritten",
    )


def tensorrt_targets(config: DeploymentConfig) -> list[str]:
    """Engine targets at least one GPU group serves with ``tensorrt_llm`` (the ones step ``engines`` builds).

    An architecture whose groups all serve ``ctranslate2`` (the fallback while its engine cannot be
    built) or ``torch`` is left out, so a failed TensorRT-LLM build cannot block the way back to a
    first transcript (docs/deploy.md, "If the engine build fails"). Its CodeBuild project stays in
    the engine-build stack for when the group switches back.
    """
    return [
        target
        for target in config.engine_targets
        if any(group.engine.layout == "engine_versions" for group in config.groups_for_target(target))
    ]


def cdk_deploy_approval(approve: bool) -> tuple[str, ...]:
    """``--require-approval never``, or ``any-change`` with ``APPROVE=1`` (CDK then asks before each change)."""
    return REQUIRE_APPROVAL_ANY_CHANGE if approve else REQUIRE_APPROVAL_NEVER


BUILDS_RERUN = (
    "a build still running from an interrupted run is waited on, not started twice; a failed build is started again"
)
"""The re-run line every CodeBuild step shares."""


def capacity_step(config: DeploymentConfig) -> Step:
    """Step ``capacity``: instance types offered and quotas sufficient, before anything is created."""
    return Step(
        "capacity",
        "before anything is created: the instance types are offered in the region, and the account's "
        "quotas allow the HyperPod instances and the CodeBuild builds",
        "under 1 min",
        "",
        (AwsCall(capacity.capacity_commands(config), lambda session: session.check_capacity()),),
        "read-only; fails listing every missing offering or quota, its name and the increase request command",
    )


def synth_step(config_file: str) -> Step:
    """Step ``synth``: synthesize once and run the three gates on that assembly (``make synth``)."""
    return Step(
        "synth",
        f"synthesize once and run {GATES} on that assembly ({GATED_ASSEMBLY}/); bootstrap, storage and stacks "
        f"deploy exactly it (--app {GATED_ASSEMBLY}), never a second synthesis",
        "1–2 min",
        "",
        (Command(("make", "synth", f"CONFIG={config_file}", f"SYNTH_OUTDIR={GATED_ASSEMBLY}")),),
        "synthesizes and gates again; a finding stops the run before anything is deployed "
        f"(the failing assembly is left in {GATED_ASSEMBLY}.failed/)",
    )


def bootstrap_step(config: DeploymentConfig, account: str) -> Step:
    """Step ``bootstrap``: ``cdk bootstrap`` of the account and region."""
    region = config.region
    return Step(
        "bootstrap",
        f"CDK bootstrap of aws://{account}/{region} (asset bucket, deploy roles)",
        "1–3 min",
        "",
        (cdk_app("bootstrap", f"aws://{account}/{region}", assembly=GATED_ASSEMBLY),),
        "idempotent: an up-to-date CDKToolkit stack is left as it is",
    )


def storage_step(config: DeploymentConfig, approve: bool) -> Step:
    """Step ``storage``: the storage stack alone, importing buckets and repositories an earlier destroy retained."""
    return Step(
        "storage",
        f"{names.stack_name(config, 'Storage')}: model and lifecycle buckets, ECR repositories "
        "(buckets and repositories retained by an earlier `make destroy` are imported, not re-created)",
        "2–4 min",
        "",
        (
            cdk_app(
                "deploy",
                names.stack_name(config, "Storage"),
                "--exclusively",
                *cdk_deploy_approval(approve),
                "--import-existing-resources",
                assembly=GATED_ASSEMBLY,
            ),
        ),  # fmt: skip
        "CloudFormation applies only differences; a failed first create rolls back, and the retained buckets "
        "and repositories it had created are imported on the next run; a failed import: docs/deploy.md, "
        "'If the storage import fails'",
        diagnose=lambda session: session.storage_failure_report(),
    )


def hyperpod_chart_step(config: DeploymentConfig, config_file: str) -> Step:
    """Step ``hyperpod-chart``: the HyperPod dependency chart pushed to ECR (skipped once it is there)."""
    region = config.region
    chart_repo = names.chart_repository_name(config)
    chart_version = config.cluster.hyperpod_chart.version
    chart_skip = None
    if config.cluster.hyperpod_chart.oci_repository is None:
        chart_skip = (
            f"{chart_repo}:{chart_version} is already in ECR (aws ecr describe-images --repository-name {chart_repo} "
            f"--image-ids imageTag={chart_version} --region {region})",
            lambda session: session.image_exists(chart_repo, chart_version),
        )
    return Step(
        "hyperpod-chart",
        f"HyperPod dependency chart {chart_version} → {config.cluster.hyperpod_chart.oci_repository or chart_repo}",
        "2–5 min",
        "",
        (Command(("scripts/publish_hyperpod_chart.sh", config_file)),),
        "skipped once the chart version is in ECR; otherwise packaged and pushed again",
        chart_skip,
    )


def stacks_step(config: DeploymentConfig, approve: bool) -> Step:
    """Step ``stacks``: ``cdk deploy --all``; its cost line lists what bills from here on."""
    return Step(
        "stacks",
        f"every stack: {names.stack_contents(config, without=('Storage',))} (CloudFormation waits for each)",
        "60–120 min (EKS about 15 min, HyperPod instances 20–60 min)",
        _gpu_cost_note(config),
        (cdk_app("deploy", "--all", *cdk_deploy_approval(approve), assembly=GATED_ASSEMBLY),),
        "stacks already created are updated in place (minutes when nothing changed). A stack whose FIRST "
        "create fails is rolled back: CloudFormation deletes what it created (the EKS cluster, the HyperPod "
        "instances), and the next run deletes the ROLLBACK_COMPLETE stack and creates it again from the start",
    )


def mig_drain_step(config: DeploymentConfig, account: str) -> Step:
    """Step ``mig-drain``: before step ``stacks`` repartitions a group's GPUs, its pods are gone (:mod:`.mig_drain`)."""
    cluster, region = names.hyperpod_cluster_name(config), config.region
    access = kubectl_step(config).actions
    example = next((group for group in config.gpu_groups if group.mig is not None), config.gpu_groups[0])
    drain = " && ".join(
        shlex.join(argv) for argv in mig_drain.drain_argvs(config, account, example, "<deployed>-><new>")
    )
    uses_mig = any(group.mig is not None for group in config.gpu_groups)
    when = (
        "before a GPU group's MIG layout (nvidia.com/mig.config) changes"
        if uses_mig
        else "only when a deployed group still has a MIG layout this config removes (no group here has "
        "mig_profile, so on a first deploy or a fleet that never used MIG it is skipped)"
    )
    return Step(
        "mig-drain",
        f"{when}: pause its autoscaling, scale it to 0 and wait until its pods are gone, so the MIG manager never "
        "waits on GPU clients (NVIDIA/mig-parted#485)",
        "under 1 min; up to the pods' shutdown grace period",
        "",
        (
            *access,
            AwsCall(
                f"{drain}  # e.g. group {example.name}: the same for each group whose layout changes",
                lambda session: session.drain_mig_changes(),
            ),
        ),
        "drains again only what still changes; a drained group stays at 0 until step mig-resume",
        (
            f"no GPU group's MIG layout changes (aws sagemaker describe-cluster --cluster-name {cluster} "
            f"--region {region}: InstanceGroups[].KubernetesConfig.CurrentLabels; so on every first deploy, "
            "when nothing is deployed yet)",
            lambda session: not session.mig_layout_changes(),
        ),
    )


def mig_resume_step(config: DeploymentConfig, account: str) -> Step:
    """Step ``mig-resume``: groups drained for a MIG change are scaled back once their nodes are repartitioned."""
    return Step(
        "mig-resume",
        "scale the GPU groups drained for a MIG layout change back and let KEDA autoscale them again",
        "under 1 min (then the pods start on the repartitioned nodes)",
        "",
        (
            AwsCall(
                f"{shlex.join(mig_drain.list_deployments_argv(config, account))}  # then for each drained group: kubectl "
                "scale --replicas=<baseline>, remove the drain mark and autoscaling.keda.sh/paused-replicas",
                lambda session: session.resume_drained_groups(),
            ),
        ),
        "resumes whatever an earlier run drained (the Deployments' drain mark is the state)",
        ("no Deployment is marked as drained", lambda session: not session.drained_groups()),
    )


def serving_image_step(config: DeploymentConfig) -> Step:
    """Step ``serving-image``: the serving image's CodeBuild (skipped once its tag is in ECR)."""
    region = config.region
    image_repo = names.serving_repository_name(config)
    image_tag = config.serving.image_tag
    image_project = names.image_project_name(config)
    return Step(
        "serving-image",
        f"serving image {image_repo}:{image_tag} (CodeBuild {image_project}; skips an existing tag)",
        "20–40 min the first time",
        "CodeBuild compute minutes while it builds",
        (
            AwsCall(
                f"aws codebuild start-build --project-name {image_project} --region {region}  "
                "# unless a build is running; then BatchGetBuilds every 30 s until it finishes",
                lambda session: session.run_builds([image_project]),
            ),
        ),
        f"skipped once the tag is in ECR; {BUILDS_RERUN}",
        (
            f"{image_repo}:{image_tag} is already in ECR",
            lambda session: session.image_exists(image_repo, image_tag),
        ),
    )


def engines_steps(config: DeploymentConfig) -> list[Step]:
    """Step ``engines`` (TensorRT-LLM engines in parallel), or none when no group serves ``tensorrt_llm``.

    An architecture served only by ctranslate2/torch groups builds no engine; a fleet of them has no
    engines step.
    """
    region = config.region
    engine_projects = [names.engine_project_name(config, target) for target in tensorrt_targets(config)]
    if not engine_projects:
        return []
    return [
        Step(
            "engines",
            f"TensorRT-LLM engines of {config.model.name} for {', '.join(tensorrt_targets(config))} in parallel "
            "(each project skips an engine that is current; serving pods wait in Init until theirs is published)",
            "20–60 min the first time, about 2 min when current",
            "CodeBuild minutes; the Job runs on the group's own (already billed) GPU nodes "
            "(or a reserved CodeBuild GPU fleet for engine_builder: codebuild_fleet)",
            (
                AwsCall(
                    " && ".join(
                        f"aws codebuild start-build --project-name {p} --region {region}" for p in engine_projects
                    )
                    + "  # unless running; then BatchGetBuilds every 30 s until all finish",
                    lambda session: session.run_builds(engine_projects),
                ),
            ),
            f"every project checks whether its engine is current and exits in about 2 min if so; {BUILDS_RERUN}",
        ),
    ]


def rollout_step(config: DeploymentConfig) -> Step:
    """Step ``rollout``: the CodeBuild project that restarts the serving Deployments."""
    rollout = names.rollout_project_name(config)
    return Step(
        "rollout",
        f"restart the serving Deployments so they load current.json (CodeBuild {rollout})",
        "3–10 min",
        "CodeBuild compute minutes while it runs",
        (
            AwsCall(
                f"aws codebuild start-build --project-name {rollout} --region {config.region}  # then wait",
                lambda session: session.run_builds([rollout]),
            ),
        ),
        f"restarts the pods again (a rolling restart; harmless); {BUILDS_RERUN}",
    )


def serving_step(config: DeploymentConfig, account: str) -> Step:
    """Step ``serving``: every GPU group's Deployment ready under one deadline (:data:`SERVING_WAIT_S`).

    Once a minute meanwhile: HyperPod's nodes per group and type and each group's newest capacity error.
    """
    return Step(
        "serving",
        f"wait until every GPU group's pods are ready, {SERVING_WAIT_S // 60} min at most for all groups together",
        f"1–10 min (gives up after {SERVING_WAIT_S // 60})",
        "",
        (
            WaitAll(
                tuple(
                    kube.kubectl_argv(config, account, "rollout", "status", f"deployment/{names.workload_name(group)}")
                    for group in config.gpu_groups
                ),
                SERVING_WAIT_S,
                progress=lambda session: session.capacity_progress(),
            ),
        ),
        "read-only: waits again",
        diagnose=lambda session: session.pod_report(),
    )


def deploy_steps(config: DeploymentConfig, config_file: str, account: str, approve: bool = False) -> list[Step]:
    """The deploy journey for ``config`` (read from ``config_file``) in ``account``.

    Args:
        config: The validated config.
        config_file: Its path as given to CDK (relative to the repository root where possible).
        account: AWS account id (``<account>`` in a dry run without credentials).
        approve: ``APPROVE=1``: the ``cdk deploy`` commands ask before every change
            (``--require-approval any-change``) instead of never.

    AWS actions and skip checks receive the runner's session
    (:class:`whisper_build.deploy.session.DeploySession`) when they run; planning calls nothing.
    """
    return [
        synth_step(config_file),
        capacity_step(config),
        bootstrap_step(config, account),
        storage_step(config, approve),
        hyperpod_chart_step(config, config_file),
        mig_drain_step(config, account),
        stacks_step(config, approve),
        kubectl_step(config),
        mig_resume_step(config, account),
        serving_image_step(config),
        *engines_steps(config),
        rollout_step(config),
        serving_step(config, account),
    ]
