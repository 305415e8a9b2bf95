"""Where the hardware of each HyperPod instance type is offered: a sourced, dated table that warns, never refuses.

botocore knows which regions have a SageMaker endpoint, not which ``ml.*`` types HyperPod offers in
each (there is no offline HyperPod offering list). ``settings/data/ec2_gpu_offerings.json`` records,
for each GPU type of :mod:`settings.gpu_catalog`, the regions where EC2 offers its hardware on demand
(``g5.2xlarge`` for ``ml.g5.2xlarge``), with the source and the date it was collected. EC2 offering the
hardware is necessary for HyperPod, not sufficient; and the table ages. So a pair missing from it is a
warning naming the field and the table's date, and ``make capacity`` (the account's real offerings and
quotas, docs/deploy.md "Prerequisites") has the last word.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from settings.gpu_catalog import ec2_instance_type

TABLE_PATH = Path(__file__).resolve().parent / "data" / "ec2_gpu_offerings.json"


@dataclass(frozen=True)
class OfferingTable:
    """``regions``: EC2 type → regions offering it; ``as_of``: collection date (ISO); ``source``: where from."""

    regions: dict[str, frozenset[str]]
    as_of: str
    source: str

    def offered(self, instance_type: str, region: str) -> bool | None:
        """True/False for an ``ml.*`` type the table lists; ``None`` when the table does not list it."""
        regions = self.regions.get(ec2_instance_type(instance_type))
        return None if regions is None else region in regions


@functools.lru_cache(maxsize=1)
def offering_table(path: Path = TABLE_PATH) -> OfferingTable:
    """Read the table (once)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return OfferingTable(
        regions={name: frozenset(regions) for name, regions in data["regions"].items()},
        as_of=data["as_of"],
        source=data["source"],
    )


def offering_warnings(region: str, instance_types: dict[str, str], table: OfferingTable | None = None) -> list[str]:
    """One warning per configured type the table says is not offered in ``region``.

    Args:
        region: The config's ``region``.
        instance_types: Field path → ``ml.*`` type, e.g. ``{"gpu_groups.1.instance_type": "ml.g6e.2xlarge"}``.
        table: The table (default: :func:`offering_table`).

    Returns:
        ``gpu_groups.1.instance_type: ml.g6e.2xlarge: …`` sentences with the table's date; types the
        table does not list are not warned about.
    """
    table = table or offering_table()
    warnings = []
    for field, instance_type in instance_types.items():
        if table.offered(instance_type, region) is False:
            warnings.append(
                f"{field}: {instance_type} is not in the offering table for {region} (its EC2 hardware "
                f"{ec2_instance_type(instance_type)} was not offered there on demand as of {table.as_of}; source: "
                f"{table.source}); HyperPod likely cannot run it there. The table may be out of date: "
                "make capacity checks the account's real offerings and quotas"
            )
    return warnings
