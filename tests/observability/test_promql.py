"""observability/promql.py: the matchers, the ``by`` clause and the group-name check every query module uses."""

import pytest

from observability.promql import GROUP_LABELS, check_group, group_by, selector


def test_selector_spells_equality_and_regex_matchers() -> None:
    assert selector(job="dcgm-exporter", route="~/a|/b") == '{job="dcgm-exporter",route=~"/a|/b"}'


def test_group_by_keeps_the_group_labels_first() -> None:
    assert group_by("pod") == ", ".join((*GROUP_LABELS, "pod"))


@pytest.mark.parametrize("bad", ["G5", "g5_a", "-g5", 'g5"}', ""])
def test_check_group_names_the_field_to_fix(bad: str) -> None:
    with pytest.raises(ValueError, match=r"gpu_groups\[\]\.name"):
        check_group(bad)
    assert check_group("g6e-2x") == "g6e-2x"
