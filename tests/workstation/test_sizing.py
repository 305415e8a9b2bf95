"""Sizing on a fixture of throughputs: replicas, cost, and the hand-computed cheapest mix per target."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from settings import load_config
from settings.throughput import Estimated, ThroughputFigure
from whisper_build.workstation import sizing, sizing_cli

UTILIZATION = 0.5


def _figure(batch: float, windows_per_second: float) -> ThroughputFigure:
    return ThroughputFigure("fixture GPU", "torch", "large-v3-turbo", batch, windows_per_second, 30.0, "gateway",
                            Estimated("test fixture"))  # fmt: skip


A = sizing.Offer("a", "ml.g5.2xlarge", 1.0, 1, 16, (_figure(1, 1.0), _figure(8, 4.0), _figure(32, 10.0)))
"""1 USD/h; RTFx 30 at batch 1, 120 at batch 8; batch 32 (RTFx 300) is above its capacity of 16."""
B = sizing.Offer("b", "ml.g6e.2xlarge", 1.9, 1, 16, (_figure(8, 8.0),))
"""1.9 USD/h; RTFx 240 at batch 8."""


def _plans(target: sizing.Target, *offers: sizing.Offer) -> list[sizing.Plan]:
    return [sizing.plan(offer, target, UTILIZATION) for offer in offers]


def test_daily_volume_a_mix_beats_every_single_type() -> None:
    target = sizing.DailyVolume(audio_hours_per_day=3600)  # 150 audio s/s
    plan_a, plan_b = _plans(target, A, B)
    # a: 120 × 0.5 = 60 audio s/s a pod → 3 instances, 3 × 1.0 × 730; b: 240 × 0.5 = 120 → 2, 2 × 1.9 × 730
    assert (plan_a.per_pod, plan_a.replicas, plan_a.instances, plan_a.cost_usd) == (60.0, 3, 3, 2190.0)
    assert (plan_b.per_pod, plan_b.replicas, plan_b.cost_usd) == (120.0, 2, pytest.approx(2774.0))
    mix = sizing.cheapest_mix([plan_a, plan_b], target)
    assert mix is not None and mix.exhaustive
    assert mix.instances == {"a": 1, "b": 1}  # 60 + 120 ≥ 150 for 2.9 USD/h
    assert mix.cost_usd == pytest.approx(2.9 * 730)


def test_sync_latency_picks_the_batch_that_meets_p95_and_the_cheaper_type() -> None:
    target = sizing.SyncLatency(requests_per_second=10, p95_seconds=2.0)  # one window each: 10 windows/s
    plan_a, plan_b = _plans(target, A, B)
    # a: batch 8 gives 1.5 × 8 / 4 = 3 s > 2 s, batch 1 gives 1.5 s → 1 window/s a pod → 10 instances
    assert (plan_a.figure.batch, plan_a.per_pod, plan_a.instances) == (1, 1.0, 10)
    # b: 1.5 × 8 / 8 = 1.5 s → 8 windows/s → 2 instances
    assert (plan_b.per_pod, plan_b.instances) == (8.0, 2)
    mix = sizing.cheapest_mix([plan_a, plan_b], target)
    assert mix is not None and mix.instances == {"b": 2}  # 3.8 USD/h beats 1 b + 2 a (3.9) and 10 a (10)
    assert mix.cost_usd == pytest.approx(3.8 * 730)


def test_a_p95_no_type_can_meet_is_said_per_type() -> None:
    target = sizing.SyncLatency(requests_per_second=10, p95_seconds=1.0)
    plans = _plans(target, A, B)
    assert [p.figure for p in plans] == [None, None]
    assert "quickest p95 ≈ 1.50 s (batch 1) > 1 s" in plans[0].note
    assert sizing.cheapest_mix(plans, target) is None


def test_bulk_deadline_runs_pods_full_and_costs_the_job() -> None:
    target = sizing.BulkDeadline(audio_hours=1000, deadline_hours=10)  # 100 audio s/s for 10 h
    plan_a, plan_b = _plans(target, A, B)
    assert (plan_a.per_pod, plan_a.instances, plan_a.cost_usd) == (120.0, 1, 10.0)
    assert (plan_b.instances, plan_b.cost_usd) == (1, pytest.approx(19.0))
    mix = sizing.cheapest_mix([plan_a, plan_b], target)
    assert mix is not None and (mix.instances, mix.cost_usd) == ({"a": 1}, 10.0)


def test_an_unpriced_type_is_sized_but_left_out_of_the_mix() -> None:
    unpriced = sizing.Offer("c", "ml.g6.2xlarge", None, 1, 16, B.figures)
    target = sizing.DailyVolume(3600)
    plans = _plans(target, A, unpriced)
    assert (plans[1].instances, plans[1].cost_usd, plans[1].note) == (2, None, "no price")
    mix = sizing.cheapest_mix(plans, target)
    assert mix is not None and mix.instances == {"a": 3}


def test_pods_per_instance_divide_replicas_into_instances() -> None:
    eight = sizing.Offer("p", "ml.p5.48xlarge", 50.0, 8, 16, A.figures)
    plan = sizing.plan(eight, sizing.DailyVolume(3600), UTILIZATION)
    assert (plan.replicas, plan.instances, plan.per_instance) == (3, 1, 480.0)


def test_the_command_sizes_the_default_config_from_the_throughput_table(capsys: pytest.CaptureFixture[str]) -> None:
    offers = sizing_cli.offers(load_config())
    assert [(o.group, o.usd_per_hour, o.pods_per_instance) for o in offers] == [("g5", 1.212, 1), ("g6e", 2.24208, 1)]
    assert all(o.figures for o in offers)
    assert sizing_cli.main(["--audio-hours-per-day", "2000"]) == 0
    out = capsys.readouterr().out
    assert "demand 83.3 audio s/s" in out and "cheapest mix:" in out and "ESTIMATE" in out


def test_the_command_needs_one_complete_target() -> None:
    with pytest.raises(SystemExit) as exit_info:
        sizing_cli.main(["--sync-rps", "3"])
    assert exit_info.value.code == 2


def test_a_mig_slice_is_credited_with_its_share_of_the_gpu_not_a_whole_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """config/examples/mig.yaml at 200 000 audio hours a day, computed by hand from the table's inputs."""
    assert sizing_cli.main(["config/examples/mig.yaml", "--audio-hours-per-day", "200000"]) == 0
    out = capsys.readouterr().out
    demand = 200_000 * 3600 / 86_400  # 8333.3 audio s/s
    # p5: H100 = the H200 × min(3350/4800 bandwidth, 989/989 FP16); a 1g.10gb slice has 1 of 7 compute slices
    # and capacity 32 × 1 // 7 = 4, so it runs at the measured H200 batch 2.1 (6.1 windows/s of 30 s), × 0.7.
    slice_rate = 6.1 * 30 * (3350 / 4800) * (1 / 7) * 0.7  # 12.77 audio s/s, not 7 × that
    replicas = math.ceil(demand / slice_rate)  # 653
    instances = math.ceil(replicas / (8 * 7))  # 56 slices per p5 → 12
    assert (replicas, instances) == (653, 12)
    assert f"p5 (ml.p5.48xlarge): {replicas} replicas on {instances} instances" in out
    assert f"a pod (one 1g.10gb MIG slice) at batch 2.1 does {slice_rate:.3g} audio s/s" in out
    assert "1g.10gb MIG slice = the whole GPU's figure × 1/7" in out  # the basis is printed
    # g5 (A10G: × 600/4800) and g6e (L40S: × 864/4800) at batch 7.9 (20.7 windows/s): 54.34 and 78.25 audio s/s.
    # 154 g5 cost 154 × 1.212 = 186.65 USD/h; 152 g5 + 1 g6e cover 8337.5 for 184.22 + 2.242 = 186.47;
    # the 12 p5 the slices need cost 12 × 55.04 = 660.48 (a whole GPU per slice would have made it 2 p5).
    g5, g6e = 20.7 * 30 * (600 / 4800) * 0.7, 20.7 * 30 * (864 / 4800) * 0.7
    assert 152 * g5 + g6e >= demand > 153 * g5
    mix_cost = (152 * 1.212 + 2.24208) * 730
    assert f"cheapest mix: 152 × g5 + 1 × g6e = {mix_cost:,.0f} USD a month" in out


def test_every_example_of_make_help_sizes_the_default_config(capsys: pytest.CaptureFixture[str]) -> None:
    """``make help``'s sizing examples each give a real answer on the default config, not "cheapest mix: none"."""
    line = next(
        line for line in Path("Makefile").read_text(encoding="utf-8").splitlines() if line.startswith("sizing:")
    )
    examples = re.findall(r'"(--[^"]+)"', line)
    assert len(examples) == 3, line
    for example in examples:
        assert sizing_cli.main(example.split()) == 0
        out = capsys.readouterr().out
        assert "cheapest mix: none" not in out and "cheapest mix:" in out, (example, out)


def test_spot_share_is_the_cheapest_mix_that_finishes_when_spot_runs_its_assumed_share() -> None:
    target = sizing.BulkDeadline(audio_hours=100, deadline_hours=10)  # 10 audio s/s; 4 per instance
    kwargs = {"on_demand_usd": 1.0, "spot_usd": 0.3, "availability": 0.5}
    # by hand, cost = (on-demand × 1.0 + Spot × 0.5 × 0.3) × 10 h with (on-demand + Spot × 0.5) × 4 >= 10:
    # up to 6 instances 5 Spot alone (7.5 USD); up to 4: 3 Spot + 1 On-Demand (14.5) beats 1 + 2 (21.5), 0 + 3 (30)
    assert sizing.spot_share(4.0, target, max_instances=6, **kwargs) == sizing.SpotShare(5, 0, 7.5, 1.0)
    assert sizing.spot_share(4.0, target, max_instances=4, **kwargs) == sizing.SpotShare(3, 1, 14.5, 0.6)
    assert sizing.spot_share(4.0, target, max_instances=2, **kwargs) is None  # 3 On-Demand needed at least
    dear = {**kwargs, "spot_usd": 2.5}  # Spot dearer per delivered hour than On-Demand: none of it
    assert sizing.spot_share(4.0, target, max_instances=6, **dear) == sizing.SpotShare(0, 3, 30.0, 0.0)


def test_a_bulk_backlog_gets_a_priority_list_and_a_spot_share_with_its_criterion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["config/examples/capacity.yaml", "--bulk-audio-hours", "1000", "--deadline-hours", "24"]
    assert sizing_cli.main([*argv, "--spot-availability", "1"]) == 0
    out = capsys.readouterr().out
    # every L40S size HyperPod offers, priced ones by price, the rest named as not ranked (no invented price)
    assert "bulk g6e: priority list ml.g6e.xlarge (1.861 USD/h), ml.g6e.2xlarge (2.24208 USD/h); no price" in out
    # one g6e instance covers 41.7 audio s/s: one Spot instance at 40 % of 1.861 beats one On-Demand
    assert f"Spot share 1 Spot + 0 On-Demand instances = {1.861 * 0.4 * 24:,.0f} USD for the job" in out
    assert "criterion: the cheapest mix of ml.g6e.xlarge that finishes by the deadline if Spot runs 100%" in out
    assert "an ASSUMPTION (pricing.spot_discount)" in out
    offer = next(o for o in sizing_cli.offers(load_config(Path(argv[0]))) if o.group == "g6e")
    rate = sizing.plan(offer, sizing.BulkDeadline(1000, 24), 1.0).per_instance
    assert 1000 / 24 / (0.3 * rate) > 1  # at 30 % one Spot instance falls short: two, still cheaper
    assert sizing_cli.main([*argv, "--spot-availability", "0.3"]) == 0
    assert "Spot share 2 Spot + 0 On-Demand" in capsys.readouterr().out
