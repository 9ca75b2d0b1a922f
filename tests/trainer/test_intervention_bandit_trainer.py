"""RAIL's intervention bandit (rlpost/rollouts/intervention_bandit.py) through the real RLPostTrainer (tiny model,
3 steps): a probe, then the arm's rows; shadow (random arms) at steps 1-2, live (the bandit's arm) at step 3; the none
arm's slots leave the group, conditioned rows train under the original prompt; the bandit is updated from the
scored batch, checkpointed, and a run resumed from step 2 ends with the same bandit as the uninterrupted one."""

from __future__ import annotations

import math

import torch

from rlpost.data.sources import load_datasets
from rlpost.models.loading import load_model, load_tokenizer

from support.judges import requests_for
from support.rollouts import Recorder, data_files, logged, original_prompt_ids, unpadded
from support.trainer import grpo_args, make_run

ARMS = ["none", "hint", "critique", "draft", "extra"]


def overrides(tmp_path, server) -> list[str]:
    return [
        *data_files(tmp_path),
        "algorithm/rollout=intervention_bandit",
        "algorithm.rollout.writer.backend=openai",  # the frozen writer of hints and critiques: an endpoint here
        f"algorithm.rollout.writer.base_url={server}/writer/v1",  # it answers "no" to every ask
        "algorithm.rollout.shadow_steps=2",  # steps 1-2 shadow, step 3 live
        "algorithm.rollout.reference_column=answer",
        "train.completions_per_step=16",  # 4 groups per step
        "train.steps=3",
        "train.save_steps=1",
    ]


def recorder(tmp_path, server) -> Recorder:
    run = make_run(overrides(tmp_path, server))
    return Recorder(
        model=load_model(run.model),
        args=grpo_args(run, tmp_path / "out"),
        train_dataset=load_datasets(run.data)[0],
        processing_class=load_tokenizer(run.model),
        run=run,
    )


def test_probe_then_the_chosen_intervention_shadow_then_live(tmp_path, generate_calls, server):
    trainer = recorder(tmp_path, server)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, trainer.model.parameters()))
    strategy = trainer.run.algorithm.rollout
    assert logged(trainer, "rlpost/rollout/intervention_bandit/live") == [0.0, 0.0, 1.0]
    played = []  # [step][group] the arm played
    for b in trainer.batches:
        played.append([])
        for start in range(0, len(b["kinds"]), 4):  # G = 4: 2 probe rows, 2 slots of one arm
            kinds, slots = b["kinds"][start : start + 4], [start + 2, start + 3]
            assert kinds[:2] == ["natural", "natural"] and kinds[2] == kinds[3] and kinds[2].startswith("intervention_")
            arm = kinds[2].removeprefix("intervention_")
            played[-1].append(arm)
            x = original_prompt_ids(trainer, b["rows"][start]["prompt"])
            for slot in slots:
                assert unpadded(b["prompt_ids"][slot], b["prompt_mask"][slot]) == x  # every row trains under x
                if arm == "none":  # nothing spent: an empty completion out of the group
                    assert b["texts"][slot] == "" and math.isnan(b["rewards"][slot])
                    assert (b["advantages"][slot] == 0).all()
                else:
                    assert torch.isfinite(b["rewards"][slot])
    assert [len(p) for p in played] == [4, 4, 4]
    shadow = played[0] + played[1]
    assert {"none", "hint", "critique"} <= set(shadow)  # seeded: the 8 random shadow picks cover these arms
    assert [g["arm"] for g in strategy.last] == played[2]
    assert all(g["arm"] == g["wanted"] for g in strategy.last)  # live: the bandit's own choice is played
    for arm in ARMS:
        picks = logged(trainer, f"rlpost/rollout/intervention_bandit/pick/{arm}")
        assert picks == [p.count(arm) / 4 for p in played]
        assert all(math.isfinite(v) for v in logged(trainer, f"rlpost/rollout/intervention_bandit/ucb/{arm}"))
    asks = [e["prompt"] for e in requests_for("writer")]
    assert len(asks) == sum(a in ("hint", "critique") for p in played for a in p)  # one note per such group
    assert all("\n\nReference: " in a for a in asks)  # the writer reads reference_column
    critiques = sum(p.count("critique") for p in played)
    assert sum("Response: " in a for a in asks) == critiques  # a critique reads the worst probe attempt
    assert sum(strategy.bandit.counts) == 12  # one update per group of the 3 batches
    gains = [v for a in set(shadow) for v in logged(trainer, f"rlpost/intervention_bandit/gain/{a}")]
    assert gains and all(math.isfinite(g) for g in gains)
    saved = torch.load(tmp_path / "out" / "checkpoint-3" / "rlpost_state.pt", weights_only=True)
    assert torch.equal(saved["algorithm.rollout"]["bandit"]["A"], strategy.bandit.A)

    # resume from step 2: the bandit of step 2 is restored and step 3 is live
    again = recorder(tmp_path, server)
    again.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-2"))
    resumed = again.run.algorithm.rollout
    # steps 1-2 come back with the checkpoint's log history (shadow), step 3 is live
    assert logged(again, "rlpost/rollout/intervention_bandit/live") == [0.0, 0.0, 1.0]
    assert sum(resumed.bandit.counts) == 12  # 8 restored + 4 new
    # the bandit restored from checkpoint-2, plus the 4 live updates of step 3 (A_k += x x^T for each group's arm);
    # step 3's rollouts are sampled afresh, so its contexts need not equal the uninterrupted run's
    restored = torch.load(tmp_path / "out" / "checkpoint-2" / "rlpost_state.pt", weights_only=True)
    expected = restored["algorithm.rollout"]["bandit"]["A"].clone().double()
    for g in resumed.last:
        v = torch.tensor(g["x"], dtype=torch.float64)
        expected[resumed.bandit.arms.index(g["arm"])] += torch.outer(v, v)
    assert torch.allclose(resumed.bandit.A, expected)
