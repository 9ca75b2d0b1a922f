"""REATS's reward (seed 000 #4): reward=ensemble_weights scores the forecast-MSE gap of the ensemble a completion's
percentage table forms to the oracle ensemble, mapped reciprocally (or linearly, the naive baseline); ens_gap is the
gap itself, a weight-0 readout. The oracle solve, the table parser and both mappings by hand."""

from __future__ import annotations

import itertools
import json
import random
import statistics

import numpy as np
import pytest

import rlpost.components  # noqa: F401  (registers every reward)
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.data.ensembles import ensemble_mse, grid_weights, oracle_weights, parse_table
from rlpost.rewards.base import REWARDS
from rlpost.scoring.terms import build_reward_terms

# truth y = (100, 100); candidate errors A (1, 0), B (0, 1), C (2, 2)
FUTURE = [100.0, 100.0]
FORECASTS = [[101.0, 100.0], [100.0, 101.0], [102.0, 102.0]]


def make(name, **params):
    cls = REWARDS.get(name)
    return cls(build_config(cls.Config, params, "test"))


def score(reward, completions, forecasts=FORECASTS, future=FUTURE):
    """One row's ``forecasts`` and ``future`` (as the generated data stores them: JSON text) for every completion."""
    n = len(completions)
    return reward(["q"] * n, completions, forecasts=[json.dumps(forecasts)] * n, future=[json.dumps(future)] * n)


# ---- the oracle ensemble ------------------------------------------------------------------------


def test_oracle_weights_by_hand():
    # errors A (1, 0), B (0, 1), C (2, 2): w = (1/2, 1/2, 0) gives the ensemble error (1/2, 1/2), MSE 1/4; C only
    # adds error in both steps
    w, best = oracle_weights(FORECASTS, FUTURE)
    assert w == pytest.approx([0.5, 0.5, 0.0]) and best == pytest.approx(0.25)
    # one step, errors A +3, B -6, C +10: 3a - 6b = 0 with a + b = 1 -> a = 2/3, b = 1/3, MSE 0
    w, best = oracle_weights([[103.0], [94.0], [110.0]], [100.0])
    assert w == pytest.approx([2 / 3, 1 / 3, 0.0]) and best == pytest.approx(0.0, abs=1e-9)
    # every candidate overshoots (errors 1, 2, 3): the best corner, A alone, MSE 1
    w, best = oracle_weights([[1.0], [2.0], [3.0]], [0.0])
    assert w == pytest.approx([1.0, 0.0, 0.0]) and best == pytest.approx(1.0)
    # two identical candidates: any split of their weight is optimal; the MSE is still exact
    w, best = oracle_weights([[101.0, 100.0], [101.0, 100.0], [99.0, 100.0]], FUTURE)
    assert w[0] + w[1] == pytest.approx(0.5) and w[2] == pytest.approx(0.5) and best == pytest.approx(0.0, abs=1e-9)


def test_oracle_weights_are_optimal_on_random_rows():
    rng = np.random.default_rng(0)
    lattice = np.array([(a, b, 100 - a - b) for a in range(101) for b in range(101 - a)], dtype=float) / 100  # 1%
    for _ in range(40):
        future = rng.normal(100, 3, size=4)
        forecasts = future + rng.normal(rng.normal(0, 2, size=(3, 1)), 2, size=(3, 4))  # biased, noisy candidates
        w, best = oracle_weights(forecasts.tolist(), future.tolist())
        assert (
            min(w) >= 0 and sum(w) == pytest.approx(1.0) and ensemble_mse(w, forecasts, future) == pytest.approx(best)
        )
        # KKT certificate: mse(w) = w^T G w with G = E E^T / H (E = forecasts - future); its gradient 2 G w is the same
        # on the support and no smaller off it, so no feasible direction lowers the MSE
        errors = forecasts - future
        grad = 2 * (errors @ errors.T / 4) @ np.array(w)
        on = [k for k in range(3) if w[k] > 1e-9]
        assert max(grad[on]) - min(grad[on]) < 1e-6 and min(grad) >= min(grad[on]) - 1e-6
        # and no table on a 1% lattice beats it
        lattice_mse = (((lattice @ forecasts) - future) ** 2).mean(axis=1)
        assert best <= lattice_mse.min() + 1e-9
        # grid_weights is the lattice's best at its step (10%: 66 tables)
        percents = grid_weights(forecasts.tolist(), future.tolist(), 10)
        tens = [(a, b, 100 - a - b) for a in range(0, 101, 10) for b in range(0, 101 - a, 10)]
        assert ensemble_mse([p / 100 for p in percents], forecasts, future) == pytest.approx(
            min(ensemble_mse([p / 100 for p in t], forecasts, future) for t in tens)
        )
        assert sum(percents) == 100 and all(p % 10 == 0 for p in percents)


# ---- the table ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "weights"),
    [
        ("A: 50%, B: 30%, C: 20%", [0.5, 0.3, 0.2]),
        ("A: 40%\nB: 0%\nC: 60%", [0.4, 0.0, 0.6]),
        ("A (last value): 20%\nB (moving mean) = 20%\nC | 10%", [0.4, 0.4, 0.2]),  # normalised by the sum 50
        ("B: 100%", [0.0, 1.0, 0.0]),  # a label without a row weighs 0
        ("A: 10%, A: 30%, C: 30%", [0.5, 0.0, 0.5]),  # the last row of a label counts
        ("A: 12.5%, B: 87.5%, D: 50%", [0.125, 0.875, 0.0]),  # D is no candidate of three
        ("Weights: A 50 B 50", None),  # no percentages
        ("A: 0%\nB: 0%\nC: 0%", None),  # nothing positive
        ("Maybe 50%?", None),
    ],
)
def test_parse_table(text, weights):
    parsed = parse_table(text, 3)
    assert parsed == (None if weights is None else pytest.approx(weights))


# ---- the reward ---------------------------------------------------------------------------------


def test_reciprocal_and_linear_mappings_by_hand():
    completions = ["A: 100%", "C: 100%", "A: 50%\nB: 50%\nC: 0%", "A: 20%\nB: 20%\nC: 10%", "I cannot tell", "<think>A: 100%</think>A: 50%, B: 50%"]  # fmt: skip
    # oracle MSE 1/4 (test_oracle_weights_by_hand). Gaps:
    #   A alone: ensemble (101, 100), MSE (1 + 0)/2 = 1/2 -> gap 1/4
    #   C alone: MSE (4 + 4)/2 = 4 -> gap 15/4
    #   A, B half each: the oracle -> gap 0 (also the table after </think>)
    #   (0.4, 0.4, 0.2): ensemble 0.4*101 + 0.4*100 + 0.2*102 = 100.8 in both steps, MSE 0.64 -> gap 0.39
    gaps = [0.25, 3.75, 0.0, 0.39]
    reciprocal = make("ensemble_weights", scale=0.5, unparsable=-0.5)
    # r = 1 / (1 + gap / 0.5): 2/3, 2/17, 1, 1/1.78; the unparsable completion gets -0.5
    assert score(reciprocal, completions) == pytest.approx([2 / 3, 2 / 17, 1.0, 1 / 1.78, -0.5, 1.0])
    linear = make("ensemble_weights", mapping="linear", scale=0.5, unparsable=-0.5)
    # r = max(0, 1 - gap / 0.5): 0.5, max(0, -6.5) = 0, 1, 0.22
    assert score(linear, completions) == pytest.approx([0.5, 0.0, 1.0, 0.22, -0.5, 1.0])
    unbounded = make("ensemble_weights", mapping="linear", scale=0.5, floor=None)
    assert score(unbounded, completions[:2]) == pytest.approx([0.5, 1 - 3.75 / 0.5])  # -6.5
    gap = make("ens_gap")  # the readout: the gap itself; no table -> the equal-weight ensemble's gap
    # equal weights: ensemble ((101 + 100 + 102)/3, (100 + 101 + 102)/3) = (101, 101), MSE 1 -> gap 3/4
    assert score(gap, completions) == pytest.approx([*gaps, 0.75, 0.0])
    assert score(make("ens_gap", unparsable="skip"), completions[4:5]) == [None]


def test_the_reward_reads_the_candidate_forecasts():
    """Fails on the old code: REATS's reward was ``reciprocal``, which compares the numbers written with a target
    column and never sees the candidates, so the same table scored the same whatever the forecasts were."""
    table = "A: 100%, B: 0%, C: 0%"
    moved = [[103.0, 100.0], FORECASTS[1], FORECASTS[2]]  # only candidate A's forecast moves
    # before: gap 1/4 -> 1 / (1 + 0.25/0.5) = 2/3. After: A alone has MSE (9 + 0)/2 = 4.5; the oracle on errors
    # A (3, 0), B (0, 1): min (9a^2 + b^2)/2 over a + b = 1 -> a = 0.1, MSE (0.09 + 0.81)/2 = 0.45 (C, errors (2, 2),
    # does not help: its gradient 2(3a + b) = 2.4 exceeds A's and B's 0.9), so the gap is 4.05 -> 1 / (1 + 8.1)
    reward = make("ensemble_weights", scale=0.5)
    assert oracle_weights(moved, FUTURE)[1] == pytest.approx(0.45)
    assert score(reward, [table]) == pytest.approx([2 / 3])
    assert score(reward, [table], forecasts=moved) == pytest.approx([1 / 9.1])
    assert score(make("ens_gap"), [table], forecasts=moved) == pytest.approx([4.05])
    # the old reading: the written numbers (100, 0, 0) against a target weight vector, blind to the forecasts
    old = make("reciprocal", scale=0.5)
    assert old(["q"] * 2, [table] * 2, answer=[[0.5, 0.5, 0.0]] * 2, forecasts=[FORECASTS, moved]) == pytest.approx(
        [1 / (1 + ((100 - 0.5) ** 2 + 0.5**2) / 3 / 0.5)] * 2
    )


def test_unscorable_rows_are_none():
    reward = make("ensemble_weights")
    n = 3
    out = reward(["q"] * n, ["A: 100%"] * n, forecasts=[None, "[[1, 2]]", "not json"], future=["[1]", "[1]", "[1]"])
    assert out == [None, None, None]  # missing; 2 forecast steps for 1 future value; unreadable
    ok = reward(["q"], ["A: 100%"], forecasts=[[[1.0], [3.0]]], future=[[2.0]])  # plain lists work too
    assert ok == pytest.approx([1 / (1 + 0.5)])  # oracle (1/2, 1/2) exact; A alone: MSE 1, gap 1 -> 1/(1 + 1/2)


def test_reciprocal_keeps_a_groups_advantages_apart_despite_an_outlier():
    """The abstract's "outlier-dominated advantage compression": a group of four tables with gaps 0, 0.5, 1 and one
    outlier 100 (scale 1). GRPO's advantage is (r - mean) / std over the group (population std)."""
    reciprocal = make("ensemble_weights", scale=1.0)
    unbounded = make("ensemble_weights", mapping="linear", scale=1.0, floor=None)
    floored = make("ensemble_weights", mapping="linear", scale=1.0)
    gaps = [0.0, 0.5, 1.0, 100.0]

    def spread(reward):  # the advantage between the oracle table and the gap-1 table
        r = [reward.mapped(g) for g in gaps]
        return (r[0] - r[2]) / statistics.pstdev(r)

    # reciprocal r = (1, 2/3, 1/2, 1/101): mean 0.544, std 0.357 -> (1 - 1/2) / 0.357 = 1.40
    assert spread(reciprocal) == pytest.approx(1.40, abs=0.01)
    # unbounded linear r = (1, 0.5, 0, -99): mean -24.375, std 43.09 -> 1 / 43.09 = 0.023: the outlier compresses
    assert spread(unbounded) == pytest.approx(0.0232, abs=0.0005)
    # floored linear r = (1, 0.5, 0, 0): bounded, but gap 1 and gap 100 tie (no sensitivity past the scale)
    assert [floored.mapped(g) for g in gaps] == [1.0, 0.5, 0.0, 0.0]


def test_bad_params_and_a_trained_readout_are_refused_before_any_model_loads():
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.scale"):
        build_reward_terms([{"name": "ensemble_weights", "params": {"scale": 0}}])
    with pytest.raises(ConfigError, match="mapping"):
        build_reward_terms([{"name": "ensemble_weights", "params": {"mapping": "exp"}}])
    small = ["data.train_size=8", "data.eval_size=4", "eval.size=4"]
    run = build_run(compose(["recipe=reats", *small]))
    assert run.reward.names == ["ensemble_weights", "ens_gap"] and run.reward.weights.tolist() == [1.0, 0.0]
    with pytest.raises(ConfigError, match="would train the policy to widen it"):
        build_run(compose(["recipe=reats", *small, "reward.terms.1.weight=1.0"]))


def test_gaps_of_the_generated_rows_are_zero_at_the_oracle_and_positive_elsewhere():
    from rlpost.data.ensemble_weights import ensemble_weight_rows

    rows = ensemble_weight_rows(3, 30)
    gap = make("ens_gap")
    rng = random.Random(0)
    for row in rows:
        forecasts, future = json.loads(row["forecasts"]), json.loads(row["future"])
        w, best = oracle_weights(forecasts, future)
        assert best == pytest.approx(row["oracle_mse"], abs=1e-5)
        exact = ", ".join(f"{label}: {100 * x:.6f}%" for label, x in zip("ABC", w))
        other = [rng.random() for _ in range(3)]
        out = gap(["q"] * 3, [exact, row["answer"], "A: {:.3f}%, B: {:.3f}%, C: {:.3f}%".format(*other)],
                  forecasts=[row["forecasts"]] * 3, future=[row["future"]] * 3)  # fmt: skip
        assert out[0] == pytest.approx(0.0, abs=1e-6) and out[1] >= 0 and out[2] >= out[0]
        # the gold table is the best 10% table: at most the gap of any 10% table
        tens = [(a, b, 100 - a - b) for a, b in itertools.product(range(0, 101, 10), repeat=2) if a + b <= 100]
        assert out[1] == pytest.approx(min(ensemble_mse([p / 100 for p in t], forecasts, future) for t in tens) - best)
