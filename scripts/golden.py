#!/usr/bin/env python3
"""The behaviour freeze: the default config's templates and manifests, normalised, against a committed golden.

``make golden`` (``python -m scripts.golden``) synthesizes ``config/default.yaml`` (CloudFormation
templates of every stack + the cdk8s manifests of ``dist/k8s``) and writes
``tests/data/golden/default.json``: ``{"templates": {stack id: template}, "manifests": {file name:
[documents]}}`` as sorted, indented JSON. ``--check`` compares instead and prints the first differing
paths (exit status 1). ``tests/infra/synthesis/test_behaviour_freeze.py`` runs the same comparison.

Entry point: :func:`main` (the details, in its docstring).
Docs: docs/development.md, "The behaviour freeze (`make golden`)".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from whisper_build.paths import REPO_ROOT

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk import cx_api

from k8s_charts.synth import synth_yaml
from settings import load_config
from stacks.assembly import synthesize
from stacks.gates import stack_templates

CONFIG = REPO_ROOT / "config" / "default.yaml"
GOLDEN = REPO_ROOT / "tests" / "data" / "golden" / "default.json"
HASH = re.compile(r"[0-9a-f]{64}")


def asset_names(assembly_dir: Path) -> dict[str, str]:
    """Asset hash → ``<asset:display name>`` for every file and image asset of the assembly (nested too)."""
    names: dict[str, str] = {}
    for manifest in sorted(assembly_dir.rglob("*.assets.json")):
        data = json.loads(manifest.read_text(encoding="utf-8"))
        for kind in ("files", "dockerImages"):
            for asset_hash, asset in sorted(data.get(kind, {}).items()):
                names.setdefault(asset_hash, f"<asset:{asset.get('displayName', kind)}>")
    return names


def normalise(value: Any, names: Mapping[str, str]) -> Any:
    """``value`` (parsed JSON/YAML) with each asset hash inside any string replaced by its name."""
    if isinstance(value, str):
        return HASH.sub(lambda match: names.get(match.group(0), match.group(0)), value)
    if isinstance(value, list):
        return [normalise(item, names) for item in value]
    if isinstance(value, dict):
        return {key: normalise(item, names) for key, item in value.items()}
    return value


def snapshot(assembly_dir: Path, manifest_files: list[Path]) -> dict[str, Any]:
    """The normalised outputs: every stack's template (by stack id) and every manifest file's documents."""
    names = asset_names(assembly_dir)
    templates = {
        stack_id: json.loads(path.read_text(encoding="utf-8"))
        for stack_id, path in stack_templates(cx_api.CloudAssembly(str(assembly_dir))).items()
    }
    manifests = {path.name: list(yaml.safe_load_all(path.read_text(encoding="utf-8"))) for path in manifest_files}
    return normalise({"templates": templates, "manifests": manifests}, names)


def synthesized_snapshot(config_path: Path = CONFIG) -> dict[str, Any]:
    """Synthesize ``config_path`` into temporary folders and return :func:`snapshot` of the result."""
    config = load_config(config_path)
    with tempfile.TemporaryDirectory(prefix="whisper-golden-") as tmp:
        synthesize(config, Path(tmp) / "cdk.out", config_path)
        return snapshot(Path(tmp) / "cdk.out", synth_yaml(config, Path(tmp) / "k8s"))


def render(data: Mapping[str, Any]) -> str:
    """The golden file's text: sorted keys, one-space indent, UTF-8 as is, trailing newline."""
    return json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def differences(expected: Any, actual: Any, path: str = "") -> Iterator[str]:
    """``/templates/<stack>/Resources/<id>/…: expected → actual`` for each differing leaf, in sorted order."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual), key=str):
            if key not in actual:
                yield f"{path}/{key}: removed"
            elif key not in expected:
                yield f"{path}/{key}: added"
            else:
                yield from differences(expected[key], actual[key], f"{path}/{key}")
    elif isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for index, (old, new) in enumerate(zip(expected, actual, strict=True)):
            yield from differences(old, new, f"{path}[{index}]")
    elif expected != actual:
        yield f"{path}: {_short(expected)} → {_short(actual)}"


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


def report(expected: Any, actual: Any, first: int = 20) -> list[str]:
    """The first ``first`` differences, and a count of the rest; [] when equal."""
    found = list(differences(expected, actual))
    lines = found[:first]
    if len(found) > first:
        lines.append(f"… and {len(found) - first} more")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Write the golden (default) or compare with it (``--check``); exit status 1 on a difference.

    Normalised: every asset hash and asset key. The cloud assembly's ``*.assets.json`` list each asset
    (its 64-hex source hash, the S3 object key or image tag derived from it); every occurrence of such a
    hash, e.g. ``"S3Key": "<hash>.zip"``, becomes ``<asset:display name>``, so an edit under
    ``whisper_build/`` (the serving image's source asset) leaves the golden unchanged while a changed
    property, resource or manifest does not. Other hashes (pinned image digests) are kept.

    A change to synthesis that is meant: run ``make golden`` and commit the new golden with it (its diff
    shows what changed).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the golden instead of writing it")
    args = parser.parse_args(argv)
    actual = synthesized_snapshot()
    if not args.check:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(render(actual), encoding="utf-8")
        print(f"wrote {GOLDEN.relative_to(REPO_ROOT)}")
        return 0
    lines = report(json.loads(GOLDEN.read_text(encoding="utf-8")), actual)
    print("\n".join(lines) or f"{GOLDEN.relative_to(REPO_ROOT)}: identical")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
