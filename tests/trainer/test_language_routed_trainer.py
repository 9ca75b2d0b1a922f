"""LRPO (seed 004 #9, algorithm/rollout=language_routed) through the real RLPostTrainer (tiny model, 2 steps):
each group is split between two router-picked languages whose instruction is in the trained prompt, the router
moves and logs its probabilities, the preference term runs, and the router state is checkpointed and restored."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import TrainerCallback

from rlpost.runs.state import STATE_FILE

from support.rollouts import data_files, logged, train, unpadded
from support.trainer import make_run, rlpost_trainer

LRPO = ["algorithm/rollout=language_routed", "algorithm.rollout.languages=[English, French, German]"]


def test_groups_are_split_between_two_languages_trained_under_their_instruction(tmp_path):
    trainer = train([*data_files(tmp_path), *LRPO], tmp_path)  # text-hash reward: every group has a spread
    strategy, tok = trainer.run.algorithm.rollout, trainer._tokenizer
    for b in trainer.batches:
        for start in range(0, 8, 4):
            kinds = b["kinds"][start : start + 4]
            assert kinds[0] == kinds[1] != kinds[2] == kinds[3]  # m = 2 languages, 2 rows each
            for i in range(start, start + 4):
                language = b["kinds"][i].removeprefix("lang_")
                prompt = tok.decode(unpadded(b["prompt_ids"][i], b["prompt_mask"][i]))
                assert f"Answer in {language}." in prompt and b["rows"][i]["question"] in prompt
    probs = [[log[f"rlpost/rollout/language_routed/p/{n}"] for n in ("English", "French", "German")]
             for log in trainer.state.log_history if "rlpost/rollout/language_routed/p/English" in log]  # fmt: skip
    assert len(probs) == 2 and all(sum(p) == pytest.approx(1.0) for p in probs)
    uniform, moved = probs[0] == pytest.approx([1 / 3] * 3), probs[1] != pytest.approx(probs[0])
    assert uniform and moved  # uniform at step 1, moved by step 1's update
    assert sum(strategy.picks) == 8 and strategy.log_w.abs().sum() > 0  # 2 steps x 2 groups x 2 languages
    pref = logged(trainer, "rlpost/rollout/language_routed/pref_loss")  # the cross-language term ran
    assert all(math.isfinite(v) and v > 0 for v in pref)
    assert all(0 < v <= 1 for v in logged(trainer, "rlpost/rollout/language_routed/pref_frac"))
    assert any(f"rlpost/rollout/language_routed/info/{n}" in log for log in trainer.state.log_history
               for n in ("English", "French", "German"))  # fmt: skip


def test_the_router_state_is_checkpointed_and_restored(tmp_path):
    overrides = [*data_files(tmp_path), *LRPO, "train.steps=2", "train.save_steps=1"]
    first = rlpost_trainer(make_run(overrides), tmp_path / "a")
    first.train()
    checkpoint = tmp_path / "a" / "checkpoint-1"
    saved = torch.load(checkpoint / STATE_FILE, weights_only=True)["algorithm.rollout"]
    assert saved["languages"] == ["English", "French", "German"] and sum(saved["picks"]) == 4
    again = rlpost_trainer(make_run(overrides), tmp_path / "a")
    seen = {}

    class AtResume(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            seen.setdefault("log_w", again.run.algorithm.rollout.log_w.tolist())

    again.add_callback(AtResume())
    again.train(resume_from_checkpoint=str(checkpoint))
    assert seen["log_w"] == saved["log_w"] and any(w != 0 for w in saved["log_w"])  # step 2 starts from step 1's
    assert again.run.algorithm.rollout.picks == first.run.algorithm.rollout.picks  # 8: the whole run's picks
