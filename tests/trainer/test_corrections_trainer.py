"""Corrections in the real trainer (tiny random Llama, 2 steps each): the rollout copy's mismatch is
exactly zero in fp32 and positive in bf16, the weights reach the loss, f_tis with a peer model in
every group, acrl's controller in the checkpoint."""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.runs.state import STATE_FILE

from support.trainer import make_run, rlpost_trainer, step_logs


class Recorder:
    """The run's real correction, recording each call's inputs and weights (delegates everything else)."""

    def __init__(self, correction):
        self.inner = correction
        self.calls = []

    def __call__(self, x):
        weights, metrics = self.inner(x)
        self.calls.append((x, weights))
        return weights, metrics

    def __getattr__(self, name):
        return getattr(self.inner, name)


def run_steps(tmp_path, overrides, steps=2, **kwargs):
    run = make_run([f"train.steps={steps}", *overrides])
    recorder = Recorder(run.algorithm.correction)
    run.algorithm.correction = recorder
    trainer = rlpost_trainer(run, tmp_path, **kwargs)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    moved = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    return trainer, recorder, step_logs(trainer), moved


def test_fp32_rollout_copy_gives_weights_of_exactly_one(tmp_path):
    trainer, rec, logs, moved = run_steps(
        tmp_path, ["algorithm/correction=tis", "algorithm.correction.rollout_precision=fp32"]
    )
    assert trainer._rollout_engine.copy is not None and moved and len(logs) == 2
    assert len(rec.calls) == 2
    for x, weights in rec.calls:  # step 2 is exact only if the copy was re-synced after step 1's update
        assert torch.equal(x.train_logps, x.behaviour_logps)
        assert torch.equal(weights, torch.ones_like(weights))
    for log in logs:
        assert log["rlpost/mismatch/logp_abs_diff"] == 0.0 and log["rlpost/mismatch/kl"] == 0.0
        assert log["rlpost/correction/weight_min"] == log["rlpost/correction/weight_max"] == 1.0
    copy_params = dict(trainer._rollout_engine.copy.named_parameters())
    assert not torch.equal(
        copy_params["model.embed_tokens.weight"], trainer.model.model.embed_tokens.weight
    )  # 1 step stale


def test_bf16_rollout_copy_makes_the_mismatch_real(tmp_path):
    trainer, rec, logs, moved = run_steps(tmp_path, ["algorithm=gepo", "algorithm/correction=tis"])
    assert next(trainer._rollout_engine.copy.parameters()).dtype == torch.bfloat16
    assert next(trainer.model.parameters()).dtype == torch.float32 and moved
    for x, weights in rec.calls:
        counted = weights[x.mask.bool()]
        assert not torch.equal(counted, torch.ones_like(counted))
        assert torch.isfinite(counted).all() and (counted <= 2.0).all()
    for log in logs:
        assert log["rlpost/mismatch/logp_abs_diff"] > 0 and log["rlpost/mismatch/kl"] > 0
        assert log["rlpost/correction/weight_min"] < 1.0 < log["rlpost/correction/weight_max"]
        assert "rlpost/correction/clipped_fraction" in log


def test_none_with_bf16_rollouts_only_measures(tmp_path):
    run = make_run(["train.steps=1", "algorithm.correction.rollout_precision=bf16"])
    trainer = rlpost_trainer(run, tmp_path)
    trainer.train()
    (log,) = step_logs(trainer)
    assert log["rlpost/mismatch/logp_abs_diff"] > 0
    assert not any(k.startswith("rlpost/correction/") for k in log)


def test_f_tis_peer_model_joins_every_group_and_its_far_samples_are_filtered(tmp_path):
    trainer, rec, logs, moved = run_steps(
        tmp_path,
        [
            "algorithm/correction=f_tis",
            "algorithm.correction.peer_model=tiny-random",
            "algorithm.correction.peer_overrides={tiny_hidden: 32, tiny_intermediate: 64}",
            "algorithm.correction.max_kl=0.001",
            "algorithm.correction.cap=1.2",
        ],
    )
    engine = trainer._rollout_engine
    assert engine.peer.config.hidden_size == 32 and trainer.model.config.hidden_size == 64
    assert moved
    for x, weights in rec.calls:
        assert x.peer.tolist() == [False, False, False, True] * 2  # the last completion of each group of 4
        own, peer = ~x.peer, x.peer
        # the peer's tokens are far off the policy (a different model); the bf16 copy's are not
        assert (x.log_ratio[peer].abs().sum(1) / x.mask[peer].sum(1)).min() > 0.01
        assert (x.log_ratio[own].abs().max()) < 0.01
        assert torch.equal(weights[peer], torch.zeros_like(weights[peer]))  # filtered: token-mean KL > 0.001
        assert (weights[own][x.mask[own].bool()] > 0).all()
    for log in logs:
        assert log["rlpost/correction/peer_filtered_fraction"] == 1.0
        assert log["rlpost/correction/filtered_fraction"] == 0.25
        assert log["rlpost/mismatch/peer_logp_abs_diff"] > 100 * log["rlpost/mismatch/logp_abs_diff"]


def test_f_tis_peer_samples_are_truncated_when_not_filtered(tmp_path):
    trainer, rec, logs, _ = run_steps(
        tmp_path,
        [
            "algorithm/correction=f_tis",
            "algorithm.correction.rollout_precision=null",  # own samples from the policy itself: ratio 1
            "algorithm.correction.peer_model=tiny-random",
            "algorithm.correction.peer_overrides={tiny_hidden: 32, tiny_intermediate: 64}",
            "algorithm.correction.cap=1.05",
        ],
        steps=1,
    )
    assert trainer._rollout_engine.copy is None
    ((x, weights),) = rec.calls
    ratio = torch.exp(x.log_ratio)
    assert torch.equal(weights[~x.peer], torch.ones_like(weights[~x.peer]))
    torch.testing.assert_close(weights[x.peer], ratio[x.peer].clamp(max=1.05))
    assert (ratio[x.peer] > 1.05).any() and logs[0]["rlpost/correction/clipped_fraction"] > 0


def test_acrl_and_ais_run_and_acrl_state_is_checkpointed(tmp_path):
    _, rec, logs, moved = run_steps(
        tmp_path / "acrl",
        [
            "algorithm/correction=acrl",
            "algorithm.correction.rollout_precision=bf16",
            "algorithm.correction.controlled=real",
            "algorithm.correction.band_low=0.01",
            "algorithm.correction.band_high=0.1",
            "train.save_steps=1",
        ],
    )
    assert moved and rec.inner.updates == 2
    assert logs[1]["rlpost/correction/tau"] > logs[0]["rlpost/correction/tau"]  # bf16 mismatch < band_low: relax
    real, admitted = logs[0]["rlpost/correction/real_discrepancy"], logs[0]["rlpost/correction/admitted_discrepancy"]
    assert 0 < admitted <= real < 0.01  # the controller reads the real bf16 mismatch, below band_low
    saved = torch.load(tmp_path / "acrl" / "checkpoint-2" / STATE_FILE, weights_only=True)
    assert saved["algorithm.correction"]["tau"] == rec.inner.tau
    _, rec, logs, moved = run_steps(tmp_path / "ais", ["algorithm/correction=ais"], steps=1)
    assert moved and 0 < logs[0]["rlpost/correction/lam"] < 1
    assert 0 < logs[0]["rlpost/correction/reliability"] <= 1


def test_acrl_with_fp8_rollouts_tightens_the_gate_until_it_drops_tokens(tmp_path):
    """The fake-FP8 rollout copy's mismatch (tiny model: ~0.003-0.004 per token) lies above a band that the bf16
    copy's (~0.0007) lies below, so the same controller tightens with fp8 rollouts and relaxes with bf16 ones."""
    band = ["algorithm.correction.band_low=0.001", "algorithm.correction.band_high=0.002"]
    ctrl = ["algorithm.correction.tau_init=0.05", "algorithm.correction.gain=1.0"]
    _, rec, logs, moved = run_steps(tmp_path / "fp8", ["algorithm/correction=acrl", *band, *ctrl], steps=3)
    assert rec.inner.cfg.rollout_precision == "fp8" and rec.inner.cfg.controlled == "admitted"  # the shipped node
    tau = 0.05
    for (x, weights), log in zip(rec.calls, logs):
        delta, m = (x.train_logps - x.behaviour_logps).abs() * x.mask, x.mask
        real = (delta.sum() / m.sum()).item()  # D_real = sum_t m_t |Delta_t| / sum_t m_t
        gate = (delta <= tau).float()  # g_t = 1[|Delta_t| <= tau], tau of the steps before
        admitted = (gate * delta).sum().item() / m.sum().item()  # D_adm = sum_t g_t |Delta_t| / sum_t m_t
        assert log["rlpost/correction/tau"] == pytest.approx(tau)
        assert torch.equal(weights, gate)
        assert log["rlpost/correction/real_discrepancy"] == pytest.approx(real)
        assert log["rlpost/correction/admitted_discrepancy"] == pytest.approx(admitted)
        assert real > 0.002 and admitted > 0.002  # above band_high: tighten, tau <- tau * exp(-1)
        gated = 1 - (gate * m).sum().item() / m.sum().item()
        assert log["active/correction/acrl"] == pytest.approx(gated)  # the share of tokens the gate removed
        tau *= math.exp(-1.0)
    assert rec.inner.tau == pytest.approx(0.05 * math.exp(-3))  # 0.05 -> 0.0184 -> 0.0068 -> 0.0025
    # by step 3 tau (0.0068) is below the largest fp8 |Delta| (~0.01): the gate removes tokens
    assert logs[2]["active/correction/acrl"] > 0 and logs[2]["rlpost/correction/gated_fraction"] > 0
    assert moved
    # the bf16 copy on the same band: its mismatch is below band_low, tau <- tau * exp(+1), nothing gated
    _, rec, logs, _ = run_steps(
        tmp_path / "bf16", ["algorithm/correction=acrl", "algorithm.correction.rollout_precision=bf16", *band, *ctrl]
    )
    assert [log["rlpost/correction/tau"] for log in logs] == pytest.approx([0.05, 0.05 * math.e])
    assert all(log["rlpost/correction/real_discrepancy"] < 0.001 for log in logs)
    assert all(log["active/correction/acrl"] == 0 for log in logs)
