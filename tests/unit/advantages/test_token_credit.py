"""The token-level seed advantages routed (ALPO, 000 #11), segments (StructPO, 000 #10) and pmi_tokens
(P-GRPO, 000 #22), and the span masks they share: hand-worked numbers (derived in the comments), edge cases
and config errors (2 real trainer steps each: test_advantages_seeds_trainer.py)."""

import pytest
import torch

from rlpost.advantages.pmi_tokens import PMITokens
from rlpost.advantages.routed import Route, Routed
from rlpost.advantages.segments import Segments, StageTerm
from rlpost.advantages.spans import compile_span, span_mask, stage_index
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config

from support.advantages import XH, X, batch, close, grpo


# ---- spans -------------------------------------------------------------------------------------------
def test_span_masks_from_token_pieces():
    pieces = ["<think>", "hm", "</th", "ink>", " 4", "<|im_end|>"]
    assert span_mask(pieces, compile_span("tag:think")).tolist() == [True, True, True, True, False, False]
    assert span_mask(["<think>", "cut off"], compile_span("tag:think")).tolist() == [True, True]  # unclosed
    assert span_mask(pieces, compile_span(r"re:\d")).tolist() == [False, False, False, False, True, False]
    assert compile_span("rest") is None and compile_span("all") is None
    for bad in ("think", "tag:", "re:(", "xml:think"):
        with pytest.raises(ValueError, match="span"):
            compile_span(bad)


def test_stage_index_splits_at_markers_even_across_tokens():
    # "pre" is before any marker (-1); a marker's own tokens open its stage; "<ans" + "wer>" is one marker.
    assert stage_index(["pre", "<think>", "a", "<ans", "wer>", "4"], ["<think>", "<answer>"]).tolist() == [
        -1,
        0,
        0,
        1,
        1,
        1,
    ]
    assert stage_index(["<answer>", "1", "<think>", "<answer>"], ["<think>", "<answer>"]).tolist() == [1, 1, 0, 1]


# ---- routed (ALPO) -------------------------------------------------------------------------------------
TEXT = [["<think>", "hm", "</think>", " 4"], ["<think>", "x", "</think>", " 5"]]


def routed(routes, names=("math", "fmt"), weights=(1.0, 0.5), **cfg):
    r = Routed(Routed.Config(routes=[Route(t, s) for t, s in routes], **cfg))
    r.bind(list(names), torch.tensor(weights))
    return r


def test_routed_hand_computed():
    # math [1, 0] -> A^math = [X, -X]; fmt [0, 1] weight 0.5 -> A^fmt = 0.5 * [-X, X].
    # fmt -> <think> span (tokens 0-2), math -> rest (token 3).
    b = batch([[1, 0], [0, 1]], 2, weights=[1.0, 0.5], text=TEXT)
    a, m = routed([("fmt", "tag:think"), ("math", "rest")])(b)
    h = 0.5 * X
    close(a, [[-h, -h, -h, X], [h, h, h, -X]])
    assert m["routed/fmt_token_frac"] == 0.75 and m["routed/math_token_frac"] == 0.25
    assert m["routed/unrouted_token_frac"] == 0.0


def test_routed_overlap_sums_and_unrouted_tokens():
    b = batch([[1, 0], [0, 1]], 2, weights=[1.0, 0.5], text=TEXT)
    h = 0.5 * X
    # math on all tokens + fmt on <think>: think tokens carry both (X - h = 0.5 X), the answer only math.
    a, _ = routed([("math", "all"), ("fmt", "tag:think")])(b)
    close(a, [[X - h, X - h, X - h, X], [h - X, h - X, h - X, -X]])
    # only fmt routed: the answer token is unrouted -> GRPO of the combined reward r = [1, 0.5] -> [XH, -XH]
    a, m = routed([("fmt", "tag:think")])(b)
    close(a, [[-h, -h, -h, XH], [h, h, h, -XH]])
    assert m["routed/unrouted_token_frac"] == 0.25
    a, _ = routed([("fmt", "tag:think")], unrouted="zero")(b)
    close(a, [[-h, -h, -h, 0.0], [h, h, h, 0.0]])


def test_routed_one_term_on_all_tokens_is_grpo_and_equal_rewards_give_zero():
    b = batch([1, 0, 0, 1], 2, names=["math"], text=TEXT * 2)
    a, _ = routed([("math", "all")], names=["math"], weights=[1.0])(b)
    torch.testing.assert_close(a, grpo(b).unsqueeze(1).expand(4, 4))
    a, _ = routed([("math", "all")], names=["math"], weights=[1.0])(batch([1, 1, 0, 0], 2, text=TEXT * 2))
    close(a, [[0.0] * 4] * 4)


def test_routed_errors():
    with pytest.raises(RuntimeError, match="token_text"):
        routed([("math", "all")])(batch([[1, 0], [0, 1]], 2))
    with pytest.raises(
        ConfigError, match=r"algorithm.advantage.routes\[1\].term='nope' is not a reward term.*math_answer, format"
    ):
        build_run(
            compose(
                ["algorithm/advantage=routed", "reward=math_answer_format", "algorithm.advantage.routes.1.term=nope"]
            )
        )
    with pytest.raises(ConfigError, match=r"routes\[0\].span: span 'think'"):
        build_run(
            compose(
                ["algorithm/advantage=routed", "reward=math_answer_format", "algorithm.advantage.routes.0.span=think"]
            )
        )


# ---- segments (StructPO) --------------------------------------------------------------------------------
STAGED = [["pre", "<think>", "a", "<answer>", "4"], ["pre", "<think>", "b", "<answer>", "5"]]


def segments(local=(("<answer>", "math"),), names=("math", "fmt"), weights=(1.0, 0.5), **cfg):
    s = Segments(Segments.Config(local=[StageTerm(st, t) for st, t in local], **cfg))
    s.bind(list(names), torch.tensor(weights))
    return s


def test_segments_hand_computed():
    # math [1, 0] is the <answer> stage's local term: w 1 * GRPO = [X, -X]; global = every other term,
    # GRPO(0.5 * fmt) with fmt [0, 1] = [-XH, XH] (the weight is applied before the std). global_weight 1,
    # local_weight 2:
    #   completion 1: pre, <think>, a -> -XH;  <answer>, 4 -> -XH + 2X
    #   completion 2: XH, XH, XH;              <answer>, 5 -> XH - 2X
    b = batch([[1, 0], [0, 1]], 2, weights=[1.0, 0.5], text=STAGED)
    a, m = segments(local_weight=2.0)(b)
    lo, hi = 2 * X - XH, XH - 2 * X
    close(a, [[-XH, -XH, -XH, lo, lo], [XH, XH, XH, hi, hi]])
    assert m["segments/local_token_frac"] == pytest.approx(0.4)
    assert m["segments/stages_found_mean"] == 2.0
    assert m["segments/global_abs_mean"] == pytest.approx(XH, rel=1e-6)


def test_segments_without_local_terms_is_grpo_and_needs_a_global_term():
    b = batch([[1, 0.2], [0, 0.6]], 2, weights=[1.0, 0.5], text=STAGED)
    a, _ = segments(local=())(b)
    torch.testing.assert_close(a, grpo(b).unsqueeze(1).expand(2, 5))  # global = all terms = the combined reward
    with pytest.raises(ConfigError, match="global_terms is empty"):
        segments(local=(("<answer>", "math"),), names=("math",), weights=(1.0,))
    with pytest.raises(ConfigError, match=r"local\[0\].stage='<end>' is not in stages"):
        build_config(Segments.Config, {"local": [{"stage": "<end>", "term": "math"}]}, "algorithm.advantage")


# ---- recipe=structpo: each stage's own score on its own tokens, correctness without a marker -------------------
# One group of G = 4 for "Start with 12. Add 5, then multiply by 3, then subtract 4." (plan + 5, * 3, - 4;
# intermediates 17, 51, 47; answer 47), through recipe=structpo's own reward terms and advantage.
STRUCT = [
    "<plan>+ 5, * 3, - 4</plan>\n<compute>12 + 5 = 17\n17 * 3 = 51\n51 - 4 = 47</compute>\n<answer>47</answer>",
    "<plan>+ 5, * 3, - 4</plan>\n<compute>12 + 5 = 17\n17 * 3 = 41\n41 - 4 = 37</compute>\n<answer>37</answer>",
    "<plan>+ 5, - 4</plan>\n<compute>12 + 5 = 17\n17 * 3 = 51\n51 - 4 = 47</compute>\n<answer>47</answer>",
    "12 + 5 = 17, then 17 * 3 = 51, then 51 - 4 = 47",
]  # all right; a slip in step 2; a step missing from the plan; right with no stage marker


def group_norm(values):
    """GRPO of one group: (r - mean) / (unbiased std + 1e-4)."""
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return [(v - mean) / (std + 1e-4) for v in values]


def runs(row):
    """Token advantages [T] -> the values of its runs of equal neighbours, in order (one per stage here)."""
    return [v for k, v in enumerate(row) if k == 0 or abs(v - row[k - 1]) > 1e-6]


def test_structpo_gives_each_stage_the_advantage_of_its_own_text_and_credits_an_unmarked_right_answer():
    from rlpost.models.loading import load_tokenizer

    run = build_run(compose(["recipe=structpo", "model=tiny-random"]))
    # every stage has its own term, and it reads that stage's text (reward stage_check, one column per stage)
    assert run.reward.names == [
        "math_answer",
        "format",
        "stage_check/plan",
        "stage_check/compute",
        "stage_check/answer",
    ]
    segments = run.algorithm.advantage
    assert list(segments.cfg.stages) == ["<plan>", "<compute>", "<answer>"]
    assert {segments.cfg.stages[s]: run.reward.names[j] for s, j in segments.local.items()} == {
        "<plan>": "stage_check/plan",
        "<compute>": "stage_check/compute",
        "<answer>": "stage_check/answer",
    }
    columns = {"answer": ["47"] * 4, "plan": ["+ 5, * 3, - 4"] * 4, "intermediates": ["17, 51, 47"] * 4}
    completions = [[{"role": "assistant", "content": c}] for c in STRUCT]
    terms = [func([None] * 4, completions, **columns) for func in run.reward.funcs]
    # by hand, per completion:      all right  slip   plan short  unmarked
    math = [1.0, 0.0, 1.0, 1.0]  # the whole completion's last number is 47
    fmt = [1.0, 1.0, 1.0, 0.0]  # the three blocks in order; none at all -> 0 / 4
    plan = [1.0, 1.0, 2 / 3, 0.0]  # LCS of the operations: [+5, -4] has 2 of 3
    compute = [1.0, 1 / 3, 1.0, 0.0]  # results after "=": [17, 41, 37] has 17 only
    answer = [1.0, 0.0, 1.0, 0.0]  # the <answer> block is exactly 47
    assert terms == [math, fmt, [pytest.approx(v) for v in plan], [pytest.approx(v) for v in compute], answer]
    # the trainer's token text: each completion token decoded on its own (rlpost/trainer/scoring.py)
    tokenizer = load_tokenizer(run.model)
    pieces = [
        tokenizer.batch_decode([[i] for i in tokenizer(c, add_special_tokens=False)["input_ids"]]) for c in STRUCT
    ]
    width = max(map(len, pieces))
    mask = [[1.0] * len(p) + [0.0] * (width - len(p)) for p in pieces]
    text = [p + [""] * (width - len(p)) for p in pieces]
    b = batch(list(zip(*terms)), 4, names=run.reward.names, weights=run.reward.weights.tolist(), mask=mask, text=text)
    a, m = segments(b)
    # A_{i,t} = GRPO(math + 0.25 fmt)_i + w_s GRPO(stage column s)_i on the tokens of stage s (w_s = 3 / 3 = 1);
    # the unmarked completion has no stage: the global part alone.
    g = group_norm([x + 0.25 * y for x, y in zip(math, fmt)])  # r = [1.25, 0.25, 1.25, 1.0]
    p, c, s = group_norm(plan), group_norm(compute), group_norm(answer)
    want = [[g[i] + p[i], g[i] + c[i], g[i] + s[i]] for i in range(3)] + [[g[3]]]
    for i in range(4):
        assert runs(a[i, : len(pieces[i])].tolist()) == pytest.approx(want[i], abs=1e-5), i
    # struct-aware: the slip's plan tokens are credited (its plan is right), its compute and answer blamed;
    # the short plan's plan tokens get less than the full plans' (mean plan 2/3: p = [.71, .71, 0, -1.41]) and
    # less than its own compute tokens
    assert p[1] > 0 > c[1] and p[2] < p[0] and p[2] < c[2]
    # the right answer written without any marker is still credited, on every token (0.0625 above the mean r)
    assert g[3] > 0 and bool((a[3, : len(pieces[3])] > 0).all())
    valid = sum(map(len, pieces))
    assert m["segments/local_token_frac"] == pytest.approx((valid - len(pieces[3])) / valid)
    assert m["segments/stages_found_mean"] == pytest.approx(9 / 4)


# ---- pmi_tokens (P-GRPO) ---------------------------------------------------------------------------------
# estimator: counts (token-id PMI with the outcome set, the earlier default) first, then estimator: model
def pmi_batch(mask=None):
    # G = 2, rewards [1, 0] -> A = [X, -X]; token ids: success [5, 6], failure [5, 7] (a third, masked column)
    return batch([1, 0], 2, ids=[[5, 6, 6], [5, 7, 6]], mask=mask or [[1, 1, 0], [1, 1, 0]])


def test_pmi_tokens_hand_computed_without_smoothing():
    # Group counts: 5 x2, 6 x1, 7 x1 (n = 4); success set: 5, 6 (n_P = 2). The masked 6 is not counted.
    # PMI(5) = log (1/2) / (2/4) = 0, PMI(6) = log (1/2) / (1/4) = log 2 -> u = [1, 2], mean 1.5 -> w = [2/3, 4/3].
    # The failure set (5, 7) is the mirror image: w = [2/3, 4/3] on [5, 7].
    a, m = PMITokens(PMITokens.Config(estimator="counts", smoothing=0.0, ramp_steps=0))(pmi_batch())
    close(a, [[2 * X / 3, 4 * X / 3, X], [-2 * X / 3, -4 * X / 3, -X]])
    assert m["pmi/strength"] == 1.0 and m["pmi/weight_max"] == pytest.approx(4 / 3)


def test_pmi_tokens_smoothing_clip_and_ramp():
    # Laplace a = 1, V = 3 distinct ids: p_P(5) = 2/5, p_all(5) = 3/7 -> u = 14/15; p_P(6) = 2/5, p_all(6) = 2/7 -> u = 1.4;
    # mean (14/15 + 1.4) / 2 = 7/6 -> w = [0.8, 1.2].
    a, _ = PMITokens(PMITokens.Config(estimator="counts", ramp_steps=0))(pmi_batch())
    close(a[:, :2], [[0.8 * X, 1.2 * X], [-0.8 * X, -1.2 * X]])
    # clip 0.1 (no smoothing): PMI [0, log 2] -> [0, 0.1] -> u = [1, e^0.1], mean 1.052585 -> w = [0.950043, 1.049957]
    a, _ = PMITokens(PMITokens.Config(estimator="counts", smoothing=0.0, clip=0.1, ramp_steps=0))(pmi_batch())
    close(a[0, :2], [0.950043 * X, 1.049957 * X])
    # ramp_steps 2: lam = 0.5 on the first batch: u = sqrt([14/15, 1.4]) = [0.966092, 1.183216] -> w = [0.898980, 1.101020];
    # full strength from the second batch on (w = [0.8, 1.2]); the count is the saved state.
    pmi = PMITokens(PMITokens.Config(estimator="counts", ramp_steps=2))
    a, m = pmi(pmi_batch())
    assert m["pmi/strength"] == 0.5
    close(a[0, :2], [0.898980 * X, 1.101020 * X])
    pmi(pmi_batch())
    assert pmi.state_dict() == {"count": 2}
    fresh = PMITokens(PMITokens.Config(estimator="counts", ramp_steps=2))
    fresh.load_state_dict(pmi.state_dict())
    close(fresh(pmi_batch())[0][0, :2], [0.8 * X, 1.2 * X])


def test_pmi_tokens_counted_over_the_batch_do_not_collapse_when_no_token_repeats_in_a_group():
    # Two groups, rewards [1, 0] each -> A = [X, -X, X, -X]. No id repeats inside a group: group 0 [5, 6] / [7, 8],
    # group 1 [5, 7] / [6, 9]. In-group counts: every token has PMI log 2 -> uniform weights -> GRPO.
    b = batch([1, 0, 1, 0], 2, ids=[[5, 6], [7, 8], [5, 7], [6, 9]])
    grouped, _ = PMITokens(PMITokens.Config(estimator="counts", smoothing=0.0, ramp_steps=0, scope="group"))(b)
    close(grouped, [[X, X], [-X, -X], [X, X], [-X, -X]])
    # Batch counts (n = 8): 5 x2, 6 x2, 7 x2, 8, 9. Successes [5, 6, 5, 7] (n_P = 4): PMI(5) = log (2/4)/(2/8) = log 2,
    # PMI(6) = PMI(7) = log (1/4)/(2/8) = 0 -> rows [5, 6], [5, 7]: u = [2, 1] -> w = [4/3, 2/3].
    # Failures [7, 8, 6, 9] (n_N = 4): PMI(7) = PMI(6) = 0, PMI(8) = PMI(9) = log (1/4)/(1/8) = log 2 -> w = [2/3, 4/3].
    pooled, _ = PMITokens(PMITokens.Config(estimator="counts", smoothing=0.0, ramp_steps=0))(
        b
    )  # scope: batch, the default
    close(pooled, [[4 * X / 3, 2 * X / 3], [-2 * X / 3, -4 * X / 3], [4 * X / 3, 2 * X / 3], [-2 * X / 3, -4 * X / 3]])


def test_pmi_tokens_strength_zero_equal_rewards_and_one_sample_groups():
    b = pmi_batch()
    torch.testing.assert_close(
        PMITokens(PMITokens.Config(estimator="counts", strength=0.0))(b)[0], grpo(b).unsqueeze(1).expand(2, 3)
    )
    close(
        PMITokens(PMITokens.Config(estimator="counts"))(batch([0.4, 0.4], 2, ids=[[5, 6], [5, 7]]))[0],
        [[0.0, 0.0], [0.0, 0.0]],
    )
    close(
        PMITokens(PMITokens.Config(estimator="counts"))(batch([1.0, 0.0], 1, ids=[[5, 6], [5, 7]]))[0],
        [[0.0, 0.0], [0.0, 0.0]],
    )


def test_pmi_tokens_model_estimator_hand_computed():
    # estimator: model (the default). G = 2, rewards [1, 0] -> A = [X, -X]. Per token, the rollout policy's log-probs
    # without (logps) and with the answer in context (hinted): pmi = hinted - logps.
    #   success row: pmi = [log 2, 0]   -> s = +pmi = [log 2, 0]  -> u = [2, 1], mean 1.5 -> w = [4/3, 2/3]
    #   failure row: pmi = [0, -log 2]  -> s = -pmi = [0, log 2]  -> u = [1, 2], mean 1.5 -> w = [2/3, 4/3]
    # (the failure's second token is the one the answer makes less likely: it takes 4/3 of the blame); the masked third
    # column keeps weight 1 and its NaN hinted value (a row without a hint) never reaches a valid token.
    import math

    ln2 = math.log(2)
    logps = torch.tensor([[-1.0, -2.0, -1.0], [-1.0, -2.0, -1.0]])
    hinted = torch.tensor([[-1.0 + ln2, -2.0, float("nan")], [-1.0, -2.0 - ln2, float("nan")]])
    b = batch([1, 0], 2, ids=[[5, 6, 6], [5, 6, 6]], mask=[[1, 1, 0], [1, 1, 0]],
              extras={"logps": logps, "hinted_logps": hinted})  # fmt: skip
    pmi = PMITokens(PMITokens.Config(ramp_steps=0))
    assert pmi.requires == {"logps", "hinted_logps"}
    a, m = pmi(b)
    close(a, [[4 * X / 3, 2 * X / 3, X], [-2 * X / 3, -4 * X / 3, -X]])
    assert m["pmi/abs_mean"] == pytest.approx(ln2 / 2)  # |pmi| over the 4 valid tokens: (ln2 + 0 + 0 + ln2) / 4
    # the same token ids in both rows: the count estimator sees no difference between them (uniform credit: GRPO)
    counts, _ = PMITokens(PMITokens.Config(estimator="counts", smoothing=0.0, ramp_steps=0))(b)
    close(counts[:, :2], [[X, X], [-X, -X]])
    # a row without an answer (hinted all NaN): pmi 0 -> GRPO's uniform credit for that row
    b.extras["hinted_logps"] = torch.tensor([[float("nan")] * 3, [-1.0, -2.0 - ln2, float("nan")]])
    a, _ = PMITokens(PMITokens.Config(ramp_steps=0))(b)
    close(a[0, :2], [X, X])
    close(a[1, :2], [-2 * X / 3, -4 * X / 3])


def test_pmi_tokens_hint_reads_the_answer_column_and_is_checked():
    pmi = PMITokens(PMITokens.Config())
    assert pmi.hint({"answer": 7}) == "The correct answer is 7."
    assert pmi.hint({"answer": ""}) is None and pmi.hint({}) is None
    assert pmi.training_columns() == {"algorithm.advantage.answer_column": "answer"}
    assert PMITokens(PMITokens.Config(estimator="counts")).training_columns() == {}
    assert PMITokens(PMITokens.Config(estimator="counts")).requires == frozenset()
    with pytest.raises(ValueError, match="answer"):
        PMITokens.Config(hint="The answer is known.")
