"""The behaviour freeze (scripts/golden.py): the default config's templates and manifests, asset hashes
and keys normalised, equal the committed tests/data/golden/default.json; a meant change runs
``make golden`` and commits the new golden."""

from __future__ import annotations

import json
from pathlib import Path

from cdk_assembly import CONFIGS, synthesized

from k8s_charts.synth import synth_yaml
from scripts import golden

ASSET = "ab" * 32
PINNED_DIGEST = "cd" * 32


def test_asset_hashes_and_keys_become_names_and_other_hashes_stay(tmp_path: Path) -> None:
    # GIVEN an assembly whose assets.json lists one file asset
    (tmp_path / "S.assets.json").write_text(json.dumps({"files": {ASSET: {"displayName": "S/Handler/Code"}}}))
    template = {"Code": {"S3Key": f"{ASSET}.zip"}, "Meta": f"asset.{ASSET}", "Image": f"x@sha256:{PINNED_DIGEST}"}
    # THEN its hash and key are named, a pinned digest is kept
    assert golden.normalise(template, golden.asset_names(tmp_path)) == {
        "Code": {"S3Key": "<asset:S/Handler/Code>.zip"},
        "Meta": "asset.<asset:S/Handler/Code>",
        "Image": f"x@sha256:{PINNED_DIGEST}",
    }


def test_a_difference_is_reported_by_its_path() -> None:
    expected = {"templates": {"A": {"Resources": {"R": {"Properties": {"Size": 1, "Old": 1}, "List": [1, 2]}}}}}
    actual = {"templates": {"A": {"Resources": {"R": {"Properties": {"Size": 2, "New": 1}, "List": [1, 3]}}}}}
    assert golden.report(expected, actual) == [
        "/templates/A/Resources/R/List[1]: 2 → 3",
        "/templates/A/Resources/R/Properties/New: added",
        "/templates/A/Resources/R/Properties/Old: removed",
        "/templates/A/Resources/R/Properties/Size: 1 → 2",
    ]
    assert golden.report(expected, expected) == []


def test_the_default_config_synthesizes_the_golden(tmp_path: Path) -> None:
    default = synthesized(CONFIGS["default"])
    assert default.error is None, default.error
    actual = golden.snapshot(default.outdir, synth_yaml(default.config, tmp_path))
    expected = json.loads(golden.GOLDEN.read_text(encoding="utf-8"))
    lines = golden.report(expected, actual)
    assert not lines, (
        "synthesis of config/default.yaml differs from tests/data/golden/default.json "
        "(meant? run make golden and commit the golden with the change):\n" + "\n".join(lines)
    )
