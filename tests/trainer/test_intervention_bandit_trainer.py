"""RAIL's intervention bandit (rlpost/rollouts/intervention_bandit.py) through the real RLPostTrainer (tiny model,
2 steps): a probe, then the arm's rows; shadow (random arms) at step 1, live (the bandit's arm) at step 2; the none
arm's slots leave the group, conditioned rows train under the original prompt; the bandit is updated from the
scored batch, checkpointed, and a run resumed from step 1 ends with the same bandit as the uninterrupted one."""

from __future__ import annotations

import math

import torch
from support_judges import requests_for
from support_rollouts import Recorder, data_files, logged, original_prompt_ids, train, unpadded

from rlpost.data import load_datasets
from rlpost.models import load_model, load_tokenizer

from trainer_utils import grpo_args, make_run

ARMS = ["none", "hint", "critique", "draft", "extra"]


def overrides(tmp_path, server) -> list[str]:
    return [
        *data_files(tmp_path),
        "algorithm/rollout=intervention_bandit",
        "algorithm.rollout.writer.backend=openai",  # the frozen writer of hints and critiques: an endpoint here
        f"algorithm.rollout.writer.base_url={server}/writer/v1",  # it answers "no" to every ask
        "algorithm.rollout.shadow_steps=1",  # step 1 shadow, step 2 live
        "algorithm.rollout.reference_column=answer",
        "train.save_steps=1",
    ]


def test_probe_then_the_chosen_intervention_shadow_then_live(tmp_path, generate_calls, server):
    trainer = train(overrides(tmp_path, server), tmp_path)
    strategy = trainer.run.algorithm.rollout
    assert logged(trainer, "rlpost/rollout/intervention_bandit/live") == [0.0, 1.0]
    played = []
    for b in trainer.batches:
        for start in range(0, len(b["kinds"]), 4):  # G = 4: 2 probe rows, 2 slots of one arm
            kinds, slots = b["kinds"][start : start + 4], [start + 2, start + 3]
            assert kinds[:2] == ["natural", "natural"] and kinds[2] == kinds[3] and kinds[2].startswith("intervention_")
            arm = kinds[2].removeprefix("intervention_")
            played.append(arm)
            x = original_prompt_ids(trainer, b["rows"][start]["prompt"])
            for slot in slots:
                assert unpadded(b["prompt_ids"][slot], b["prompt_mask"][slot]) == x  # every row trains under x
                if arm == "none":  # nothing spent: an empty completion out of the group
                    assert b["texts"][slot] == "" and math.isnan(b["rewards"][slot])
                    assert (b["advantages"][slot] == 0).all()
                else:
                    assert torch.isfinite(b["rewards"][slot])
    assert len(set(played)) >= 3  # seeded: the shadow step and the live step play several arms
    last = played[2:]
    assert [g["arm"] for g in strategy.last] == last
    assert all(g["arm"] == g["wanted"] for g in strategy.last)  # live: the bandit's own choice is played
    for arm in ARMS:
        picks = logged(trainer, f"rlpost/rollout/intervention_bandit/pick/{arm}")
        assert picks == [played[:2].count(arm) / 2, last.count(arm) / 2]
        assert all(math.isfinite(v) for v in logged(trainer, f"rlpost/rollout/intervention_bandit/ucb/{arm}"))
    asks = [e["prompt"] for e in requests_for("writer")]
    assert len(asks) == sum(a in ("hint", "critique") for a in played)  # one note per hint / critique group
    assert all("\n\nReference: " in a for a in asks)  # the writer reads reference_column
    assert sum("Response: " in a for a in asks) == played.count("critique")  # a critique reads the worst attempt
    assert sum(strategy.bandit.counts) == 4  # one update per group of the 2 batches
    gains = [v for a in set(played) for v in logged(trainer, f"rlpost/intervention_bandit/gain/{a}")]
    assert gains and all(math.isfinite(g) for g in gains)
    saved = torch.load(tmp_path / "out" / "checkpoint-2" / "rlpost_state.pt", weights_only=True)
    assert torch.equal(saved["algorithm.rollout"]["bandit"]["A"], strategy.bandit.A)

    # resume from step 1: the bandit of step 1 is restored, the step is live, and it ends where the run ended
    run = make_run(["train.steps=2", *overrides(tmp_path, server)])
    again = Recorder(
        model=load_model(run.model),
        args=grpo_args(run, tmp_path / "out"),
        train_dataset=load_datasets(run.data)[0],
        processing_class=load_tokenizer(run.model),
        run=run,
    )
    again.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-1"))
    resumed = again.run.algorithm.rollout
    assert logged(again, "rlpost/rollout/intervention_bandit/live") == [1.0]
    assert sum(resumed.bandit.counts) == 4  # 2 restored + 2 new
    assert torch.allclose(resumed.bandit.A, strategy.bandit.A) and torch.allclose(resumed.bandit.b, strategy.bandit.b)
