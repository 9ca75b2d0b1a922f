"""Each trainer option changes the update as it promises, on 2-3 real steps of the tiny model."""

import math

import pytest
import torch

from support.trainer import make_run, rlpost_trainer, step_logs, train_rlpost

BINARY = "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.rewards:binary_hash_reward'}}]"


def metric(trainer, key: str) -> list[float]:
    return [log[key] for log in step_logs(trainer) if key in log]


def params_of(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_in_loss_loads_a_reference_and_logs_kl(estimator, tmp_path):
    run = make_run(["algorithm.kl.coef=0.1", f"algorithm.kl.estimator={estimator}", "train.steps=2"])
    trainer = train_rlpost(run, tmp_path)
    assert trainer.ref_model is not None
    kl = metric(trainer, "kl")
    assert len(kl) == 2 and all(math.isfinite(v) for v in kl)
    # Step 1 is on the reference weights: every estimator is exactly 0 there; step 2 has moved (lr 1e-3).
    assert kl[0] == pytest.approx(0.0, abs=1e-6)
    assert abs(kl[1]) > 1e-7
    if estimator in ("k2", "k3"):
        assert kl[1] > 0  # both are non-negative per token


def test_reference_sync_anchors_each_iteration_at_the_last_policy(tmp_path):
    """algorithm.kl.ref_sync_every=1, mix 1: after every step the reference is the policy, so the KL each
    step starts from is 0 (without the sync it is > 0 from step 2 on: the test above)."""
    run = make_run(["algorithm.kl.coef=0.1", "algorithm.kl.ref_sync_every=1", "train.steps=3"])
    trainer = train_rlpost(run, tmp_path)
    assert metric(trainer, "kl") == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)
    policy, ref = params_of(trainer.model), params_of(trainer.ref_model)
    assert all(torch.equal(policy[n], ref[n]) for n in policy)


def test_reference_sync_mixes_policy_into_the_reference(tmp_path):
    from rlpost.models.loading import load_model

    overrides = ["algorithm.kl.coef=0.1", "algorithm.kl.ref_sync_every=1", "algorithm.kl.ref_sync_mix=0.5"]
    run = make_run([*overrides, "train.steps=1"])
    start = params_of(load_model(run.model))  # the initial weights: the reference before the first sync
    trainer = train_rlpost(run, tmp_path)
    policy, ref = params_of(trainer.model), params_of(trainer.ref_model)
    name = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(policy[name], start[name])  # the policy moved
    # ref <- 0.5 * policy + 0.5 * ref_initial
    torch.testing.assert_close(ref[name], 0.5 * policy[name] + 0.5 * start[name])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algorithm.kl.ref_sync_every=2"], "algorithm.kl.ref_sync_every=2 moves the reference.*no reference"),
        (
            ["algorithm.kl.coef=0.1", "algorithm.kl.ref_sync_every=2", "model.lora.enabled=true"],
            "ref_sync_every=2 and model.lora.enabled=true cannot be combined",
        ),
        (["algorithm.kl.coef=0.1", "algorithm.kl.ref_sync_mix=0"], "ref_sync_mix"),
    ],
)
def test_reference_sync_refusals(overrides, message):
    from rlpost.core.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        make_run(overrides)


def test_kl_in_reward_subtracts_a_penalty(tmp_path):
    run = make_run(["algorithm.kl.coef=0.1", "algorithm.kl.placement=reward", "algorithm.kl.estimator=k1"])
    trainer = train_rlpost(run, tmp_path)
    penalty = metric(trainer, "rlpost/kl/reward_penalty_mean")
    assert len(penalty) == 3 and penalty[0] == pytest.approx(0.0, abs=1e-6) and penalty[-1] != 0.0
    assert "kl" not in step_logs(trainer)[0], "KL must not also be in the loss"


def test_entropy_regularizer_adds_its_term(tmp_path):
    run = make_run(["algorithm/regularizers=[entropy]", "algorithm.regularizers.entropy.coef=0.01"])
    trainer = train_rlpost(run, tmp_path)
    bonus, entropy = metric(trainer, "entropy/bonus"), metric(trainer, "entropy")
    assert len(bonus) == 3
    for b, h in zip(bonus, entropy):
        assert b == pytest.approx(0.01 * h, rel=1e-4)  # bonus = coef * mean token entropy


def test_dynamic_sampling_drops_zero_variance_groups(tmp_path):
    # 0/1 rewards over groups of 2 are all-equal half of the time.
    run = make_run(
        [BINARY, "algorithm=dapo", "train.num_generations=2", "train.steps=3", "algorithm.overlong.soft_penalty=false",
         "algorithm.max_refill_rounds=0"]  # mask only: the refill has its own test below
    )  # fmt: skip
    trainer = train_rlpost(run, tmp_path)
    kept = metric(trainer, "rlpost/dynamic_sampling/kept_fraction")
    zero_std = metric(trainer, "rlpost/frac_reward_zero_std")
    assert len(kept) == 3
    for k, z in zip(kept, zero_std):
        assert k == pytest.approx(1.0 - z)  # exactly the zero-variance groups are dropped
    assert min(kept) < 1.0, "the test needs at least one dropped group"


def test_dynamic_sampling_refill_puts_informative_groups_in_the_dropped_ones(tmp_path):
    # DAPO's refill (rlpost/trainer/refill.py): 0/1 rewards over groups of 2 are all-equal half of the time;
    # up to 4 more generation rounds replace the dropped groups with informative ones from fresh prompts.
    run = make_run(
        [BINARY, "algorithm=dapo", "train.num_generations=2", "train.steps=3", "algorithm.overlong.soft_penalty=false",
         "algorithm.max_refill_rounds=4"]
    )  # fmt: skip
    trainer = rlpost_trainer(run, tmp_path)
    trained = []
    score = trainer._generate_and_score_completions

    def spy(inputs):
        out = score(inputs)
        trained.append({k: out[k].clone() for k in ("rlpost_keep", "advantages", "prompt_ids", "completion_ids")})
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    before = metric(trainer, "rlpost/dynamic_sampling/kept_fraction")  # round 0, as without refill
    after = metric(trainer, "rlpost/dynamic_sampling/kept_fraction_after_refill")
    rounds = metric(trainer, "rlpost/dynamic_sampling/rounds")
    drawn = metric(trainer, "rlpost/dynamic_sampling/groups_drawn")
    effective = metric(trainer, "rlpost/dynamic_sampling/effective_groups")
    assert min(before) < 1.0, "the test needs a dropped group"
    groups = 8 // 2
    for b, a, r, d, e, batch in zip(before, after, rounds, drawn, effective, trained):
        assert a >= b and d == r * groups and e == a * groups
        if r < 5:  # stopped early: every group carries signal now
            assert a == 1.0
        keep = batch["rlpost_keep"]  # what the loss sees: exactly the effective groups, nothing masked beyond them
        assert keep.sum().item() == e * 2
        adv = batch["advantages"].view(groups, 2)
        assert torch.all((adv[:, 0] != 0) == (keep.view(groups, 2)[:, 0] > 0))  # kept groups have a signal
        assert torch.allclose(adv.sum(1), torch.zeros(groups), atol=1e-5)  # each group's advantages sum to 0
    assert max(rounds) > 1, "some step needed a refill round"


def test_soft_overlong_penalty_reaches_the_reward(tmp_path):
    # The tiny random model never emits EOS: every completion hits the limit and gets -factor.
    run = make_run(["algorithm=dapo", "algorithm.overlong.cache_len=4", "algorithm.overlong.factor=0.5",
                    "algorithm.max_refill_rounds=0"])  # fmt: skip
    trainer = train_rlpost(run, tmp_path)
    assert metric(trainer, "rlpost/overlong/penalty_mean") == pytest.approx([-0.5] * 3)


def test_lora_trains_only_the_adapter(tmp_path):
    run = make_run(["model.lora.enabled=true", "model.lora.r=4", "train.steps=2"])
    trainer = train_rlpost(run, tmp_path)
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    b_weights = [p for n, p in trainer.model.named_parameters() if "lora_B" in n]
    assert any(p.abs().sum() > 0 for p in b_weights), "LoRA B starts at zero and must have moved"


def test_full_finetuning_moves_parameters_and_checkpoints_resume(tmp_path):
    run = make_run(["train.save_steps=1", "train.steps=2"])
    trainer = train_rlpost(run, tmp_path / "a")
    assert (tmp_path / "a" / "checkpoint-1").is_dir() and (tmp_path / "a" / "checkpoint-2").is_dir()
    from rlpost.models.loading import load_model

    start = params_of(load_model(run.model))
    end = params_of(trainer.model)
    assert sum(not torch.equal(start[n], end[n]) for n in start) >= len(start) // 2
    # Resuming from checkpoint-1 restores step 1's state and trains only step 2.
    resumed = make_run(["train.save_steps=1", "train.steps=2"])

    again = rlpost_trainer(resumed, tmp_path / "a")
    again.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-1"))
    assert again.state.global_step == 2
    assert [log["step"] for log in step_logs(again)] == [1, 2]
    assert step_logs(again)[0] == step_logs(trainer)[0]  # step 1 comes from the checkpoint, not retrained


def test_wandb_offline_and_tensorboard_log_into_the_run_directory(tmp_path):
    from rlpost.app import compose
    from rlpost.train import train

    from support.trainer import HASH_REWARD, TINY

    cfg = compose([*TINY, HASH_REWARD, "train.steps=1", "logging.wandb=offline", "logging.tensorboard=true"])
    summary = train(cfg, tmp_path / "run")
    assert summary["steps"] == 1
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*")), "no offline wandb run"
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*")), "no tensorboard events"


def test_the_logged_reward_is_the_reward_trained_on(tmp_path):
    # two terms, weights 0.25 and 0: TRL's own `reward` would be their unit-weight sum (the hash reward plus
    # math_answer); the logged one is the run's weighted reward, mean 0.25 x hash, with the overlong penalty
    terms = (
        "reward.terms=[{name: callable, weight: 0.25, params: {path: 'support.rewards:binary_hash_reward'}},"
        "{name: math_answer, weight: 0.0}]"
    )
    run = make_run([terms, "algorithm.overlong.soft_penalty=true", "algorithm.overlong.cache_len=4", "train.steps=2"])
    trainer = train_rlpost(run, tmp_path)
    for log in step_logs(trainer):
        hashed = log["rewards/callable/mean"]
        # every tiny-model completion hits the limit: penalty -1 (factor 1.0) on top of 0.25 x the hash reward
        assert log["reward"] == pytest.approx(0.25 * hashed - 1.0) == pytest.approx(log["rlpost/reward"])
        assert log["reward"] != pytest.approx(hashed + log["rewards/math_answer/mean"])
