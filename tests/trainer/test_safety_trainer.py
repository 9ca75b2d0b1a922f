"""The stability kit on real tiny-random trainer runs: rollback restores the exact earlier weights, a
non-finite loss skips the step and rolls back after N in a row, LoRA merge-and-reinit keeps the outputs,
fp32 master weights move a bf16 model, whitening and the ratio guard are wired and checkpointed."""

import json
import math

import torch

from rlpost.runs.state import STATE_FILE
from rlpost.trainer import RLPostTrainer

from support.safety import Recorder, same
from support.trainer import make_run, rlpost_trainer, step_logs, train_rlpost

COLLAPSE = "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.safety:collapsing_reward'}}]"


def metric(trainer, key: str) -> list[float]:
    return [log[key] for log in step_logs(trainer) if key in log]


def test_reward_collapse_rolls_back_to_the_last_good_weights_and_optimizer(tmp_path):
    # Rewards drop by 10 from step 3 (0-based). k=1, warmup 2, n=2: steps 0-2 are good (W_2 is the last snapshot),
    # step 3 is bad (update applied), step 4 is the 2nd bad step in a row -> restore W_2, skip the update.
    # max_rollbacks=1 then stops the run after step 4 (of 6).
    run = make_run(
        [
            COLLAPSE,
            "train.steps=6",
            "algorithm.safety.rollback.max_rollbacks=1",
            "algorithm.safety.rollback.reward_drop_std=1.0",
            "algorithm.safety.rollback.reward_warmup=2",
            "algorithm.safety.rollback.reward_patience=2",
        ]
    )
    events = []
    recorder = Recorder(optimizer_state=True)
    trainer = train_rlpost(run, tmp_path, callbacks=[recorder], event_sink=events.append)
    w = recorder.begin  # w[s] = weights before step s's update
    assert not same(w[3], w[2]) and not same(w[4], w[2]), "the bad step must have moved the weights"
    assert same(recorder.end[4], w[2]), "rollback restores the exact weights of step 2"
    for i, state in recorder.opt_begin[2].items():  # AdamW moments and step count as they were at step 2
        assert all(torch.equal(state[k], recorder.opt_end[4][i][k]) for k in state)
    assert events == trainer.safety.events
    assert [e["event"] for e in events] == ["rollback", "stop"]
    assert trainer.state.global_step == 5 and len(recorder.end) == 5
    assert events[0]["step"] == 5 and events[0]["restored_to_update"] == 2 and "for 2 steps" in events[0]["reason"]
    assert metric(trainer, "safety/rollbacks") == [0, 0, 0, 0, 1]
    assert metric(trainer, "safety/reward_streak") == [0, 0, 0, 1, 0]


def test_kl_explosion_rolls_back(tmp_path):
    # Step 0 runs on the reference weights (KL = 0 <= kl_max): W_0 is good. Step 1 has KL > 1e-9: roll back to W_0.
    run = make_run(["train.steps=2", "algorithm.kl.coef=0.1", "algorithm.safety.rollback.kl_max=1e-9"])
    recorder = Recorder()
    trainer = train_rlpost(run, tmp_path, callbacks=[recorder])
    assert not same(recorder.begin[1], recorder.begin[0])
    assert same(recorder.end[1], recorder.begin[0])
    assert trainer.safety.events[0]["reason"].startswith("kl ")


class InfLossTrainer(RLPostTrainer):
    """Test-only: from optimizer step 2 on, the loss is made +inf (its gradient stays finite, so only the
    loss check can catch it). Also shows that a subclass inherits the kit."""

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        return loss + float("inf") if self.state.global_step >= 2 and self.model.training else loss


def test_nonfinite_loss_skips_the_step_and_rolls_back_after_n(tmp_path):
    # Steps 0, 1 finite (snapshots W_0, W_1); steps 2, 3, 4 non-finite and skipped; step 3 is the 2nd in a row ->
    # restore W_1; step 4 starts a new streak.
    run = make_run(
        ["train.steps=5", "algorithm.safety.nonfinite.enabled=true", "algorithm.safety.nonfinite.rollback_after=2"]
    )
    recorder = Recorder()
    trainer = rlpost_trainer(run, tmp_path, callbacks=[recorder])
    trainer.__class__ = InfLossTrainer
    trainer.train()
    w, end = recorder.begin, recorder.end
    assert not same(w[2], w[1]), "finite steps update"
    assert same(end[2], w[2]), "a non-finite step leaves every parameter as it was"
    assert same(end[3], w[1]), "the 2nd non-finite step in a row restores the last good weights"
    assert same(end[4], w[4])
    assert metric(trainer, "safety/nonfinite_skipped") == [0, 0, 1, 1, 1]
    assert metric(trainer, "safety/nonfinite_total") == [0, 0, 1, 2, 3]
    kinds = [(e["step"], e["event"]) for e in trainer.safety.events]
    assert kinds == [(3, "nonfinite_skip"), (4, "nonfinite_skip"), (4, "rollback"), (5, "nonfinite_skip")]
    assert trainer.safety.events[2]["restored_to_update"] == 1
    assert [e["streak"] for e in trainer.safety.events if e["event"] == "nonfinite_skip"] == [1, 2, 1]


def test_nonfinite_guard_off_lets_the_inf_loss_through(tmp_path):
    # The control: without the guard the same injected loss does not stop the (finite-gradient) update.
    run = make_run(["train.steps=3"])
    recorder = Recorder()
    trainer = rlpost_trainer(run, tmp_path, callbacks=[recorder])
    trainer.__class__ = InfLossTrainer
    trainer.train()
    assert not same(recorder.end[2], recorder.begin[2])


def test_lora_merge_and_reinit_in_a_run(tmp_path):
    ids = torch.tensor([[5, 17, 42, 7, 99, 3]])

    class Outputs(Recorder):  # runs before the kit's own on_step_end (which merges)
        def on_step_end(self, args, state, control, model=None, **kwargs):
            model.eval()
            with torch.no_grad():
                self.end.append(model(input_ids=ids).logits.clone())
            model.train()

    run = make_run(
        ["train.steps=2", "model.lora.enabled=true", "model.lora.r=4", "algorithm.safety.lora_merge.every=2"]
    )
    outputs = Outputs()
    trainer = train_rlpost(run, tmp_path, callbacks=[outputs])
    from rlpost.safety.lora_merge import lora_base_weights, lora_layers

    model = trainer.model
    model.eval()
    with torch.no_grad():
        merged = model(input_ids=ids).logits
    assert torch.allclose(merged, outputs.end[-1], atol=1e-5), "the merge keeps the model's function"
    for layer in lora_layers(model):
        assert torch.count_nonzero(layer.lora_B["default"].weight) == 0, "B is re-initialized to 0"
    initial = rlpost_trainer(run, tmp_path / "fresh").model
    base_now = dict(lora_base_weights(model))
    base_initial = dict(lora_base_weights(initial))
    assert any(not torch.equal(base_now[n], base_initial[n]) for n in base_now), "the adapter went into the base"
    assert metric(trainer, "safety/lora_merges") == [0, 1]
    assert [e["event"] for e in trainer.safety.events] == ["lora_merge"]


def test_fp32_updates_keep_fp32_masters_of_a_bf16_model(tmp_path):
    run = make_run(["train.steps=2", "model.dtype=bfloat16", "algorithm.safety.fp32_updates=true"])
    recorder = Recorder()
    trainer = train_rlpost(run, tmp_path, callbacks=[recorder])
    masters = trainer.safety.masters
    assert masters is not None and masters.pairs
    inner = trainer.optimizer.optimizer
    opt_params = [p for g in inner.param_groups for p in g["params"]]
    assert all(p.dtype == torch.float32 for p in opt_params), "AdamW updates fp32 tensors only"
    assert {id(m) for _, m in masters.pairs} <= {id(p) for p in opt_params}
    for p, master in masters.pairs:
        assert p.dtype == torch.bfloat16 and master.dtype == torch.float32
        assert torch.equal(master.detach().to(torch.bfloat16), p.detach()), "the model holds the rounded master"
    assert trainer.model.lm_head.weight.dtype == torch.float32  # TRL's cast_lm_head_to_fp32 (fp32 log-probs)
    moved = [n for n in recorder.begin[0] if not torch.equal(recorder.begin[0][n], recorder.end[-1][n])]
    assert len(moved) == len(recorder.begin[0]), "every parameter moved"
    assert all(math.isfinite(v) for v in metric(trainer, "loss"))


def test_whitening_and_ratio_guard_are_logged_and_checkpointed(tmp_path):
    run = make_run(
        [
            "train.steps=4",
            "train.num_iterations=2",
            "train.save_steps=4",
            "algorithm.safety.whiten_rewards.enabled=true",
            "algorithm.safety.ratio_guard.enabled=true",
            "algorithm.safety.ratio_guard.max_log_ratio=1e-4",
        ]
    )
    trainer = train_rlpost(run, tmp_path)
    std = metric(trainer, "rlpost/safety/reward_running_std")
    assert len(std) == 2 and all(v > 0 for v in std)  # one value per generation batch (every 2nd step)
    guarded = metric(trainer, "safety/ratio_guarded")
    assert guarded[0] == 0.0 and guarded[2] == 0.0, "pass 1 of a generation batch is on-policy"
    assert guarded[1] > 0 and guarded[3] > 0, "pass 2 is off-policy by one update: the tiny bound bites"
    state = torch.load(tmp_path / "checkpoint-4" / STATE_FILE, weights_only=True)["algorithm.safety"]
    assert state["whitener"]["count"] == 16  # two generation batches of 8 completions


def test_events_land_in_the_run_directory(tmp_path):
    from rlpost.app import compose
    from rlpost.train import train

    cfg = compose(
        [
            "model=tiny-random",
            "train.max_completion_length=8",
            "train.steps=2",
            "data.train_size=16",
            "eval.at_start=false",
            "eval.at_end=false",
            "logging.trackers=[]",
            "logging.progress=false",
            "logging.plots=false",
            "model.lora.enabled=true",
            "algorithm.safety.lora_merge.every=1",
        ]
    )
    train(cfg, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(r["step"], r["event"]) for r in rows] == [(1, "lora_merge"), (2, "lora_merge")]
