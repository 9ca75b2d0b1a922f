"""RAIL's intervention bandit (rlpost/rollouts/intervention_bandit.py, linucb.py) without a trainer: the LinUCB
update and choice, the context features, the improvement, the reward stage's bookkeeping, shadow -> live, the
state round trip and bad config, all on small numbers worked out by hand."""

from __future__ import annotations

import math
import random

import pytest
import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.rollouts.intervention_bandit import InterventionBandit
from rlpost.rollouts.interventions import intervened_prompt
from rlpost.rollouts.linucb import LinUCB, context

NAN = float("nan")
ARMS = ["none", "hint", "extra"]


def strategy(**kw) -> InterventionBandit:
    return InterventionBandit(InterventionBandit.Config(arms=kw.pop("arms", ARMS), **kw))


def test_linucb_update_and_choice_by_hand():
    bandit = LinUCB(["a", "b"], dim=2, alpha=1.0, ridge=1.0)
    # A = I, b = 0: theta = 0, ucb = alpha * sqrt(x^T x) = 1 for x = [1, 0] on both arms: the first wins the tie
    mean, ucb = bandit.scores([1.0, 0.0])
    assert mean.tolist() == [0.0, 0.0] and ucb.tolist() == [1.0, 1.0] and bandit.choose([1.0, 0.0]) == "a"
    # a played at x = [1, 0] with gain 0.5: A_a = [[2, 0], [0, 1]], b_a = [0.5, 0], theta_a = [0.25, 0]
    bandit.update("a", [1.0, 0.0], 0.5)
    mean, ucb = bandit.scores([1.0, 0.0])
    # ucb_a = 0.25 + sqrt(1/2) = 0.9571 < ucb_b = 1: b is still unexplored, LinUCB tries it
    assert mean.tolist() == pytest.approx([0.25, 0.0]) and ucb.tolist() == pytest.approx([0.25 + 0.5**0.5, 1.0])
    assert bandit.choose([1.0, 0.0]) == "b"
    bandit.alpha = 0.0  # greedy on the prediction: 0.25 > 0
    assert bandit.choose([1.0, 0.0]) == "a"
    # a again at x = [1, 1], gain 1: A_a = [[3, 1], [1, 2]], b_a = [1.5, 1]; A_a^-1 = [[2, -1], [-1, 3]] / 5
    # theta_a = [3 - 1, -1.5 + 3] / 5 = [0.4, 0.3]; at x = [0, 1]: mean 0.3, width sqrt(3/5)
    bandit.update("a", [1.0, 1.0], 1.0)
    bandit.alpha = 2.0
    mean, ucb = bandit.scores([0.0, 1.0])
    assert mean[0].item() == pytest.approx(0.3) and ucb[0].item() == pytest.approx(0.3 + 2 * 0.6**0.5)
    assert bandit.counts == [2, 0] and bandit.gain_sums == [1.5, 0.0]


def test_context_features_by_hand():
    # probe rewards [1, 0, NaN] -> mean 0.5, population std 0.5 (the NaN left out); prompt 5 chars / 2 = 2.5;
    # completions 2, 4, 6 chars: mean 4 / 2 = 2
    x = context([1.0, 0.0, NAN], ["ab", "abcd", "xyzxyz"], "hello", length_scale=2.0)
    assert x == pytest.approx([1.0, 0.5, 0.5, 2.5, 2.0])
    assert context([NAN], ["a"], "", 1.0) == [1.0, 0.0, 0.0, 0.0, 1.0]  # nothing scorable: mean, std 0


def test_gain_by_hand():
    r = torch.tensor([0.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    mean, spread = strategy(gain="mean"), strategy(gain="spread")
    # mean: mean(1, 1) - mean(0, 1) = 0.5; spread: std(0,1,1,1) = sqrt(3/16) = 0.4330 minus std(0, 1) = 0.5
    assert mean.gain(r, [0, 1], [2, 3], "hint") == pytest.approx(0.5)
    assert spread.gain(r, [0, 1], [2, 3], "hint") == pytest.approx(3**0.5 / 4 - 0.5)
    r = torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=torch.float64)  # a failed probe, one recovery
    assert mean.gain(r, [0, 1], [2, 3], "extra") == pytest.approx(0.5)
    assert spread.gain(r, [0, 1], [2, 3], "extra") == pytest.approx(3**0.5 / 4)
    assert mean.gain(r, [0, 1], [2, 3], "none") == 0.0  # nothing done, nothing caused
    assert math.isnan(mean.gain(torch.tensor([NAN, NAN, 1.0, 1.0]), [0, 1], [2, 3], "hint"))  # unscorable probe


def test_adjust_rewards_updates_the_bandit_and_drops_the_none_slots():
    s = strategy(length_scale=1.0)
    kinds = ["natural", "natural", "intervention_hint", "intervention_hint",
             "natural", "natural", "intervention_none", "intervention_none"]  # fmt: skip
    rewards = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    rows = [{"prompt": [{"role": "user", "content": "ab"}]}] * 4 + [{"prompt": "abcd"}] * 4
    texts = ["x", "xyz", "h", "h", "xx", "xx", "", ""]
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    out, metrics = s.adjust_rewards(rewards, kinds, rows, completions, 4)
    assert out[:6].tolist() == rewards[:6].tolist() and torch.isnan(out[6:]).all()  # none: out of the group
    # group 0: x = [1, mean 0, std 0, 2 chars, (1 + 3) / 2 = 2], gain mean(1, 1) - mean(0, 0) = 1
    # group 1: x = [1, 0.5, 0.5, 4, 2], gain 0 (none)
    assert s.bandit.b[1].tolist() == [1.0, 0.0, 0.0, 2.0, 2.0] and s.bandit.b[0].tolist() == [0.0] * 5
    x1 = torch.tensor([1.0, 0.5, 0.5, 4.0, 2.0], dtype=torch.float64)
    assert torch.allclose(s.bandit.A[0], torch.eye(5, dtype=torch.float64) + torch.outer(x1, x1))
    assert s.bandit.counts == [1, 1, 0]
    assert metrics == {
        "intervention_bandit/gain/none": 0.0,
        "intervention_bandit/gain/hint": 1.0,
        "intervention_bandit/gain_avg/none": 0.0,
        "intervention_bandit/gain_avg/hint": 1.0,
        "intervention_bandit/gain_avg/extra": 0.0,
    }


class Ctx:
    def __init__(self, step: int, seed: int = 0):
        self.step, self.rng = step, random.Random(seed)


def test_shadow_plays_random_arms_then_live_plays_the_bandit():
    s = strategy(shadow_steps=2, alpha=0.0)
    x = [1.0, 0.0, 0.0, 0.1, 0.1]
    s.bandit.update("extra", x, 0.8)  # the only arm with a positive predicted gain
    assert s.bandit.choose(x) == "extra"
    shadow = [s._choose(Ctx(1, seed), x) for seed in range(30)]
    assert all(wanted == "extra" for _, wanted in shadow)  # the would-be choice is logged in shadow mode
    # played: random.Random(seed).choice(ARMS), uniform over the arms, not the bandit's
    assert [arm for arm, _ in shadow] == [random.Random(seed).choice(ARMS) for seed in range(30)]
    assert {arm for arm, _ in shadow} == set(ARMS)
    assert s._choose(Ctx(2), x) == ("extra", "extra")  # step 2 = shadow_steps: live


def test_state_round_trip():
    s = strategy()
    s.bandit.update("hint", [1.0, 2.0, 0.0, 0.0, 1.0], -0.25)
    state = s.state_dict()
    t = strategy()
    t.load_state_dict(state)
    assert torch.equal(t.bandit.A, s.bandit.A) and torch.equal(t.bandit.b, s.bandit.b)
    assert t.bandit.counts == [0, 1, 0] and t.bandit.gain_sums == [0.0, -0.25, 0.0]
    s.bandit.update("hint", [1.0] * 5, 1.0)  # the saved state is a copy
    assert t.bandit.counts == [0, 1, 0]
    with pytest.raises(ValueError, match="saved bandit arms"):
        strategy(arms=["none", "extra"]).load_state_dict(state)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algorithm.rollout.arms=[none,peek]"], "arms must be distinct names from"),
        (["algorithm.rollout.arms=[none,none]"], "arms must be distinct names from"),
        (["algorithm.rollout.probe=4", "train.num_generations=4"], "probe=4 must be smaller than"),
        (["algorithm.rollout.hint_template=no placeholder"], "hint_template must contain {hint}"),
        (["algorithm.rollout.gain=best"], "gain"),
        (["reward/combine=decoupled"], "returns group-centred advantages, but algorithm/rollout=intervention_bandit"),
    ],
)
def test_bad_config_is_a_config_error(overrides, message):
    arms = [] if any("arms=" in o for o in overrides) else ["algorithm.rollout.arms=[none,extra,draft]"]  # no writer
    with pytest.raises(ConfigError) as err:
        build_run(compose(["algorithm/rollout=intervention_bandit", *arms, *overrides]))
    assert message in str(err.value)


def test_each_arm_builds_its_intervened_prompt():
    from rlpost.rollouts.base import Rollouts

    x = [{"role": "user", "content": "Calculate 2 * 6."}]
    out = Rollouts.empty(2, Rollouts([[1]], [[2]], None, ["a"], None, {}))
    out.completions = [[{"role": "assistant", "content": "13"}], [{"role": "assistant", "content": "12"}]]
    ctx = type("Ctx", (), {"rows": [{"solution": "2 * 6 = 12", "answer": "12"}]})()
    g = {"start": 0, "worst": 0, "best": 1, "note": "Multiply."}
    s = strategy(arms=list(ARMS), draft_fraction=0.5)
    # hint: the note appended to the user message
    assert intervened_prompt(s.cfg, {**g, "arm": "hint"}, [x], ctx, out) == [
        {"role": "user", "content": "Calculate 2 * 6.\n\nHint: Multiply."}
    ]
    # critique: the worst attempt as an assistant turn, then the critique turn
    critique = intervened_prompt(s.cfg, {**g, "arm": "critique"}, [x], ctx, out)
    assert critique[1] == {"role": "assistant", "content": "13"}
    assert critique[2]["content"].startswith("Feedback on your response: Multiply.\nWrite an improved response")
    # draft: without draft_column the best probe attempt; with it, the first half of the column (10 chars -> 5)
    draft = intervened_prompt(s.cfg, {**g, "arm": "draft"}, [x], ctx, out)[0]["content"]
    assert "A draft solution (it may be wrong):\n12\n\n" in draft
    s = strategy(draft_column="solution", draft_fraction=0.5)
    assert (
        "(it may be wrong):\n2 * 6\n\n" in intervened_prompt(s.cfg, {**g, "arm": "draft"}, [x], ctx, out)[0]["content"]
    )
    assert intervened_prompt(s.cfg, {**g, "arm": "extra"}, [x], ctx, out) is x  # extra: more samples under x
