"""LRPO (seed 004 #9, rlpost/rollouts/language_routed.py): the EXP3 router, the exact inclusion probabilities of
m languages drawn without replacement, informativeness, the preference signs and the Bradley-Terry term, each
worked by hand on small numbers."""

from __future__ import annotations

import math
import random

import pytest
import torch

from rlpost.core.schema import build_config
from rlpost.losses.base import LossInputs
from rlpost.rollouts.language_routed import (
    LanguageRouted,
    draw_languages,
    exp3_probs,
    exp3_update,
    inclusion_probs,
    language_stats,
    preference_loss,
    preference_signs,
    split_rows,
)

NAN = float("nan")


def test_exp3_probs_mix_softmax_with_the_uniform_share():
    # w = [0, ln 3]: softmax = [1/4, 3/4]; p = 0.8 * softmax + 0.2 / 2 = [0.3, 0.7]
    p = exp3_probs(torch.tensor([0.0, math.log(3.0)]), 0.2)
    torch.testing.assert_close(p, torch.tensor([0.3, 0.7]))


def test_inclusion_probabilities_of_two_draws_without_replacement():
    # pi_a = p_a + sum_{b != a} p_b * p_a / (1 - p_b), p = [0.5, 0.3, 0.2]:
    #   pi_0 = 0.5 + 0.3*0.5/0.7 + 0.2*0.5/0.8 = 0.8392857
    #   pi_1 = 0.3 + 0.5*0.3/0.5 + 0.2*0.3/0.8 = 0.675
    #   pi_2 = 0.2 + 0.5*0.2/0.5 + 0.3*0.2/0.7 = 0.4857143      (sum = m = 2)
    p = torch.tensor([0.5, 0.3, 0.2])
    torch.testing.assert_close(inclusion_probs(p, 2), torch.tensor([0.8392857, 0.675, 0.4857143]))
    torch.testing.assert_close(inclusion_probs(p, 1), p)  # one draw: pi = p
    torch.testing.assert_close(inclusion_probs(p, 3), torch.ones(3))  # every arm drawn


def test_drawn_languages_are_distinct_and_their_frequencies_match_the_inclusion_probabilities():
    p, rng, counts, n = torch.tensor([0.5, 0.3, 0.2]), random.Random(0), [0, 0, 0], 20000
    for _ in range(n):
        picked = draw_languages(p, 2, rng)
        assert len(set(picked)) == 2
        for a in picked:
            counts[a] += 1
    torch.testing.assert_close(torch.tensor(counts) / n, inclusion_probs(p, 2), atol=0.015, rtol=0)


def test_rows_are_split_in_draw_order():
    assert split_rows(4, [1, 3]) == [1, 1, 3, 3]
    assert split_rows(5, [2, 0]) == [2, 2, 2, 0, 0]  # G mod m = 1: the first language gets one more
    assert split_rows(3, [4, 1, 0]) == [4, 1, 0]


def stats():
    # group 1: r = [1, 0, 0, 0], lang = [0, 0, 1, 1]: mean 0.25, |r - mean| = [.75, .25, .25, .25]
    #   rbar = [0.5, 0, -], info = [(.75+.25)/2, (.25+.25)/2, -] = [0.5, 0.25, -]
    # group 2: r = [1, NaN, 1, 0], lang = [2, 2, 0, 0]: mean over scored 2/3, |r - mean| = [1/3, -, 1/3, 2/3]
    #   rbar = [0.5, -, 1], info = [(1/3+2/3)/2, -, 1/3] = [0.5, -, 1/3]     (the NaN row left out)
    rewards = torch.tensor([1.0, 0, 0, 0, 1, NAN, 1, 0])
    lang = torch.tensor([0, 0, 1, 1, 2, 2, 0, 0])
    return rewards, lang


def test_language_stats_hand_worked():
    rewards, lang = stats()
    rbar, info = language_stats(rewards, lang, 4, 3, 1.0)
    torch.testing.assert_close(rbar, torch.tensor([[0.5, 0.0, NAN], [0.5, NAN, 1.0]]), equal_nan=True)
    torch.testing.assert_close(info, torch.tensor([[0.5, 0.25, NAN], [0.5, NAN, 1 / 3]]), equal_nan=True)
    _, half = language_stats(rewards, lang, 4, 3, 0.4)  # scale 0.4: 0.5 / 0.4 = 1.25 -> clamped to 1
    torch.testing.assert_close(half, torch.tensor([[1.0, 0.625, NAN], [1.0, NAN, 0.8333333]]), equal_nan=True)


def test_exp3_update_is_importance_weighted_by_the_inclusion_probability():
    # estimate_a = (1/P) sum_g info_ga / pi_a, P = 2, pi = [0.8, 0.5, 0.4]:
    #   [(0.5+0.5)/0.8/2, 0.25/0.5/2, (1/3)/0.4/2] = [0.625, 0.25, 0.4166667]; w = 0 + 0.3 * estimate
    info = torch.tensor([[0.5, 0.25, NAN], [0.5, NAN, 1 / 3]])
    w = exp3_update(torch.zeros(3), info, torch.tensor([0.8, 0.5, 0.4]), 0.3)
    torch.testing.assert_close(w, torch.tensor([0.1875, 0.075, 0.125]))


def test_preference_signs_best_language_winners_and_worst_language_losers():
    rewards, lang = stats()
    rbar, _ = language_stats(rewards, lang, 4, 3, 1.0)
    # group 1: best 0 (0.5), worst 1 (0.0): row 0 (lang 0, r 1 > 0) +1; row 1 (r 0 not > 0) 0; rows 2, 3 (lang 1,
    #   r 0 < 0.5) -1. group 2: best 2 (1.0), worst 0 (0.5): row 4 (r 1 > 0.5) +1; row 5 NaN 0; row 6 (lang 0,
    #   r 1 not < 1) 0; row 7 (r 0 < 1) -1
    s = preference_signs(rewards, lang, rbar, 0.0)
    assert s.tolist() == [1, 0, -1, -1, 1, 0, 0, -1]
    assert preference_signs(rewards, lang, rbar, 0.5).abs().sum() == 0  # both gaps are 0.5, not > 0.5
    tied = torch.tensor([1.0, 0.0, 1.0, 0.0])  # equal language means: no preference
    tie_bar, _ = language_stats(tied, torch.tensor([0, 0, 1, 1]), 4, 2, 1.0)
    assert preference_signs(tied, torch.tensor([0, 0, 1, 1]), tie_bar, 0.0).abs().sum() == 0


def test_preference_loss_value_and_gradient():
    # rho_0 = ((-1+1.5) + (-2+2.5)) / 2 = 0.5; rho_1 = 0 (one token counts); s = [+1, -1], beta 2, coef 0.5
    # L_0 = 0.5 * -log sigma(2 * 0.5) = 0.5 * 0.3132617 = 0.1566309;  L_1 = 0.5 * -log sigma(0) = 0.5 ln 2
    # dL_0/dlogp_0t = -coef * beta * s * sigma(-beta s rho) / n_0 = -0.5 * 2 * 0.2689414 / 2 = -0.1344707
    # dL_1/dlogp_10 = -0.5 * 2 * (-1) * 0.5 / 1 = +0.5 (the loser's log-prob is pushed down); masked token: 0
    logps = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]], requires_grad=True)
    x = LossInputs(
        logps=logps,
        old_logps=torch.tensor([[-1.5, -2.5], [-1.0, -1.0]]),
        advantages=torch.zeros(2, 1),
        mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
    )
    term = preference_loss(x, torch.tensor([1.0, -1.0]), beta=2.0, coef=0.5)
    assert term.shape == (2, 2)
    torch.testing.assert_close(term[:, 0], torch.tensor([0.1566309, 0.5 * math.log(2.0)]))
    (grad,) = torch.autograd.grad(term[:, 0].sum(), logps)
    torch.testing.assert_close(grad, torch.tensor([[-0.1344707, -0.1344707], [0.5, 0.0]]))
    zero = preference_loss(x, torch.tensor([0.0, 0.0]), beta=2.0, coef=0.5)
    assert zero.abs().sum() == 0  # rows with s = 0 carry no term


def router(**kw) -> LanguageRouted:
    return LanguageRouted(
        build_config(LanguageRouted.Config, {"languages": ["English", "French", "Chinese"], **kw}, "rollout")
    )


def test_route_updates_the_router_from_uniform_and_returns_the_signs():
    strategy = router()
    rewards, lang = stats()
    kinds = [["lang_English", "lang_French", "lang_Chinese"][a] for a in lang.tolist()]
    sign, metrics = strategy.route(rewards, kinds, 4)
    # uniform p = 1/3, m = 2: pi = 2/3 each; estimate = [1.0/(2/3)/2, 0.25/(2/3)/2, (1/3)/(2/3)/2]
    #   = [0.75, 0.1875, 0.25]; w = 0.3 * estimate
    torch.testing.assert_close(strategy.log_w, torch.tensor([0.225, 0.05625, 0.075], dtype=torch.float64))
    assert sign.tolist() == [1, 0, -1, -1, 1, 0, 0, -1]
    assert strategy.picks == [2, 1, 1]  # English in both groups, French and Chinese in one each
    assert metrics["language_routed/info/French"] == pytest.approx(0.25)
    assert metrics["language_routed/reward/Chinese"] == pytest.approx(1.0)
    assert metrics["language_routed/pref_frac"] == pytest.approx(5 / 8)
    assert metrics["language_routed/pref_gap"] == pytest.approx(0.5)
    p = strategy.probs()  # English, the most informative, is now the likeliest pick
    assert p.argmax() == 0 and p.sum().item() == pytest.approx(1.0)


def test_state_round_trip_is_keyed_by_language_name():
    strategy = router()
    strategy.log_w, strategy.picks = torch.tensor([0.5, -0.25, 1.0], dtype=torch.float64), [3, 1, 2]
    other = router(languages=["Chinese", "English", "German"])  # reordered, one new, one gone
    other.load_state_dict(strategy.state_dict())
    assert other.log_w.tolist() == [1.0, 0.5, 0.0] and other.picks == [2, 3, 0]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"instruction": "Answer."}, "must contain {language}"),
        ({"languages": ["French", "French"]}, "distinct"),
        ({"languages": []}, "non-empty"),
    ],
)
def test_config_refuses_bad_values(params, message):
    with pytest.raises(ValueError, match=message):
        LanguageRouted.Config(**params)


class FakeContext:
    """What generate() uses of RolloutContext: groups, rng, log and a generate that echoes its prompts."""

    def __init__(self, g: int):
        self.num_generations, self.rng, self.logged, self.asked = g, random.Random(1), {}, []

    def groups(self, n):
        return [range(s, s + self.num_generations) for s in range(0, n, self.num_generations)]

    def log(self, name, value):
        self.logged[name] = value

    def generate(self, prompts, kind="natural"):
        from rlpost.rollouts.base import Rollouts

        self.asked = prompts
        n = len(prompts)
        return Rollouts([[1]] * n, [[2]] * n, None, ["7"] * n, None, {}, kinds=[kind] * n)


def test_generate_asks_each_row_in_its_language_and_tags_it():
    strategy, ctx = router(), FakeContext(g=5)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 3 + 4?"}]
    out = strategy.generate([chat] * 5 + ["What is 2 * 6?"] * 5, ctx)
    assert ctx.logged == {f"language_routed/p/{n}": pytest.approx(1 / 3) for n in ("English", "French", "Chinese")}
    for start, question in ((0, "What is 3 + 4?"), (5, "What is 2 * 6?")):
        kinds = out.kinds[start : start + 5]
        assert kinds[0] == kinds[1] == kinds[2] != kinds[3] == kinds[4]  # G = 5, m = 2: 3 + 2 rows
        for i in range(start, start + 5):
            language = out.kinds[i].removeprefix("lang_")
            asked = ctx.asked[i] if start else ctx.asked[i][-1]["content"]
            assert asked == f"{question}\n\nAnswer in {language}."
    assert ctx.asked[0][0] == chat[0]  # the system message is kept


def test_score_rollouts_routes_the_gathered_batch_and_the_loss_term_uses_its_signs():
    from collections import defaultdict

    from rlpost.core.component import ScoringInputs
    from rlpost.rollouts.language_routed import PREF

    rewards, lang = stats()
    kinds = [["lang_English", "lang_French", "lang_Chinese"][a] for a in lang.tolist()]
    logged = defaultdict(list)

    def inputs(output, training=True):  # one process: the local slice is the whole gathered batch
        return ScoringInputs(output=output, rows=[{}] * 8, training=training, num_generations=4, local=slice(0, 8),
                             kinds=kinds, all_kinds=kinds, task_rewards=rewards,
                             log=lambda name, value: logged[name].append(value))  # fmt: skip

    strategy = router()
    out = strategy.score_rollouts(inputs({"completion_ids": torch.zeros(8, 3, dtype=torch.long)}))
    assert out[PREF].tolist() == [1, 0, -1, -1, 1, 0, 0, -1]  # the signs worked out above
    assert logged["rlpost/rollout/language_routed/pref_frac"] == [pytest.approx(5 / 8)]
    x = LossInputs(logps=torch.zeros(8, 3), old_logps=torch.zeros(8, 3), advantages=torch.zeros(8, 1),
                   mask=torch.ones(8, 3), batch=out)  # fmt: skip
    term, metrics = strategy.loss_term(x)  # at the rollout policy: pref_coef * ln 2 on the 5 rows with s != 0
    assert term[:, 0].tolist() == pytest.approx([math.log(2.0) * abs(s) for s in out[PREF].tolist()])
    assert metrics["language_routed/pref_loss"] == pytest.approx(math.log(2.0))
    before = strategy.log_w.clone()  # evaluation: zeros, the router does not move
    assert strategy.score_rollouts(inputs({"completion_ids": torch.zeros(8, 3)}, training=False))[PREF].abs().sum() == 0
    assert torch.equal(strategy.log_w, before) and strategy.loss_term(
        LossInputs(
            torch.zeros(8, 3), torch.zeros(8, 3), torch.zeros(8, 1), torch.ones(8, 3), batch={PREF: torch.zeros(8)}
        )
    ) == (None, {})
