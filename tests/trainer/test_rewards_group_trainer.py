"""Group rewards inside the real trainer: 2 tiny-random steps with majority_vote and CoRE (confidence from
the rollout log-probs the trainer adds); every completion's reward is its group's vote, metrics are logged."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from rlpost.core.chat import completion_text
from rlpost.models.loading import load_model

from support.paths import TESTS


def test_two_steps_majority_vote_and_core(tmp_path):
    from support.trainer import make_run, step_logs, train_rlpost

    # answer: text -> each completion's whole text is its answer, so the random tiny model still
    # produces agreements and ties (a number-only answer would leave most groups unparsable)
    terms = (
        "reward.terms=[{name: majority_vote, weight: 1.0, params: {answer: text}},"
        " {name: core, weight: 0.5, params: {answer: text, confidence: logprob, grading: 0.5}}]"
    )
    run = make_run(["train.steps=2", "train.num_generations=4", "train.completions_per_step=8", terms])
    start = {n: p.detach().clone() for n, p in load_model(run.model).named_parameters()}
    trainer = train_rlpost(run, tmp_path)
    logs = step_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        assert 0.0 <= log["rewards/majority_vote/mean"] <= 1.0
        assert 0.0 < log["majority_vote/majority_share"] <= 1.0  # logged by the reward through TRL
        assert 0.0 <= log["core/cohesiveness"] <= 1.0 and math.isfinite(log["core/label_is_mode"])
        assert log["rlpost/reward"] == pytest.approx(
            log["rewards/majority_vote/mean"] + 0.5 * log["rewards/core/mean"], abs=1e-4
        )
    # the last generation batch: each completion's majority_vote reward is agreement with its group's mode
    texts = [" ".join(completion_text(c).split()).lower() or None for c in trainer.batch.completions]
    terms_matrix = trainer.batch.reward_terms.cpu()
    assert terms_matrix.shape == (8, 2)
    for g in range(2):
        group = texts[4 * g : 4 * g + 4]
        counts = Counter(a for a in group if a is not None)
        mode = max(counts, key=lambda a: (counts[a], -group.index(a))) if counts else None
        expected = [float(a is not None and a == mode) for a in group]
        assert terms_matrix[4 * g : 4 * g + 4, 0].tolist() == expected
    # CoRE ran on the trainer's rlpost_logprob column: rewards in [0, 1], only label holders rewarded
    assert ((terms_matrix[:, 1] >= 0) & (terms_matrix[:, 1] <= 1)).all()
    assert all(f.group_size is None for f in run.reward.funcs)  # reset after scoring: eval groups by prompt
    moved = any(not torch.equal(start[n], p.detach().cpu()) for n, p in trainer.model.named_parameters())
    assert moved


def test_mean_rollout_logprobs_match_the_loss_forward(tmp_path):
    from support.trainer import make_run, rlpost_trainer

    run = make_run(["train.steps=1"])
    trainer = rlpost_trainer(run, tmp_path)
    tok = trainer.processing_class
    prompts = [tok.encode("What is 2+2?"), tok.encode("Hi")]
    completions = [tok.encode(" 4 it is"), tok.encode(" hello")]
    means = trainer._mean_rollout_logprobs(prompts, completions, None)
    # by hand: one sequence at a time, no padding: mean over completion tokens of log p(token | prefix)
    with torch.no_grad():
        for p, c, mean in zip(prompts, completions, means):
            ids = torch.tensor([p + c])
            logits = trainer.model(ids).logits[0, len(p) - 1 : -1].float()
            expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(c)[:, None]).mean().item()
            assert mean == pytest.approx(expected, abs=1e-4)
    # vLLM path: the sampling log-probs are averaged as they are (None = unavailable token skipped)
    assert trainer._mean_rollout_logprobs(prompts, completions, [[-1.0, -3.0], [-2.0, None]]) == [-2.0, -2.0]


def test_two_steps_focal_over_majority_vote_and_group_diversity(tmp_path):
    from support.trainer import make_run, step_logs, train_rlpost

    terms = (
        "reward.terms=[{name: majority_vote, weight: 1.0, params: {answer: text}},"
        " {name: group_diversity, weight: 0.5}]"
    )
    run = make_run(["train.steps=2", "train.num_generations=4", "reward/combine=focal", terms])
    logs = step_logs(train_rlpost(run, tmp_path))
    assert len(logs) == 2
    for log in logs:
        assert 0.0 <= log["rewards/group_diversity/mean"] <= 1.0
        assert 0.0 <= log["group_diversity/dispersion"] <= 1.0
        saturation = [log["rlpost/focal/saturation/majority_vote"], log["rlpost/focal/saturation/group_diversity"]]
        weights = [log["rlpost/focal/weight/majority_vote"], log["rlpost/focal/weight/group_diversity"]]
        assert all(0.0 <= s <= 1.0 for s in saturation)
        assert sum(weights) == pytest.approx(1.5, abs=1e-4)  # renormalized to the configured total weight
        # the less saturated term gains weight relative to its configured share (1 : 0.5)
        assert (weights[1] / 0.5 >= weights[0] / 1.0) == (saturation[1] <= saturation[0])


@pytest.mark.slow
def test_group_straddling_two_trainer_processes(tmp_path):
    """torchrun, 2 CPU processes (gloo), G = 4 with 2 completions per process: every process scores the
    whole group and TRL's gathered reward column equals the vote over the concatenated completions."""
    import json
    import os
    import subprocess
    import sys

    tests = TESTS
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests), os.environ.get("PYTHONPATH", "")]),
    }
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run([*cmd, "--module", "support.group_mp", str(tmp_path)], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["world"] == 2 and [len(r["local"]) for r in ranks] == [2, 2]  # the group of 4 straddles
    assert ranks[0]["terms"] == ranks[1]["terms"]  # TRL's gathered [N] column, the same on both processes
    group = [" ".join(completion_text(c).split()).lower() or None for r in ranks for c in r["local"]]
    counts = Counter(a for a in group if a is not None)
    mode = max(counts, key=lambda a: (counts[a], -group.index(a))) if counts else None
    assert ranks[0]["terms"] == [float(a is not None and a == mode) for a in group]
