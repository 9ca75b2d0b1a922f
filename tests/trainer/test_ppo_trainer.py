"""PPO / PPO-OR through the real TRL trainer (seed 000 #29, 000 #16): 2 steps on the tiny model for each
critic kind and loss, the critic's checkpoint and resume, and (slow) 2 PPO steps on SmolLM2 via the CLI."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from rlpost.algorithms.ppo import CRITIC_FILE, PPOTrainer
from rlpost.models.loading import load_model

from support.paths import REPO
from support.trainer import HASH_REWARD, make_run, rlpost_trainer, step_logs, train_rlpost

ONE_EPOCH = ["train.steps=2", "train.micro_batch_size=4", "algorithm.critic.learning_rate=1e-2"]


def rlpost(args, cwd):
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}", "WANDB_MODE": "disabled"}
    proc = subprocess.run([sys.executable, "-m", "rlpost.cli", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"rlpost {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"


PPO = [*ONE_EPOCH, "train.num_iterations=2"]  # 2 PPO epochs over one generation batch


def params_of(module):
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def moved(start, end):
    return sum(not torch.equal(start[n], end[n]) for n in start)


def finite(log, key):
    return isinstance(log.get(key), float) and math.isfinite(log[key])


def train_and_check(overrides, tmp_path, extra_keys=()):
    run = make_run(["algorithm=ppo", *PPO, *overrides])
    trainer = rlpost_trainer(run, tmp_path)
    assert isinstance(trainer, PPOTrainer)
    critic_start, policy_start = params_of(trainer.critic), params_of(trainer.model)
    trainer.train()
    logs = step_logs(trainer)
    assert [log["step"] for log in logs] == [1, 2]
    for log in logs:
        for key in ("loss", "grad_norm", "value/loss", "value/mean", "value/clipfrac", "critic/grad_norm", *extra_keys):
            assert finite(log, key), (key, log)
    assert finite(logs[0], "rlpost/gae/returns_mean") and finite(logs[0], "kl/token_penalty_sum_mean")
    assert moved(critic_start, params_of(trainer.critic)) == len(critic_start), "every critic tensor moves"
    assert moved(policy_start, params_of(trainer.model)) >= len(policy_start) // 2, "the policy moves"
    # The critic learns: step 2 (the second PPO epoch on the same batch) has moved V from V_old = 0.
    assert logs[0]["value/mean"] == 0.0 and logs[1]["value/mean"] != 0.0
    return trainer, logs


def test_ppo_head_two_steps_move_policy_and_critic(tmp_path):
    trainer, logs = train_and_check([], tmp_path, extra_keys=("clip_ratio/region_mean",))
    # Epoch 2 is off-policy (ratio != 1), so the clip can bite; epoch 1 is on-policy.
    assert logs[0]["or/log_ratio_abs_mean"] == 0.0 and logs[1]["or/log_ratio_abs_mean"] > 0.0
    # The head is the trainer's own module, in its own optimizer group at critic.learning_rate.
    group = trainer.optimizer.param_groups[-1]
    assert group["lr"] == 1e-2 and {id(p) for p in group["params"]} == {id(p) for p in trainer.critic.parameters()}
    assert not any(n.startswith("critic") or "linear" in n for n, _ in trainer.model.named_parameters())


def test_ppo_or_two_steps(tmp_path):
    run_overrides = ["algorithm/loss=output_reset"]
    trainer, logs = train_and_check(run_overrides, tmp_path, extra_keys=("or/residual_mean", "or/overshoot_frac"))
    assert type(trainer.run.algorithm.loss).registry_name == "output_reset"


def test_ppo_or_bundle_with_a_separate_critic_model(tmp_path):
    run = make_run(["algorithm=ppo_or", *PPO, "algorithm.critic.kind=model"])
    trainer = rlpost_trainer(run, tmp_path)
    backbone = params_of(trainer.critic.backbone)
    assert backbone.keys() == params_of(trainer.model.base_model).keys()  # a copy of the policy's backbone
    trainer.train()
    assert moved(backbone, params_of(trainer.critic.backbone)) >= len(backbone) // 2
    assert all(finite(log, "value/loss") and finite(log, "or/residual_mean") for log in step_logs(trainer))


def test_ppo_with_lora_trains_the_adapter_and_the_head(tmp_path):
    run = make_run(["algorithm=ppo", *PPO, "train.steps=1", "model.lora.enabled=true", "model.lora.r=4"])
    trainer = rlpost_trainer(run, tmp_path)
    critic, policy = params_of(trainer.critic), params_of(trainer.model)
    trainer.train()
    changed = {n for n, p in params_of(trainer.model).items() if not torch.equal(p, policy[n])}
    assert changed and all("lora_" in n for n in changed)  # the hook on the wrapped backbone still feeds the head
    assert moved(critic, params_of(trainer.critic)) == len(critic)
    assert finite(step_logs(trainer)[0], "value/loss")


class RecordAtFirstStep(TrainerCallback):
    """What the resumed trainer holds when its first step begins (after the checkpoint is loaded)."""

    def __init__(self, trainer):
        self.trainer, self.seen = trainer, None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.seen is None:
            critic = self.trainer.critic
            moments = [self.trainer.optimizer.state[p]["exp_avg"].clone() for p in critic.parameters()]
            self.seen = {"weights": {k: v.clone() for k, v in critic.state_dict().items()}, "exp_avg": moments}


def test_resume_restores_the_critic_and_its_optimizer_state(tmp_path):
    run = make_run(["algorithm=ppo", *ONE_EPOCH, "train.save_steps=1"])
    first = train_rlpost(run, tmp_path / "a")
    checkpoint = tmp_path / "a" / "checkpoint-1"
    # Step 2 samples from the updated policy: the per-token KL reward to the reference is no longer 0.
    assert (
        step_logs(first)[0]["kl/token_penalty_sum_mean"] == 0.0
        and step_logs(first)[1]["kl/token_penalty_sum_mean"] != 0.0
    )
    saved = load_file(checkpoint / CRITIC_FILE)
    assert set(saved) == {"linear.weight", "linear.bias"} and saved["linear.weight"].abs().sum() > 0
    assert not any("linear" in k for k in load_file(checkpoint / "model.safetensors"))  # the policy folder is plain
    assert (tmp_path / "a" / "checkpoint-2" / CRITIC_FILE).is_file()

    again = rlpost_trainer(make_run(["algorithm=ppo", *ONE_EPOCH, "train.save_steps=1"]), tmp_path / "a")
    record = RecordAtFirstStep(again)
    again.add_callback(record)
    again.train(resume_from_checkpoint=str(checkpoint))
    assert again.state.global_step == 2 and step_logs(again)[0] == step_logs(first)[0]
    for key, value in saved.items():
        torch.testing.assert_close(record.seen["weights"][key], value)  # the zero-initialised head was restored
    assert all(m.abs().sum() > 0 for m in record.seen["exp_avg"])  # and its AdamW moments

    (checkpoint / CRITIC_FILE).unlink()
    broken = rlpost_trainer(make_run(["algorithm=ppo", *PPO, "train.save_steps=1"]), tmp_path / "a")
    with pytest.raises(FileNotFoundError, match="no critic.safetensors"):
        broken.train(resume_from_checkpoint=str(checkpoint))


@pytest.mark.slow
def test_ppo_two_steps_on_smollm2_through_the_cli(tmp_path):
    run_dir = tmp_path / "run"
    rlpost(
        [
            "train",
            "algorithm=ppo",
            "model=smollm2-135m",
            HASH_REWARD,  # a dense reward: 4 exact-answer zeros would leave returns, advantages and gradients 0
            "train.steps=2",
            "train.num_iterations=2",
            "train.num_generations=4",
            "train.completions_per_step=4",
            "train.max_completion_length=16",
            "eval.at_start=false",
            "eval.at_end=false",
            "logging.plots=false",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
    )
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for row in steps:
        for key in ("loss", "grad_norm", "value/loss", "value/mean", "critic/grad_norm", "entropy"):
            assert isinstance(row.get(key), (int, float)) and math.isfinite(row[key]), (key, row)
    assert steps[0]["value/mean"] == 0.0 and steps[1]["value/mean"] != 0.0  # the critic moved after step 1

    from rlpost.app import compose
    from rlpost.build import build_run

    final = run_dir / "checkpoints" / "final"
    critic = load_file(final / CRITIC_FILE)
    assert critic["linear.weight"].abs().sum() > 0 and critic["linear.bias"].abs().sum() > 0
    policy = load_file(final / "model.safetensors")
    start = {
        n: p.detach() for n, p in load_model(build_run(compose(["model=smollm2-135m"])).model).state_dict().items()
    }
    changed = [k for k in policy if k in start and not torch.equal(policy[k], start[k])]
    assert len(changed) > len(policy) // 2, f"only {len(changed)} of {len(policy)} policy tensors changed"


def test_ppo_epochs_over_minibatches_share_one_generation_batch(tmp_path):
    """train.minibatches=2, num_iterations=2: one generation of 2 x 8 completions feeds 4 optimizer steps
    (2 epochs x 2 mini-batches of 8), so the 4 steps sample once and every step trains."""
    run = make_run(["algorithm=ppo", *ONE_EPOCH, "train.steps=4", "train.num_iterations=2", "train.minibatches=2"])
    trainer = rlpost_trainer(run, tmp_path)
    assert trainer.args.steps_per_generation == 2 * trainer.args.gradient_accumulation_steps
    sampled = []
    generate = trainer._generate
    trainer._generate = lambda prompts: sampled.append(len(prompts)) or generate(prompts)
    critic_start = params_of(trainer.critic)
    trainer.train()
    assert sampled == [16], "one generation batch of minibatches x completions_per_step completions"
    logs = step_logs(trainer)
    assert [log["step"] for log in logs] == [1, 2, 3, 4]
    assert all(finite(log, "loss") and finite(log, "value/loss") for log in logs)
    assert moved(critic_start, params_of(trainer.critic)) == len(critic_start)
