"""Write the charts as plain YAML: ``python -m k8s_charts.synth --config X --out dist/k8s``.

One file per chart, numbered in apply order (``0000-whisper-serving.k8s.yaml``, …), for review or
``kubectl apply -f``. Values
that only exist after ``cdk deploy`` (model bucket, image repository, AMP workspace id) are named
placeholders (:data:`k8s_charts.inputs.PLACEHOLDER_INPUTS`); pass ``--bucket`` / ``--image-repository``
/ ``--amp-workspace-id`` / ``--api-keys-secret-arn`` to fill them. With ``--validate`` every object is checked against the
Kubernetes schema of ``cluster.kubernetes_version`` or its CRD (:mod:`k8s_charts.validation`).
Exit status: 0 written (and valid), 1 an object failed validation, 2 invalid config or arguments.
Docs: docs/deploy.md, "Synthesize and check (`make synth`)".
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import cdk8s

from k8s_charts.charts import build_charts
from k8s_charts.inputs import PLACEHOLDER_INPUTS, ChartInputs
from settings import ConfigError, DeploymentConfig, load_config


def synth_yaml(config: DeploymentConfig, out_dir: Path, inputs: ChartInputs = PLACEHOLDER_INPUTS) -> list[Path]:
    """Synthesize every chart of ``config`` into ``out_dir`` (created; old ``*.k8s.yaml`` removed).

    Returns:
        The written files, in apply order.

    Raises:
        ValueError: the config cannot be expressed as charts (message names the fields).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.k8s.yaml"):
        stale.unlink()
    app = cdk8s.App(outdir=str(out_dir), yaml_output_type=cdk8s.YamlOutputType.FILE_PER_CHART)
    build_charts(app, config, inputs)
    app.synth()
    return sorted(out_dir.glob("*.k8s.yaml"))  # cdk8s numbers the files in dependency order


DIST_DIR = Path("dist") / "k8s"


def write_dist(config: DeploymentConfig, repo_root: Path) -> list[Path]:
    """``make synth`` hook (``scripts/synth.py`` ``EXTRA_OUTPUTS``): write and validate ``dist/k8s/*.yaml``.

    Returns:
        The written files.

    Raises:
        ValueError: the config cannot be expressed as charts, or an object fails schema validation
            (one line per problem).
    """
    from k8s_charts.validation import validate_files  # dev dependency (kubernetes-validate)

    inputs = PLACEHOLDER_INPUTS if config.observability.enabled else replace(PLACEHOLDER_INPUTS, amp_workspace_id=None)
    files = synth_yaml(config, repo_root / DIST_DIR, inputs)
    problems = validate_files(files, config.cluster.kubernetes_version)
    if problems:
        raise ValueError("Kubernetes manifests failed validation:\n" + "\n".join(f"  {p}" for p in problems))
    return files


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m k8s_charts.synth", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=None, help="deployment config YAML (default: embedded)")
    parser.add_argument("--out", type=Path, default=DIST_DIR, help="output folder (default dist/k8s)")
    parser.add_argument("--bucket", default=PLACEHOLDER_INPUTS.bucket_name, help="model bucket name")
    parser.add_argument(
        "--image-repository", default=PLACEHOLDER_INPUTS.image_repository, help="serving image URI, no tag"
    )
    parser.add_argument("--amp-workspace-id", default=PLACEHOLDER_INPUTS.amp_workspace_id, help="AMP workspace id")
    parser.add_argument(
        "--api-keys-secret-arn",
        default=PLACEHOLDER_INPUTS.api_keys_secret_arn,
        help="Secrets Manager secret of the gateway's API keys (stack output ApiKeysSecretArn)",
    )
    parser.add_argument("--validate", action="store_true", help="validate every object (kubernetes-validate + CRDs)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        # without observability there is no AMP workspace, hence no KEDA objects (fixed replicas)
        workspace = args.amp_workspace_id if config.observability.enabled else None
        inputs = ChartInputs(
            args.bucket, args.image_repository, workspace, api_keys_secret_arn=args.api_keys_secret_arn
        )
        files = synth_yaml(config, args.out, inputs)
    except (ConfigError, ValueError) as err:
        print(f"k8s synth failed: {err}", file=sys.stderr)
        return 2
    for file in files:
        print(f"wrote {file}")
    if args.validate:
        from k8s_charts.validation import validate_files  # dev dependency (kubernetes-validate)

        problems = validate_files(files, config.cluster.kubernetes_version)
        for problem in problems:
            print(f"invalid: {problem}", file=sys.stderr)
        if problems:
            return 1
        print(f"validated {len(files)} files against Kubernetes {config.cluster.kubernetes_version} and the CRDs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
