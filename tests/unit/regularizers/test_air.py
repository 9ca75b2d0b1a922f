"""AIR (seed 004 #14): prepare/term on hand-worked numbers, the intent sampler, the bundled data and
reward, the recipe, and 2-3 real steps of the tiny model with the sampler wired in."""

import json
import zlib
from collections import Counter

import pytest
import torch

from rlpost.advantages.base import GroupBatch
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.chat import completion_text
from rlpost.core.schema import build_config
from rlpost.data.sources import load_datasets
from rlpost.losses.base import LossInputs
from rlpost.models.loading import load_model, load_tokenizer, peft_config
from rlpost.regularizers.air import AIR, KEYS
from rlpost.regularizers.air_sampler import IntentBatchSampler
from rlpost.regularizers.base import REGULARIZERS
from rlpost.rewards.base import REWARDS
from rlpost.trainer import RLPostTrainer

from support.paths import REPO
from support.trainer import grpo_args, make_run, step_logs

ROOT = REPO


def close(x, expected, tol=1e-6):
    x, expected = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(expected, dtype=torch.float64)
    assert torch.allclose(x, expected, atol=tol), (x, expected)


def group_batch(groups, g=2):
    """groups: [(intent, variant, [G rewards])] -> a GroupBatch with G consecutive rows per prompt."""
    rewards = torch.tensor([v for _, _, values in groups for v in values])
    rows = [{"intent_id": intent, "variant": kind} for intent, kind, values in groups for _ in values]
    mask, ids = torch.ones(len(rows), 3), torch.zeros(len(rows), 3, dtype=torch.long)
    return GroupBatch(rewards, rewards.unsqueeze(1), ["r"], g, mask, ids, rows)


# Hand-worked batch (G = 2):
#   a/anchor [1, .5]  -> target_a = .75
#   a/open   [0, .5]  -> m = .25, gap = .5, r - m = [-.25, .25]
#   b/open   [1, 0]   -> no anchor of b in the batch (empty anchor set): 0
#   c/anchor [0, 0]   -> target_c = 0
#   c/open   [1, 0]   -> m = .5, gap = -.5 (above its anchor)
#   a/open   [.5, .5] -> all-equal rewards: r - m = 0, gap = .25
BATCH = [
    ("a", "anchor", [1.0, 0.5]),
    ("a", "open", [0.0, 0.5]),
    ("b", "open", [1.0, 0.0]),
    ("c", "anchor", [0.0, 0.0]),
    ("c", "open", [1.0, 0.0]),
    ("a", "open", [0.5, 0.5]),
]
GAP = [0, 0, 0.5, 0.5, 0, 0, 0, 0, -0.5, -0.5, 0.25, 0.25]
ANCHORED = [0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]
OPEN = [0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1]


def air(**params):
    return AIR(build_config(AIR.Config, params, "test"))


def test_registered_with_seed():
    assert REGULARIZERS.get("air") is AIR and AIR.seed == "seed 004 #14"
    assert REWARDS.get("choice_or_text").registry_name == "choice_or_text"


_S = 0.125**0.5 + 1e-4  # unbiased std of [0, .5] + eps


@pytest.mark.parametrize(
    "params,weight",
    [
        # only a/open [0, .5] is pulled: w = gap * (r - m) = .5 * [-.25, .25]
        (dict(scale="none"), [0, 0, -0.125, 0.125, 0, 0, 0, 0, 0, 0, 0, 0]),
        # two-sided: c/open (gap -.5, r - m = [.5, -.5]) is pulled down too: w = [-.25, .25]
        (dict(scale="none", one_sided=False), [0, 0, -0.125, 0.125, 0, 0, 0, 0, -0.25, 0.25, 0, 0]),
        # GRPO scale: (r - m) / (std + eps)
        (dict(), [0, 0, -0.5 * 0.25 / _S, 0.5 * 0.25 / _S, 0, 0, 0, 0, 0, 0, 0, 0]),
        # linear penalty: weight 1 (sign(gap) two-sided) instead of gap
        (dict(scale="none", penalty="linear"), [0, 0, -0.25, 0.25, 0, 0, 0, 0, 0, 0, 0, 0]),
        (dict(scale="none", penalty="linear", one_sided=False), [0, 0, -0.25, 0.25, 0, 0, 0, 0, -0.5, 0.5, 0, 0]),
    ],
)
def test_prepare_hand_worked(params, weight):
    out = air(**params).prepare(group_batch(BATCH))
    assert set(out) == set(KEYS)
    close(out["air_weight"], weight)
    close(out["air_gap"], GAP)
    close(out["air_anchored"], ANCHORED)
    close(out["air_open"], OPEN)


def test_empty_anchor_set_gives_zero():
    out = air().prepare(group_batch([("a", "open", [1.0, 0.0]), ("b", "open", [0.0, 0.5])]))
    close(out["air_weight"], [0, 0, 0, 0])
    close(out["air_anchored"], [0, 0, 0, 0])


def test_unscorable_anchor_rewards_give_no_target():
    nan = float("nan")
    out = air(scale="none").prepare(group_batch([("a", "anchor", [nan, nan]), ("a", "open", [1.0, 0.0])]))
    close(out["air_weight"], [0, 0, 0, 0])
    # a NaN among the anchor rewards is skipped: target = 1, open m = .5, gap .5, w = .5 * [.5, -.5]
    out = air(scale="none").prepare(group_batch([("a", "anchor", [nan, 1.0]), ("a", "open", [1.0, 0.0])]))
    close(out["air_weight"], [0, 0, 0.25, -0.25])


@pytest.mark.parametrize("scale", ["group", "none"])
def test_all_equal_rewards_give_zero(scale):
    batch = group_batch([("a", "anchor", [1.0, 1.0]), ("a", "open", [0.0, 0.0]), ("a", "open", [1.0, 1.0])])
    out = air(scale=scale).prepare(batch)
    close(out["air_weight"], [0] * 6)  # no gradient estimate from equal rewards, however large the gap
    close(out["air_gap"], [0, 0, 1, 1, 0, 0])


def test_pooled_target_over_several_anchor_prompts():
    batch = group_batch([("a", "anchor", [1.0, 1.0]), ("a", "anchor", [0.0, 1.0]), ("a", "open", [0.0, 1.0])])
    out = air(scale="none").prepare(batch)  # target = .75, m = .5, gap = .25, w = .25 * [-.5, .5]
    close(out["air_weight"], [0, 0, 0, 0, -0.125, 0.125])


def test_prepare_errors():
    with pytest.raises(ValueError, match="variant='Open'"):
        air().prepare(group_batch([("a", "Open", [1.0, 0.0])]))
    batch = group_batch([("a", "anchor", [1.0, 0.0])])
    batch.rows = [{"intent_id": "a", "variant": "anchor"}, {"intent_id": "b", "variant": "anchor"}]
    with pytest.raises(ValueError, match="share a prompt"):
        air().prepare(batch)
    batch.rows = [{"variant": "anchor"}] * 2
    with pytest.raises(KeyError, match="intent_id"):
        air().prepare(batch)
    with pytest.raises(ValueError, match="coef"):
        air(coef=-1.0)


def loss_inputs(prepared, logps, old=None):
    old = logps.detach() if old is None else old
    return LossInputs(logps, old, torch.zeros(logps.size(0), 1), torch.ones_like(logps), batch=prepared)


def test_term_values_gradient_and_metrics():
    reg = air(scale="none", coef=2.0)
    out = reg.prepare(group_batch(BATCH))
    logps = torch.full((12, 3), -1.0, requires_grad=True)
    term, metrics = reg(loss_inputs(out, logps))
    w = out["air_weight"].unsqueeze(1).expand(12, 3)
    close(term.detach(), -2.0 * w)  # ratio 1 on-policy
    term.sum().backward()
    close(logps.grad, -2.0 * w)  # d/dlogp of -coef * w * exp(logp - old) at logp = old
    anchors = out["air_open"] == 0
    assert (term[anchors] == 0).all() and (logps.grad[anchors] == 0).all()  # anchors never pulled
    assert metrics["open_frac"] == pytest.approx(8 / 12)
    assert metrics["anchored_frac"] == pytest.approx(6 / 8)
    assert metrics["gap"] == pytest.approx((0.5 * 2 - 0.5 * 2 + 0.25 * 2) / 6)
    assert metrics["weight_abs"] == pytest.approx(0.25 / 12)
    assert metrics["term_abs"] == pytest.approx(2.0 * 0.25 / 12)


def test_term_uses_the_importance_ratio_off_policy():
    reg = air(scale="none", coef=1.0)
    out = reg.prepare(group_batch([("a", "anchor", [1.0, 1.0]), ("a", "open", [0.0, 1.0])]))  # w = .5*[-.5, .5]
    logps = torch.tensor([[-1.0], [-1.0], [-1.0], [-1.0]])
    old = torch.tensor([[-1.0], [-1.0], [-1.0 - 0.1], [-1.0]])
    term, _ = reg(loss_inputs(out, logps, old))
    close(term, [[0], [0], [0.25 * torch.exp(torch.tensor(0.1)).item()], [-0.25]])


def test_missing_prepare_fails_loudly():
    with pytest.raises(ValueError, match="prepare"):
        air()(loss_inputs({}, torch.zeros(2, 2)))


# ---- the sampler ------------------------------------------------------------------------------


def chunks_of(sampler, p, g, repeat):
    seq, size, out = list(sampler), p * g * repeat, []
    assert len(seq) == len(sampler) and len(seq) % size == 0
    for start in range(0, len(seq), size):
        block = seq[start : start + size]
        one = block[: p * g]
        assert block == one * repeat  # the chunk repeats repeat_count times
        for k in range(p):  # each index G times consecutively
            assert one[k * g : (k + 1) * g] == [one[k * g]] * g
        out.append(one[::g])
    return out


SIZES = {"i0": 4, "i1": 3, "i2": 3, "i3": 2, "i4": 1, "i5": 4, "i6": 3}


def toy_rows():
    intents, anchors = [], []
    for intent, size in SIZES.items():
        intents += [intent] * size
        anchors += [True] + [False] * (size - 1)
    order = torch.randperm(len(intents), generator=torch.Generator().manual_seed(1)).tolist()  # interleave rows
    return [intents[i] for i in order], [anchors[i] for i in order]


@pytest.mark.parametrize("p,g,repeat", [(4, 2, 1), (5, 3, 2), (8, 4, 1)])
def test_sampler_chunks_hold_whole_intents(p, g, repeat):
    intents, anchors = toy_rows()
    sampler = IntentBatchSampler(intents, anchors, p, g, repeat_count=repeat, seed=0)
    seen = Counter()
    for chunk in chunks_of(sampler, p, g, repeat):
        assert len(chunk) == p
        present = Counter(intents[i] for i in chunk)
        for intent in present:
            rows = {i for i in chunk if intents[i] == intent}
            if len(rows) > 1 or not anchors[next(iter(rows))]:  # more than a padded anchor: the whole intent
                assert rows == {i for i, x in enumerate(intents) if x == intent}
                first = min(k for k, i in enumerate(chunk) if intents[i] == intent)  # contiguous, anchor first
                assert [intents[i] for i in chunk[first : first + len(rows)]] == [intent] * len(rows)
                assert anchors[chunk[first]]
        seen.update(chunk)
    assert set(seen) == set(range(len(intents)))  # no row is dropped


def test_sampler_pads_with_anchors_of_other_intents():
    intents, anchors = ["x", "x", "x", "y", "y", "y"], [True, False, False, True, False, False]
    chunks = chunks_of(IntentBatchSampler(intents, anchors, 4, 2, seed=0), 4, 2, 1)
    assert len(chunks) == 2
    for chunk in chunks:
        whole = Counter(intents[i] for i in chunk).most_common(1)[0][0]
        pad = [i for i in chunk if intents[i] != whole]
        assert len(pad) == 1 and anchors[pad[0]]  # the other intent's anchor


def test_sampler_is_seeded_and_reshuffles_per_epoch():
    intents, anchors = toy_rows()
    a = IntentBatchSampler(intents, anchors, 4, 2, seed=3)
    b = IntentBatchSampler(intents, anchors, 4, 2, seed=3)
    epochs = [list(a) for _ in range(6)]
    assert epochs[0] == list(b) and len({tuple(e) for e in epochs}) > 1 and all(len(e) == len(a) for e in epochs)
    fixed = IntentBatchSampler(intents, anchors, 4, 2, shuffle=False)
    assert list(fixed) == list(fixed)


def test_sampler_matches_repeat_sampler_when_intents_are_single_rows():
    from trl.trainer.utils import RepeatSampler

    n, p, g, r = 12, 3, 2, 2
    ours = IntentBatchSampler(list(range(n)), [True] * n, p, g, repeat_count=r, seed=0)
    trl = RepeatSampler(list(range(n)), mini_repeat_count=g, batch_size=p, repeat_count=r, seed=0)
    assert len(ours) == len(trl)
    assert Counter(ours) == Counter(trl)  # every index G * repeat_count times
    chunks_of(trl, p, g, r)  # TRL's own output passes the same structural checks


def test_sampler_rejects_an_intent_larger_than_a_batch():
    with pytest.raises(ValueError, match="completions_per_step to at least 8"):
        IntentBatchSampler(["a"] * 4, [True, False, False, False], 3, 2)


# ---- the bundled data, reward and recipe -----------------------------------------------------


def jsonl(name):
    return [json.loads(line) for line in (ROOT / "recipes" / "data" / name).read_text().splitlines() if line.strip()]


def score(completions, golds, variant, **params):
    cls = REWARDS.get("choice_or_text")
    rw = cls(build_config(cls.Config, params, "test"))
    n = len(completions)
    golds = golds if isinstance(golds, list) else [golds] * n
    return rw(prompts=[None] * n, completions=completions, answer=golds, variant=[variant] * n)


def test_choice_or_text_hand_cases():
    anchors = ["B", " (B)", "B) Mars", "**B**", "B.", "The answer is B.", "Answer: (B)", "A planet", "C", "b", "Mars"]
    assert score([[{"role": "assistant", "content": c}] for c in anchors], "B", "anchor") == [1] * 7 + [0] * 4
    opens = ["Mars", "It is mars.", "Marseille", "Mars or Venus", "<think>Venus?</think> Mars", "seven days", "7"]
    assert score(opens, ["Mars"] * 5 + ["7|seven"] * 2, "open") == [1, 1, 0, 1, 1, 1, 1]
    assert score(["Mars.", "It is Mars", "mars"], "Mars", "open", open_match="exact") == [1, 0, 1]
    assert score(["B"], [None], "anchor") == [None]
    with pytest.raises(ValueError, match="variant"):
        score(["B"], "B", "mc")


def test_bundled_intents_are_consistent():
    train, evals = jsonl("air_intents.jsonl"), jsonl("air_intents_eval.jsonl")
    assert not {r["intent_id"] for r in train} & {r["intent_id"] for r in evals}
    assert len({r["intent_id"] for r in train}) == 24
    for row in train + evals:
        assert set(row) == {"intent_id", "variant", "question", "answer", "gold_text"}
    for intent in {r["intent_id"] for r in train + evals}:
        group = [r for r in train + evals if r["intent_id"] == intent]
        anchor, opens = group[0], group[1:]
        assert anchor["variant"] == "anchor" and 2 <= len(opens) <= 3 and {r["variant"] for r in opens} == {"open"}
        option = next(line for line in anchor["question"].splitlines() if line.startswith(anchor["answer"] + ")"))
        assert anchor["gold_text"].lower() in option.lower(), intent
        # the gold letter and gold text score 1; another letter and a non-answer score 0
        wrong = "A" if anchor["answer"] != "A" else "B"
        assert score([anchor["answer"], wrong], anchor["answer"], "anchor") == [1, 0]
        golds = [r["answer"] for r in opens]
        assert score([r["gold_text"] for r in opens], golds, "open") == [1] * len(opens)
        assert score(["I do not know"] * len(opens), golds, "open") == [0] * len(opens)


def test_recipe_composes_and_the_sampler_fits_its_batches():
    run = build_run(compose(["recipe=air"]))
    assert [name for name, _ in run.algorithm.regularizers] == ["air"]
    assert run.reward.names == ["choice_or_text"] and run.data.path == "recipes/data/air_intents.jsonl"
    train, evals = load_datasets(run.data)
    assert len(train) == 84 and len(evals) == 21 and {"intent_id", "variant"} <= set(train.column_names)
    reg = run.algorithm.regularizers[0][1]
    sampler = reg.sampler(
        train, generation_batch_prompts=run.plan.prompts_per_step, num_generations=run.plan.num_generations, seed=0
    )
    chunks = chunks_of(sampler, run.plan.prompts_per_step, run.plan.num_generations, 1)
    assert {train["intent_id"][i] for chunk in chunks for i in chunk} == set(train["intent_id"])
    # the recipe also composes with another bundle
    assert build_run(compose(["recipe=air", "algorithm=dapo"])).algorithm.regularizers[0][0] == "air"


# ---- 3 real steps of the tiny model ------------------------------------------------------------


def anchor_one_open_hash(prompts, completions, variant, **kwargs):
    """Anchors score 1.0, open variants a hash in [0, 1): every open variant lags its anchor."""
    return [
        1.0 if v == "anchor" else (zlib.crc32(completion_text(c).encode()) % 1000) / 1000
        for c, v in zip(completions, variant)
    ]


class Spy:
    """Delegates to AIR, recording what prepare() saw and every term it returned."""

    def __init__(self, inner):
        self.inner, self.prepared, self.terms, self.sampler = inner, [], [], inner.sampler

    def prepare(self, batch):
        out = self.inner.prepare(batch)
        self.prepared.append((list(batch.rows), out))
        return out

    def __call__(self, x):
        term, metrics = self.inner(x)
        self.terms.append((term.detach().clone(), x.batch["air_open"].clone()))
        return term, metrics

    def __getattr__(self, name):  # every other member of the component contract: AIR's own
        return getattr(self.inner, name)


def test_three_real_steps_term_only_on_open_variants(tmp_path):
    # G = 2, P = 4 prompts (one intent of 3-4 variants + padding anchors), 2 micro-batches: repeat_count 2
    batch = ["train.num_generations=2", "train.completions_per_step=8", "train.micro_batch_size=4"]
    reward = "reward.terms=[{name: callable, weight: 1.0, params: {path: 'test_air:anchor_one_open_hash'}}]"
    run = make_run(["data=air_intents", "data.train_size=null", "algorithm/regularizers=[air]", *batch, reward])
    spy = Spy(run.algorithm.regularizers[0][1])
    run.algorithm.regularizers[0] = ("air", spy)
    train_set, _ = load_datasets(run.data)
    cls = RLPostTrainer  # its _get_train_sampler uses AIR.sampler (trainer stage 0)
    trainer = cls(
        model=load_model(run.model),
        args=grpo_args(run, tmp_path),
        train_dataset=train_set,
        processing_class=load_tokenizer(run.model),
        peft_config=peft_config(run.model),
        run=run,
    )
    trainer.train()

    assert len(spy.prepared) == 3
    rows_of = Counter(train_set["intent_id"])
    for rows, out in spy.prepared:  # every generation batch held whole intents
        count = Counter(r["intent_id"] for r in rows)
        opened = {r["intent_id"] for r in rows if r["variant"] == "open"}
        assert opened and all(count[i] == 2 * rows_of[i] for i in opened)
        anchors = out["air_open"] == 0
        assert (out["air_weight"][anchors] == 0).all() and (out["air_weight"][~anchors] != 0).any()
        assert (out["air_anchored"][~anchors] == 1).all()  # every open row had its anchor in the batch
    assert len(spy.terms) == 6  # 3 steps x 2 micro-batches
    assert all((term[is_open == 0] == 0).all() for term, is_open in spy.terms)  # anchors: exactly 0
    assert sum(term[is_open == 1].abs().sum() for term, is_open in spy.terms) > 0
    logs = step_logs(trainer)
    assert len(logs) == 3 and all(log["air/term_abs"] > 0 and 0 < log["air/open_frac"] < 1 for log in logs)
    assert all(log["air/gap"] > 0 for log in logs)  # open variants lag the anchor (reward 1)


def test_an_intent_larger_than_a_generation_batch_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    # capital_france has 4 variants; 4 completions per step at G = 2 are 2 prompts per generation batch
    from rlpost.core.errors import ConfigError
    from rlpost.train import train

    def no_model(*_, **__):
        raise AssertionError("the model loaded before the sampler check")

    monkeypatch.setattr("rlpost.train.load_model", no_model)
    cfg = compose(["recipe=air", "model=tiny-random", "train.num_generations=2", "train.completions_per_step=4"])
    with pytest.raises(ConfigError, match="algorithm.regularizers.air: intent 'capital_france' has 4 variants but a "
                                          "generation batch holds only 2 prompts: raise train.completions_per_step to "
                                          "at least 8"):  # fmt: skip
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing half-written
