"""Rollout strategies without a trainer: their formulas by hand (RC-GRPO's refusal rewards and
over-refusal penalty, CRPO's negative baseline, RISE-RL's missed items and keep rule), the row
bookkeeping, conditioned prompts, and bad config (exit code 2, keys and choices named)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from rlpost import cli
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.losses.base import LossInputs
from rlpost.rollouts.base import Rollouts, user_text, with_user_text
from rlpost.rollouts.conditioned import revise_prompt
from rlpost.rollouts.draft_injection import DraftInjection, is_correct, make_correct, make_wrong, next_other
from rlpost.rollouts.forced_refusal import ForcedRefusal, refusal_rewards
from rlpost.rollouts.generic_negative import negative_baseline_rewards
from rlpost.rollouts.rubric_guidance import RubricGuidance, faded, missed_criteria, rise_keep, weighted_mean

from support.config import assert_clean_failure

NAN = float("nan")


def test_refusal_rewards_by_hand():
    # r' = u * (ref * 1.0 + (1 - ref) * 0.0) + (1 - u) * (r - 0.5 * ref)
    r = torch.tensor([1.0, 0.0, 1.0, 0.2, NAN, NAN])
    u = torch.tensor([False, False, False, False, True, True])
    ref = torch.tensor([False, True, True, False, True, False])
    out = refusal_rewards(r, u, ref, refusal_reward=1.0, answer_reward=0.0, penalty=0.5)
    # answerable: 1 (kept), 0 - 0.5 (refused a question it could answer), 1 - 0.5, 0.2; unanswerable: 1, 0
    assert out.tolist() == pytest.approx([1.0, -0.5, 0.5, 0.2, 1.0, 0.0])
    # other constants: c_refusal = 0.3, c_answer = -1, lambda = 2
    out = refusal_rewards(r, u, ref, refusal_reward=0.3, answer_reward=-1.0, penalty=2.0)
    assert out.tolist() == pytest.approx([1.0, -2.0, -1.0, 0.2, 0.3, -1.0])


def test_refusal_detection():
    fr = ForcedRefusal(ForcedRefusal.Config())
    assert fr.refuses("None") and fr.refuses("  none. ") and fr.refuses([{"role": "assistant", "content": "NONE!"}])
    assert fr.refuses("Sorry, I don't know.") and fr.refuses("It is unanswerable")
    assert not fr.refuses("7") and not fr.refuses("None of them is 7, the answer is 8")
    assert fr.unanswerable({"unanswerable": True}) and fr.unanswerable({"unanswerable": "yes"})
    assert not fr.unanswerable({"unanswerable": False}) and not fr.unanswerable({"unanswerable": "false"})
    with pytest.raises(KeyError, match="unanswerable.*Columns present: answer, prompt"):
        fr.unanswerable({"prompt": "x", "answer": "1"})


def test_negative_baseline_by_hand():
    # G = 3, the last row of each group is generic: r_generic = min(natural) - margin
    r = torch.tensor([0.2, 0.7, 0.9, 1.0, NAN, 5.0, NAN, NAN, 3.0])
    generic = torch.tensor([False, False, True] * 3)
    out = negative_baseline_rewards(r, generic, 3, margin=1.0)
    assert out[:2].tolist() == pytest.approx([0.2, 0.7]) and out[2].item() == pytest.approx(0.2 - 1.0)
    assert out[5].item() == pytest.approx(1.0 - 1.0)  # a NaN natural reward is left out of the min
    assert math.isnan(out[8].item())  # no scorable natural rollout: NaN
    assert negative_baseline_rewards(r, generic, 3, margin=0.25)[2].item() == pytest.approx(-0.05)


def test_rise_rl_missed_criteria_and_keep_rule_by_hand():
    # 3 natural rollouts x 3 criteria; miss = s < 0.5; "repeatedly missed" = share >= 2/3
    s = torch.tensor([[0.9, 0.1, 0.4], [0.8, 0.2, 0.9], [0.1, NAN, 0.3]])
    # criterion 0: 1/3 missed; criterion 1: 2/2 judged missed; criterion 2: 2/3 missed
    assert missed_criteria(s, 0.5, 2 / 3).tolist() == [False, True, True]
    assert missed_criteria(s, 0.5, 1.0).tolist() == [False, True, False]
    assert missed_criteria(torch.full((2, 1), NAN), 0.5, 0.5).tolist() == [False]  # never judged: not missed
    # R = sum_j w_j s_j / sum_j w_j over judged j, weights (1, 2, 1)
    w = torch.tensor([1.0, 2.0, 1.0])
    natural = weighted_mean(s, w)
    assert natural.tolist() == pytest.approx([(0.9 + 0.2 + 0.4) / 4, (0.8 + 0.4 + 0.9) / 4, (0.1 + 0.3) / 2])
    # natural mean = (0.375 + 0.525 + 0.2) / 3 = 0.3667: keep R(z) > 0.3667
    keep = rise_keep(torch.tensor([0.37, 0.36, NAN, 1.0]), natural)
    assert keep.tolist() == [True, False, False, True]
    assert rise_keep(torch.tensor([0.5]), torch.tensor([NAN, NAN])).tolist() == [False]  # no natural mean


def test_rise_rl_removal_rule_by_hand():
    # ema_1 = benefit_1; ema_t = 0.5 ema_{t-1} + 0.5 benefit_t; removed after 2 batches in a row with ema < 0.0
    ema, streak = faded(None, 0.2, 0.5, 0.0, 0)
    assert (ema, streak) == (0.2, 0)
    ema, streak = faded(ema, -0.3, 0.5, 0.0, streak)  # 0.5 * 0.2 + 0.5 * -0.3 = -0.05 < 0
    assert ema == pytest.approx(-0.05) and streak == 1
    ema, streak = faded(ema, 0.08, 0.5, 0.0, streak)  # -0.025 + 0.04 = 0.015 >= 0: the run of lows restarts
    assert ema == pytest.approx(0.015) and streak == 0
    ema, streak = faded(ema, -0.1, 0.5, 0.0, streak)  # 0.0075 - 0.05 = -0.0425
    ema, streak = faded(ema, -0.1, 0.5, 0.0, streak)  # -0.02125 - 0.05 = -0.07125
    assert ema == pytest.approx(-0.07125) and streak == 2  # patience 2: the auxiliary objective is off


def rise(**overrides) -> RubricGuidance:
    judge = {"judge": {"model": {"source": "tiny_random", "tiny_layers": 1}}}
    return RubricGuidance(RubricGuidance.Config(rubric={**judge}, **overrides))


def test_rise_rl_privileged_rows_leave_the_group_for_the_auxiliary_objective():
    strategy = rise(aux_coef=0.5)
    rewards = torch.tensor([0.2, 0.6, 0.9, 0.4])
    kinds = ["natural", "natural", "conditioned", "natural"]
    adjusted, _ = strategy.adjust_rewards(rewards, kinds, [{}] * 4, ["a"] * 4, 4)
    assert adjusted[:2].tolist() == pytest.approx([0.2, 0.6]) and adjusted[2].isnan() and adjusted[3] == 0.4
    # the auxiliary term: -w_i * logp_it on guided rows (w = 0.5 on row 1), 0 elsewhere
    logps = torch.tensor([[-1.0, -2.0], [-0.5, -1.5]])
    x = LossInputs(
        logps=logps,
        old_logps=logps,
        advantages=torch.zeros(2, 1),
        mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
        batch={"rlpost_guided": torch.tensor([0.0, 0.5])},
    )
    term, metrics = strategy.loss_term(x)
    assert term.tolist() == [[0.0, 0.0], [0.25, 0.75]]
    assert metrics == {"rubric_guidance/aux_nll": pytest.approx(0.5)}  # masked mean of -logp on row 1: 0.5
    x.batch["rlpost_guided"] = torch.zeros(2)
    assert strategy.loss_term(x) == (None, {})
    strategy.misses, strategy.aux_on = {"- a criterion": 3}, False
    restored = rise()
    restored.load_state_dict(strategy.state_dict())
    assert restored.misses == {"- a criterion": 3} and restored.aux_on is False


def test_rollout_rows_put_and_force():
    a = Rollouts([[1, 2]] * 2, [[5], [6, 7]], [[1], [1, 1]], ["x", "y"], [[-0.1], [-0.2, -0.3]], {"env": ["a", "b"]})
    out = Rollouts.empty(3, a)
    out.put(0, a, 1, "natural")
    assert (out.completion_ids[0], out.tool_mask[0], out.logprobs[0], out.extra_fields["env"][0]) == (
        [6, 7],
        [1, 1],
        [-0.2, -0.3],
        "b",
    )
    out.force(1, [9, 9, 2], "None", "forced_refusal")
    assert (
        out.logprobs[1] == [None] * 3
        and out.tool_mask[1] == [1, 1, 1]
        and out.kinds[:2] == ["natural", "forced_refusal"]
    )
    b = Rollouts([[1]], [[4, 4]], None, ["z"], None, {})
    out.put(2, b, 0, "conditioned")  # a row without logprobs/tool mask: NaN log-probs, all-model tokens
    assert out.logprobs[2] == [None, None] and out.tool_mask[2] == [1, 1]
    assert len(out.to_trl()) == 8


def test_conditioned_prompts():
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 2+2?"}]
    assert revise_prompt(chat, "5", "Wrong.") == [
        *chat,
        {"role": "assistant", "content": "5"},
        {"role": "user", "content": "Wrong."},
    ]
    assert revise_prompt(chat, None, "Hint.")[-1] == {"role": "user", "content": "What is 2+2?\n\nHint."}
    assert chat[-1]["content"] == "What is 2+2?"  # x itself is untouched
    assert revise_prompt("Q: 2+2?\nA:", " 5", "Wrong.") == "Q: 2+2?\nA: 5\n\nWrong.\n"
    assert user_text(with_user_text(chat, "new")) == "new" and with_user_text("old", "new") == "new"


def test_every_bundle_defaults_to_plain_sampling():
    for bundle in ["grpo", "dapo", "gepo", "dr_grpo", "grpo_or", "gspo", "cispo", "rloo"]:
        run = build_run(compose([f"algorithm={bundle}"]))
        assert type(run.algorithm.rollout).registry_name == "none"
        assert ("algorithm.rollout", run.algorithm.rollout) in run.named_components()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algorithm/rollout=forced_refusal", "algorithm.rollout.min_refusals=4"],
            "min_refusals=4 must be smaller than train.num_generations=4",
        ),
        (
            ["algorithm/rollout=generic_negative", "algorithm.rollout.count=4"],
            "count=4 must be smaller than train.num_generations=4",
        ),
        (
            [
                "algorithm/rollout=feedback_refine",
                "train.num_generations=2",
                "train.completions_per_step=8",
                "algorithm.rollout.refine_per_group=2",
            ],
            "refine_per_group=2 must be smaller than train.num_generations=2",
        ),
        (
            ["algorithm/rollout=draft_injection", "algorithm.rollout.path=nowhere.jsonl"],
            "algorithm.rollout.path='nowhere.jsonl': no such file",
        ),
        (["algorithm/rollout=draft_injection", "algorithm.rollout.source=model"], "source=model needs model"),
        (
            ["algorithm/rollout=draft_injection", "algorithm.rollout.correctness=wrong"],
            "correctness=wrong needs source=model",
        ),
        (
            [
                "algorithm/rollout=draft_injection",
                "algorithm.rollout.source=model",
                "+algorithm.rollout.model={source: tiny_random}",
                "train.completions_per_step=4",
            ],
            "needs >= 2",
        ),
        (["algorithm/rollout=hindsight_critique", "algorithm.rollout.template=again"], "must contain {critique}"),
        (["algorithm/rollout=hindsight_critique", "algorithm.rollout.writer.backend=nope"], "writer.backend"),
        (["algorithm/rollout=hindsight_critique", "eval.correct_term=null"], "needs a correctness term"),
        (
            ["algorithm/rollout=rubric_guidance", "algorithm.rollout.rubric.rubric=missing.yaml"],
            "algorithm.rollout.rubric.rubric",
        ),
        (["algorithm/rollout=forced_refusal", "+algorithm.rollout.min_refusal=1"], "Did you mean 'min_refusals'?"),
        (["algorithm/rollout=forced_refusal", "algorithm.rollout.penalty=-1"], "penalty >= 0"),
    ],
)
def test_bad_rollout_config_is_a_config_error(overrides, message):
    with pytest.raises(ConfigError) as err:
        build_run(compose(overrides))
    assert message in str(err.value)


def test_unknown_rollout_fails_cleanly_on_the_cli(no_launch, capsys):  # noqa: F811
    code = cli.main(["train", "algorithm/rollout=forced_refusl"])
    expected = [
        "algorithm/rollout/forced_refusl",
        "Did you mean 'forced_refusal'?",
        "generic_negative",
        "draft_injection",
    ]
    assert_clean_failure(code, capsys.readouterr().err, expected, no_launch)
    code = cli.main(["train", "algorithm/rollout=generic_negative", "algorithm.rollout.count=9"])
    assert_clean_failure(
        code, capsys.readouterr().err, ["algorithm.rollout.count=9", "train.num_generations=4"], no_launch
    )


def test_rlpost_list_shows_the_rollouts_with_their_seeds():
    from rlpost.tools.listing import rows

    listed = {name: seed for kind, name, _, seed in rows("rollout")}
    assert listed == {
        "none": "",
        "forced_refusal": "seed 000 #9",
        "generic_negative": "seed 004 #8",
        "draft_injection": "seed 004 #19",
        "experience_buffer": "seed 004 #21",
        "feedback_refine": "seed 004 #16",
        "hindsight_critique": "seed 000 #12",
        "rubric_guidance": "seed 000 #6",
        "struct_refine": "seed 000 #10",
        "frost": "seed 004 #1",
        "intervention_bandit": "seed 000 #8",
        "language_routed": "seed 004 #9",
        "self_critique": "seed 004 #23",
    }


# ---- draft_injection: wrong / correct / mismatched guarantees (seed 004 #19) -------------------------------
def test_draft_correctness_and_its_repairs_by_hand():
    assert is_correct("12 * 34 = 408", 408.0) is True
    assert is_correct("so 1,200", 1200.0) is True and is_correct("about 407", 408.0) is False
    assert is_correct("no number", 408.0) is False and is_correct("408", None) is None
    rng = random.Random(0)
    # the last number (408) becomes 408 + offset, offset = sign * k with sign, k drawn from the same rng
    probe = random.Random(0)
    offset = probe.choice([-1, 1]) * probe.randint(1, 9)
    assert make_wrong("12 * 34 = 408. Done", 408.0, rng) == f"12 * 34 = {408 + offset}. Done"
    assert offset != 0 and is_correct(make_wrong("408", 408.0, random.Random(1)), 408.0) is False
    assert make_wrong("I am not sure", 408.0, random.Random(0)) == f"I am not sure The answer is {408 + offset}."
    assert make_correct("I am not sure", 408.0) == "I am not sure The answer is 408."
    assert make_correct("x", 2.5) == "x The answer is 2.5."


def test_mismatched_drafts_skip_repeats_of_the_same_problem_and_fall_back_to_earlier_steps():
    assert next_other(["a", "b", "c"], 0) == 1 and next_other(["a", "b", "c"], 2) == 0
    assert next_other(["a", "a", "b", "a"], 0) == 2  # rows 1 (a again) skipped
    assert next_other(["a", "a"], 0) is None

    class Ctx:  # what _mismatched reads of the rollout context: its seeded rng
        rng = random.Random(0)

    strategy = DraftInjection(DraftInjection.Config(source="file", path="recipes/data/arith_drafts.jsonl"))
    chosen = strategy._mismatched(["draft a1", "draft a2", "draft b"], ["a", "a", "b"], Ctx())
    assert chosen == [("draft b", "b"), ("draft b", "b"), ("draft a1", "a")]  # never a draft of its own problem
    # a step whose prompts are all one problem: an earlier step's draft of another problem, never its own
    assert strategy._mismatched(["draft a3", "draft a4"], ["a", "a"], Ctx()) == [("draft b", "b")] * 2
    fresh = DraftInjection(DraftInjection.Config(source="file", path="recipes/data/arith_drafts.jsonl"))
    assert fresh._mismatched(["x", "y"], ["a", "a"], Ctx()) == [(None, None)] * 2  # nothing else yet: no draft
