"""PromQL building blocks shared by the query modules (``queries``, ``cost_queries``, ``bulk_queries``).

Every expression keeps the labels of :data:`GROUP_LABELS`; :func:`group_by` and :func:`selector`
spell the ``by (…)`` clause and the ``{…}`` matchers the same way in each module, and
:func:`check_group` refuses a GPU group name that would not be a valid label value in a rule.
PromQL syntax: https://prometheus.io/docs/prometheus/latest/querying/basics/. Docs: docs/observability.md, "Rules".
"""

from __future__ import annotations

import re

GROUP_LABELS = ("gpu_group", "instance_type")
"""Labels every split expression keeps: the GPU group and its instance type (1:1 per group)."""

_GROUP_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def group_by(*extra: str) -> str:
    """The label list of a ``by (…)`` clause: :data:`GROUP_LABELS`, then ``extra``; e.g. ``gpu_group, instance_type, pod``."""
    return ", ".join((*GROUP_LABELS, *extra))


def selector(**matchers: str) -> str:
    """``{a="x",b=~"y"}``; a value starting with ``~`` becomes a regex matcher."""
    parts = []
    for name, value in matchers.items():
        op, val = ("=~", value[1:]) if value.startswith("~") else ("=", value)
        parts.append(f'{name}{op}"{val}"')
    return "{" + ",".join(parts) + "}"


def sum_rate(metric: str, matchers: str, window: str, *extra: str) -> str:
    """``sum by (<group labels>, extra) (rate(<metric><matchers>[<window>]))``, e.g. windows per second per group."""
    return f"sum by ({group_by(*extra)}) (rate({metric}{matchers}[{window}]))"


def check_group(group: str) -> str:
    """``group`` unchanged if it is a lowercase DNS label (``gpu_groups[].name``).

    Raises:
        ValueError: naming the group and the config field to fix.
    """
    if not isinstance(group, str) or not _GROUP_NAME.match(group):
        raise ValueError(
            f"GPU group name {group!r} is not a lowercase DNS label (e.g. 'g5'); "
            "fix gpu_groups[].name in the deployment config"
        )
    return group
