"""train.staleness in the real trainer (tiny random Llama, 2-4 steps; rlpost/trainer/staleness.py):

- step t trains exactly the rows generated k steps earlier (the k prefill batches first), ``staleness/lag`` is
  min(k, t - 1), and the behaviour log-probs never reach the loss batch;
- the correction sees the generating policy's log-probs: weights exactly 1 at lag 0, not 1 from lag 1 on, and the
  mismatch metrics with them; the loss's ratio is 1 (anchor ``current``) or pi_theta / mu (anchor ``behaviour``);
- the same seed twice gives the same metrics and the same trained rows, bit for bit;
- ``train.staleness=0`` gives exactly the metrics of a run without the key.
Resume = uninterrupted: tests/integration/test_resume.py.
"""

from __future__ import annotations

import torch

from support.runs import NOT_COMPARED
from support.trainer import make_run, rlpost_trainer, step_logs


class Recorder:
    """A run's component, recording each call's input and output (delegates everything else)."""

    def __init__(self, component):
        self.inner = component
        self.calls = []

    def __call__(self, x):
        out = self.inner(x)
        self.calls.append((x, out))
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def rows(batch: dict) -> list[tuple[int, ...]]:
    """The batch's prompt + completion token rows, sorted (TRL shuffles a generation batch before the loss)."""
    return sorted(map(tuple, torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1).tolist()))


def run_stale(tmp_path, overrides: list[str]):
    """Train; record every generated batch (first rounds), every trained micro-batch, the correction and loss calls."""
    run = make_run(overrides)
    correction, loss = Recorder(run.algorithm.correction), Recorder(run.algorithm.loss)
    run.algorithm.correction, run.algorithm.loss = correction, loss
    trainer = rlpost_trainer(run, tmp_path)
    generated, trained = [], []
    score, compute = trainer._score_generation_batch, trainer._compute_loss

    def scored(inputs, first):
        output = score(inputs, first)
        if first and trainer.model.training:
            generated.append({key: value for key, value in output.items() if isinstance(value, torch.Tensor)})
        return output

    def loss_of(model, inputs):
        trained.append(dict(inputs))
        return compute(model, inputs)

    trainer._score_generation_batch, trainer._compute_loss = scored, loss_of
    trainer.train()
    return trainer, generated, trained, correction.calls, loss.calls


def comparable(logs: list[dict]) -> list[dict]:
    return [{k: v for k, v in log.items() if k not in NOT_COMPARED} for log in logs]


TIS_STALE = ["train.steps=4", "algorithm/correction=tis", "algorithm.correction.rollout_precision=null"]


def test_each_step_trains_the_batch_generated_k_steps_earlier_and_the_correction_sees_the_lag(tmp_path):
    trainer, generated, trained, corrections, losses = run_stale(tmp_path / "a", [*TIS_STALE, "train.staleness=2"])
    logs = step_logs(trainer)
    assert len(generated) == 2 + 4 and len(trained) == 4  # 2 prefill batches, then one per step
    for t, batch in enumerate(trained, start=1):  # generation batch t - 1 (0-based, prefill first) at step t
        assert rows(batch) == rows(generated[t - 1])
        assert not any(key.startswith("rlpost_behaviour") for key in batch)
    assert [log["staleness/lag"] for log in logs] == [0.0, 1.0, 2.0, 2.0]
    # the correction runs once per trained batch, on pi (now) against mu (the generating policy)
    assert len(corrections) == 4
    (x1, (w1, _)), *later = corrections
    assert torch.equal(x1.train_logps, x1.behaviour_logps) and torch.equal(w1, torch.ones_like(w1))  # lag 0
    assert logs[0]["rlpost/mismatch/logp_abs_diff"] == 0.0 and logs[0]["rlpost/correction/weight_mean"] == 1.0
    for (x, (weights, _)), log in zip(later, logs[1:]):
        counted = weights[x.mask.bool()]
        assert not torch.equal(x.train_logps, x.behaviour_logps) and not torch.equal(counted, torch.ones_like(counted))
        assert log["rlpost/mismatch/logp_abs_diff"] > 0 and log["rlpost/mismatch/kl"] > 0
        assert log["rlpost/correction/weight_min"] < 1.0 < log["rlpost/correction/weight_max"]
    # anchor current: the PPO ratio is taken against the training weights themselves (exactly 1 in value)
    for x, _ in losses:
        assert torch.equal(x.old_logps, x.logps.detach())

    # the same seed again: bit for bit the same metrics and the same trained rows
    again, _, trained_again, _, _ = run_stale(tmp_path / "b", [*TIS_STALE, "train.staleness=2"])
    assert comparable(step_logs(again)) == comparable(logs)
    for a, b in zip(trained, trained_again):
        assert a.keys() == b.keys()
        for key, value in a.items():
            assert not isinstance(value, torch.Tensor) or torch.equal(value, b[key]), key


def test_anchor_behaviour_takes_the_ratio_against_the_generating_policy(tmp_path):
    overrides = ["train.steps=2", "train.staleness=1", "train.staleness_anchor=behaviour"]
    trainer, generated, trained, _, losses = run_stale(tmp_path, overrides)
    logs = step_logs(trainer)
    assert [log["staleness/lag"] for log in logs] == [0.0, 1.0]
    (x1, _), (x2, _) = losses
    mask = x2.mask.bool()
    assert torch.allclose(x1.old_logps[x1.mask.bool()], x1.logps.detach()[x1.mask.bool()], atol=1e-5)  # lag 0
    assert (x2.old_logps[mask] - x2.logps.detach()[mask]).abs().max() > 1e-3  # pi_theta / mu != 1 at lag 1
    assert "old_per_token_logps" in trained[1]
    assert logs[1]["rlpost/mismatch/logp_abs_diff"] > 0  # measured whatever the anchor
    assert not any(key.startswith("rlpost/correction/") for key in logs[1])  # correction none: nothing weighed


def test_staleness_zero_is_the_training_without_the_key(tmp_path):
    base = ["train.steps=2", "algorithm.correction.rollout_precision=null"]
    plain, _, _, _, _ = run_stale(tmp_path / "plain", base)
    zero, _, _, _, _ = run_stale(tmp_path / "zero", [*base, "train.staleness=0"])
    assert zero.stale_batches is None and plain.stale_batches is None
    logs = comparable(step_logs(plain))
    assert comparable(step_logs(zero)) == logs and len(logs) == 2
    assert not any(key.startswith(("staleness/", "rlpost/mismatch/")) for log in logs for key in log)
