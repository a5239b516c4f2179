"""The ranking simulation: learned CTR beats the fixed CTR and approaches the oracle."""

from __future__ import annotations

from bench.money import make_world, simulate


def test_learned_ranking_beats_fixed_ctr_and_approaches_the_oracle():
    world = make_world(3)
    traces = simulate(world, 30_000, 3)
    oracle, learned, fixed = (traces[k] for k in ("oracle", "learned", "fixed"))
    assert learned.total_revenue > fixed.total_revenue
    late = sum(learned.revenue[-2:]) / sum(oracle.revenue[-2:])
    assert late > 0.95, late
    assert learned.total_regret < fixed.total_regret / 2
    # Regret flattens: the last 10k requests cost less than the first 10k.
    assert learned.regret[-1] - learned.regret[-3] < learned.regret[1]


def test_the_oracle_has_no_regret_and_the_world_is_reproducible():
    a, b = make_world(5), make_world(5)
    assert a.true_ctr == b.true_ctr
    traces = simulate(a, 5_000, 5)
    assert traces["oracle"].total_regret == 0
