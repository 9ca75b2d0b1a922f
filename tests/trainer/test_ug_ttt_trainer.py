"""UG-TTT through the real TRL trainer (seed 004 #28): 2 steps on the tiny model train every adapter and no
base weight, log finite ensemble metrics, save and restore the adapters; the nuclear-norm term acts (its share of
the gradient is logged, and it separates a collapsed ensemble further than the policy gradient alone); the routed
log-probs are each row's own adapter's; an episode run (the formula environment) routes its turns; what it
refuses."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from rlpost.algorithms.ug_ttt import NUCLEAR_FIGURE, UGTTTTrainer
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.losses.base import ADAPTER
from rlpost.models.loading import ModelConfig, load_model
from rlpost.models.lora_ensemble import ENSEMBLE_FILE, merge_saved_ensemble
from rlpost.trainer.batch import GenerationBatch, LossPass

from support.trainer import HASH_REWARD, TINY, make_run, rlpost_trainer, step_logs

UG = ["algorithm=ug_ttt", "train.steps=2", "train.save_steps=2", "train.num_generations=4"]


def test_two_steps_train_every_adapter_and_no_base_weight(tmp_path):
    trainer = rlpost_trainer(make_run(UG), tmp_path)
    assert isinstance(trainer, UGTTTTrainer)
    start = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    end = dict(trainer.model.named_parameters())
    base = [n for n in start if not n.startswith("rlpost_ensemble.")]
    assert base and all(torch.equal(start[n], end[n]) for n in base)  # the base is frozen
    for name in [n for n in start if n.startswith("rlpost_ensemble.lora_B")]:
        for k in range(3):  # every adapter learned from its own samples
            assert not torch.equal(start[name][k], end[name][k]), f"{name}[{k}] did not move"
    logs = step_logs(trainer)
    assert len(logs) == 2
    for key in ("ugttt/mi", "ugttt/mi_max", "ugttt/distinctness", "rlpost/reward_max", "ugttt/reward_adapter2"):
        assert all(isinstance(log.get(key), float) and math.isfinite(log[key]) for log in logs), key
    assert all(log["rlpost/reward_max"] >= log["reward"] for log in logs)
    assert all(1 / math.sqrt(3) <= log["ugttt/distinctness"] <= 1.0 for log in logs)
    # the term's share of the gradient at the default lambda = 0.01: small (the adapters start distinct) but not 0
    assert all(1e-3 < log[NUCLEAR_FIGURE] < 0.5 for log in logs)

    checkpoint = tmp_path / "checkpoint-2"
    saved = load_file(checkpoint / ENSEMBLE_FILE)
    assert set(saved) == {k for k in trainer.ensemble.state_dict()}
    weights = load_file(checkpoint / "model.safetensors")
    assert not any(k.startswith("rlpost_ensemble") for k in weights)  # the base stays a plain model
    # rlpost eval of the folder: the frozen base with the ensemble's mean update merged, the policy the run
    # evaluated (outside training the layers run the mean)
    merged = load_model(ModelConfig(source="hf", path=str(checkpoint)))
    assert merge_saved_ensemble(merged, checkpoint) and not merge_saved_ensemble(merged, tmp_path)
    ids = torch.randint(0, 100, (2, 6))
    policy = trainer.accelerator.unwrap_model(trainer.model).eval()
    with torch.no_grad():
        torch.testing.assert_close(merged.eval()(ids).logits, policy(ids).logits, atol=1e-4, rtol=1e-4)
        with trainer.ensemble.use(None):  # and not the base: the adapters moved it
            assert not torch.allclose(merged(ids).logits, policy(ids).logits, atol=1e-4)
    with torch.no_grad():  # a resume puts the saved adapters back
        for p in trainer.ensemble.parameters():
            p.add_(1.0)
    trainer._load_optimizer_and_scheduler(str(checkpoint))
    assert all(torch.equal(v, trainer.ensemble.state_dict()[k]) for k, v in saved.items())


def one_step_from_a_collapsed_ensemble(tmp_path, nuclear_coef: float):
    """One step from K = 3 adapters that are one adapter (adapter 0's A and B) up to 1% noise: the trainer, the
    adapters' change and the distinctness before and after, both on the step's recorded inputs."""
    trainer = rlpost_trainer(
        make_run([*UG, "train.steps=1", f"algorithm.ensemble.nuclear_coef={nuclear_coef}"]), tmp_path
    )
    ens = trainer.ensemble
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in [*ens.lora_A.values(), *ens.lora_B.values()]:
            p.copy_(p[:1].expand_as(p) * (1 + 0.01 * torch.randn(p.shape, generator=noise)))
    start = {k: v.clone() for k, v in ens.state_dict().items()}
    trainer.train()
    before = step_logs(trainer)[0]["ugttt/distinctness"]  # the loss's D: the start's adapters on the step's inputs
    moved = {k: v - start[k] for k, v in ens.state_dict().items()}
    return trainer, moved, before, ens.distinctness().item()


def test_the_nuclear_term_separates_a_collapsed_ensemble(tmp_path):
    # near collapse the cosines of the adapters' outputs are ~1 and D is ~1/sqrt(3): the term's gradient
    # (d sqrt(lambda) / d lambda grows as an eigenvalue falls to 0) dominates the step, and Adam's first step
    # (lr 1e-3 against B ~ 1e-3) moves the adapters along it: they end further apart than the policy gradient,
    # each adapter trained on its own samples, takes them alone
    with_term, moved, before, after = one_step_from_a_collapsed_ensemble(tmp_path / "on", nuclear_coef=1.0)
    without, moved0, before0, after0 = one_step_from_a_collapsed_ensemble(tmp_path / "off", nuclear_coef=0.0)
    assert before == before0 < 1 / math.sqrt(3) + 0.05  # the same start, seen as collapsed on the batch
    assert step_logs(with_term)[0][NUCLEAR_FIGURE] > 0.5  # the term is most of the step's gradient
    assert NUCLEAR_FIGURE not in step_logs(without)[0]  # lambda = 0: no term, no figure
    assert after > after0 + 0.02 and after > 0.95  # measured: 0.990 with the term, 0.946 without
    for name, delta in moved.items():
        for k in range(3):  # every adapter of every layer took another step
            assert not torch.allclose(delta[k], moved0[name][k], atol=1e-6), f"{name}[{k}]"


def test_routed_log_probs_are_each_rows_own_adapter(tmp_path):
    trainer = rlpost_trainer(make_run(UG), tmp_path)
    torch.manual_seed(0)
    with torch.no_grad():  # adapters that differ clearly, so a wrong route would show
        for p in trainer.ensemble.lora_B.values():
            p.normal_(std=0.5)
    ids = torch.randint(0, 100, (4, 7))
    mask = torch.ones_like(ids)
    rows = torch.tensor([2, 0, 1, 0])
    # routed by the per-batch state, never a trainer attribute: the batch being generated and scored ...
    trainer.batch = GenerationBatch(rows=[{}] * 4, adapters=rows)
    routed, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 3)
    trainer.batch = None
    trainer.loss_pass = LossPass({ADAPTER: rows})  # ... or the loss micro-batch's adapter column
    in_loss, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 3)
    trainer.loss_pass = None
    assert torch.equal(in_loss, routed)
    for i, k in enumerate(rows.tolist()):
        with trainer.ensemble.use(k):
            alone, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids[i : i + 1], mask[i : i + 1], 3)
        assert torch.allclose(routed[i], alone[0], atol=1e-5)
    mean, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 3)  # no route: the mean
    assert not torch.allclose(mean, routed, atol=1e-4)


def test_an_episode_run_routes_every_turn(tmp_path):
    env = ["reward=env", "data=formula_tasks", "data/env=formula", "train.max_completion_length=16"]
    trainer = rlpost_trainer(build_run(compose([*TINY, *UG, *env, "train.steps=1"])), tmp_path)
    seen = []
    original = trainer.ensemble.use

    def spy(k):
        seen.append(k)
        return original(k)

    trainer.ensemble.use = spy
    trainer.train()
    assert {0, 1, 2} <= set(seen)
    assert math.isfinite(step_logs(trainer)[0]["ugttt/mi"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.lora.enabled=true"], "algorithm.ensemble \\(UG-TTT\\) and model.lora.enabled=true cannot be combined"),
        (["train.num_generations=2"], "algorithm.ensemble.adapters=3 but train.num_generations=2"),
        (["algorithm/rollout=forced_refusal"], "and algorithm/rollout=forced_refusal cannot be combined"),
        (["algorithm.ensemble.adapters=1"], "algorithm.ensemble.adapters"),
        (["algorithm.ensemble.target_modules=[]"], "target_modules must name at least one linear"),
    ],
)
def test_what_ug_ttt_refuses(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_run(compose([*TINY, HASH_REWARD, "algorithm=ug_ttt", "train.num_generations=4", *overrides]))


def test_a_resumed_run_continues_from_the_saved_adapters(tmp_path):
    steps = [*UG, "train.save_steps=1"]
    first = rlpost_trainer(make_run(steps), tmp_path / "a")
    first.train()
    checkpoint = tmp_path / "a" / "checkpoint-1"
    saved = load_file(checkpoint / ENSEMBLE_FILE)
    again = rlpost_trainer(make_run(steps), tmp_path / "a")
    seen = {}

    class AtResume(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            seen.setdefault("weights", {k: v.clone() for k, v in again.ensemble.state_dict().items()})

    again.add_callback(AtResume())
    again.train(resume_from_checkpoint=str(checkpoint))
    assert again.state.global_step == 2
    for key, value in saved.items():
        torch.testing.assert_close(seen["weights"][key], value)  # step 2 starts from step 1's adapters
    for key, value in first.ensemble.state_dict().items():  # and ends where the uninterrupted run ended
        torch.testing.assert_close(again.ensemble.state_dict()[key], value)

    (checkpoint / ENSEMBLE_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="no ensemble.safetensors"):
        rlpost_trainer(make_run(steps), tmp_path / "a").train(resume_from_checkpoint=str(checkpoint))
