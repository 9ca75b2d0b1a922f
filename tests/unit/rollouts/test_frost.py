"""Frost (seed 004 #1): the infilling reward by hand and its one-hot form, GCG steps that never lose score and keep
only swaps the reward scores as GCG did (the decode / re-encode round trip), the infilling tasks, the strategy's
refusals, and a 2-step run of the real trainer on the tiny model whose inserted rows earn GCG's score."""

from __future__ import annotations

import math

import pytest
import torch

import rlpost.components  # noqa: F401  (registers)
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.data.infill import infill_rows
from rlpost.data.sources import load_datasets
from rlpost.models.loading import load_model, load_tokenizer
from rlpost.rewards.infill_likelihood import InfillLikelihood, middle_text, suffix_logprob
from rlpost.rollouts.frost import gcg_step, judge_roundtrip

from support.rollouts import Recorder, unpadded
from support.trainer import grpo_args, step_logs


def test_suffix_logprob_by_hand():
    # one row of 3 tokens over a vocabulary of 2; the suffix is the last token (id 1), predicted at position 1
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)], [5.0, 5.0]]])
    ids = torch.tensor([[0, 0, 1]])
    # softmax([0, log 3]) = [1/4, 3/4]: log p(1) = log 0.75
    assert suffix_logprob(logits, ids, 1).item() == pytest.approx(math.log(0.75))
    # a 2-token suffix: mean of log p(ids[1] = 0 | pos 0) = log 0.5 and log 0.75
    assert suffix_logprob(logits, ids, 2).item() == pytest.approx((math.log(0.5) + math.log(0.75)) / 2)


def test_middle_text_takes_the_first_line_without_quotes_or_blanks():
    assert middle_text([{"role": "assistant", "content": '\n "red meat"\nbecause...'}]) == "red meat"
    assert middle_text("____ lentils ____") == "lentils" and middle_text("  \n ") == ""


@pytest.fixture(scope="module")
def judge():
    cfg = build_config(InfillLikelihood.Config, {"judge": {"source": "tiny_random"}}, "params")
    return InfillLikelihood(cfg)


def test_the_onehot_score_is_the_exact_score_and_gcg_never_loses(judge):
    prefix, middle, suffix = judge.parts("Red meat and", "lentils are", "good sources of iron.")
    exact = judge.score_ids(prefix, [middle], suffix)[0]
    model = judge.load()[0]
    onehot = torch.nn.functional.one_hot(torch.tensor(middle), model.get_input_embeddings().weight.size(0)).float()
    assert judge.score_onehot(prefix, onehot, suffix).item() == pytest.approx(exact.item(), abs=1e-4)
    # by hand: one forward over prefix + middle + suffix, the suffix tokens' log-probs averaged
    ids = torch.tensor([prefix + middle + suffix])
    logp = torch.log_softmax(model(ids).logits[0].float(), -1)
    by_hand = sum(logp[len(prefix) + len(middle) + t - 1, suffix[t]] for t in range(len(suffix))) / len(suffix)
    assert exact.item() == pytest.approx(by_hand.item(), abs=1e-5)
    generator = torch.Generator().manual_seed(0)
    ids_now, score = list(middle), exact.item()
    for _ in range(3):
        step = gcg_step(judge, prefix, ids_now, suffix, topk=8, candidates=8, generator=generator)
        ids_now, new = step.ids, step.score
        assert new >= score - 1e-6 and len(ids_now) == len(middle)  # a swap keeps the length; never a loss
        assert judge.score_ids(prefix, [ids_now], suffix)[0].item() == pytest.approx(new, abs=1e-5)
        score = new
    rows = judge(["q"] * 3, ["lentils are", "", "x"], prefix=["Red meat and", "a", None], suffix=["good.", "b", "c"])
    assert rows[1] == -10.0 and rows[2] is None and rows[0] < 0  # empty fill: `empty`; no prefix: not scored


def test_a_swap_the_reward_would_retokenize_is_never_kept(judge):
    tok = judge.load()[1]
    prefix, suffix = "Red meat and", "good sources of iron."
    p, start_ids, s = judge.parts(prefix, "afforded good", suffix)
    assert [tok.decode([i]) for i in start_ids] == [" afforded", " good"]
    # GCG's swap at position 0 to 'ichia' (a token without a leading space): the ids [ichia, " good"] decode to
    # "ichia good", which the reward re-tokenizes as " " + "ichia good" = [" ", "ichia", " good"]: 3 other ids
    (ichia,) = tok("ichia", add_special_tokens=False)["input_ids"]
    swapped = [ichia, start_ids[1]]
    assert tok.decode(swapped) == "ichia good"
    assert [tok.decode([i]) for i in judge_roundtrip(judge, swapped)] == [" ", "ichia", " good"]
    assert judge_roundtrip(judge, start_ids) == start_ids  # the start survives its round trip
    # the numbers on the tiny judge: GCG's score of the swap beats the start, the reward of its text does not
    gcg_score = judge.score_ids(p, [swapped], s)[0].item()  # about -10.6431
    start = judge.score_fill(prefix, "afforded good", suffix)  # about -10.6530
    earned = judge.score_fill(prefix, middle_text(tok.decode(swapped)), suffix)  # about -10.6556
    assert gcg_score > start > earned  # GCG would log a gain of ~ +0.0099 for a row that loses ~ 0.0026

    # the same swap met in a real search: from " lentils are", seed 2, the 4th GCG step proposes it and, without the
    # round trip (scored_as = identity, the old step), keeps it; the step now never keeps a swap the reward re-reads
    p, m, s = judge.parts(prefix, "lentils are", suffix)

    def search(**kwargs):
        generator, ids, steps = torch.Generator().manual_seed(2), list(m), []
        for _ in range(4):
            steps.append(gcg_step(judge, p, ids, s, topk=32, candidates=16, generator=generator, **kwargs))
            ids = steps[-1].ids
        return steps

    old = search(scored_as=lambda ids: ids)
    assert old[-1].ids == swapped and old[-1].score == pytest.approx(gcg_score, abs=1e-5)
    for step in search():
        assert judge_roundtrip(judge, step.ids) == step.ids and step.exact <= 16
        # what the reward gives the step's text is the score GCG kept it for
        earned = judge.score_fill(prefix, middle_text(tok.decode(step.ids)), suffix)
        assert earned == pytest.approx(step.score, abs=1e-5)
    assert step.ids != swapped and step.exact < 16  # some proposals of the last step were dropped, 'ichia' among them


def test_infill_rows_blank_two_or_three_inner_words():
    rows = infill_rows(seed=1, size=20)
    assert rows == infill_rows(seed=1, size=20) and rows != infill_rows(seed=2, size=20)
    for row in rows:
        assert len(row["answer"].split()) in (2, 3) and len(row["prefix"].split()) >= 2
        assert len(row["suffix"].split()) >= 2
        assert f'"{row["prefix"]} ____ {row["suffix"]}"' in row["question"]


def test_frost_needs_its_reward_and_room_in_the_group():
    with pytest.raises(ConfigError, match=r"frost needs the differentiable reward term 'infill_likelihood'"):
        build_run(compose(["model=tiny-random", "recipe=frost", "reward=math_answer"]))
    with pytest.raises(ConfigError, match=r"per_group=4 must be smaller than train.num_generations=4"):
        build_run(compose(["model=tiny-random", "recipe=frost", "algorithm.rollout.per_group=4"]))


class FrostRecorder(Recorder):
    """The real trainer (Recorder); also keeps each training batch's GCG searches (``Frost.last``)."""

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.batches[-1]["searches"] = list(self.run.algorithm.rollout.last)
        return out


def test_recipe_runs_two_steps_and_its_inserted_rows_earn_gcgs_score(tmp_path):
    run = build_run(compose([
        "model=tiny-random", "recipe=frost", "train.steps=2", "train.num_generations=2", "train.completions_per_step=4",
        "train.max_completion_length=8", "train.learning_rate=1e-3", "data.train_size=8", "data.eval_size=2",
        "eval.size=2", "eval.at_start=false", "eval.at_end=false", "logging.trackers=[]", "logging.progress=false",
    ]))  # fmt: skip
    train_set, _ = load_datasets(run.data)
    trainer = FrostRecorder(model=load_model(run.model), args=grpo_args(run, tmp_path / "out"),
                            train_dataset=train_set, processing_class=load_tokenizer(run.model), run=run)  # fmt: skip
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, trainer.model.parameters()))
    judge, logs = run.algorithm.rollout.judge, step_logs(trainer)
    assert len(trainer.batches) == len(logs) == 2
    inserted = 0
    for b, log in zip(trainer.batches, logs):
        n, searches = len(b["kinds"]), b["searches"]
        rows = [x.row for x in searches if x.row is not None]
        assert sorted(rows) == [i for i, kind in enumerate(b["kinds"]) if kind == "frost"]
        for x in searches:
            if x.row is None:
                continue
            inserted += 1
            ids = unpadded(b["completion_ids"][x.row], b["completion_mask"][x.row])
            # the policy trains on GCG's own ids (the judge is a copy of the policy), then EOS
            assert ids == x.completion_ids == [*x.ids, ids[-1]] and ids[-1] in trainer.eos_token_ids
            reward = b["terms"][x.row, 0].item()  # the trainer's reward of the inserted row
            assert reward == pytest.approx(x.score, abs=1e-4) and reward == pytest.approx(x.reward, abs=1e-5)
            # by hand: the judge's mean suffix log-prob with the row's own completion ids as the fill
            p, _, s = judge.parts(b["rows"][x.row]["prefix"], "", b["rows"][x.row]["suffix"])
            assert judge.score_ids(p, [ids[:-1]], s)[0].item() == pytest.approx(reward, abs=1e-4)
            # the search started from the group's other (best natural) row, G = 2
            assert x.start == pytest.approx(b["terms"][x.group + (x.row == x.group), 0].item(), abs=1e-5)
        gain = sum(x.score - x.start for x in searches) / len(searches)
        assert log["rlpost/rollout/frost/gain"] == pytest.approx(gain, abs=1e-5)
        assert log["rlpost/rollout/frost/realized_gain"] == pytest.approx(gain, abs=1e-4)
        assert 0 < log["rlpost/rollout/frost/roundtrip_exact_frac"] <= 1
        # the activity figure: the share of rows Frost produced, as frost_frac
        assert log["rlpost/rollout/frost_frac"] == log["active/rollout/frost"] == pytest.approx(len(rows) / n)
    assert inserted >= 1, "no GCG search improved a fill: the run shows nothing"
