"""The adaptive entropy coefficient and the adaptive KL coefficient through the real trainer: they move once per
optimizer step, are written into every checkpoint, and a run resumed from a checkpoint continues exactly
as the uninterrupted run (the same step-3 loss, grad norm and coefficients)."""

import math

import pytest
import torch

from rlpost.runs.state import STATE_FILE

from support.trainer import make_run, rlpost_trainer, step_logs, train_rlpost

ENTROPY = "algorithm.regularizers.entropy"
KL = "algorithm.regularizers.adaptive_kl"
CONTROLLERS = [
    "algorithm/regularizers=[entropy,adaptive_kl]",
    f"{ENTROPY}.reduce=token_mean",
    f"{ENTROPY}.adaptive=true",
    f"{ENTROPY}.coef=0.01",
    f"{ENTROPY}.coef_delta=0.05",
    f"{ENTROPY}.target=100.0",  # the tiny model's entropy (~10.8 nats) is below it: the coefficient grows
    f"{KL}.coef=0.05",
    f"{KL}.target=1.0e-6",
    f"{KL}.horizon=8",  # 8 completions per step: beta moves by the whole clipped error each step
    "train.micro_batch_size=4",  # 2 micro-batches per optimizer step: one update per step, not per micro-batch
    "train.save_steps=1",
]


def test_controllers_move_per_step_and_resume_exactly(tmp_path):
    run = make_run(CONTROLLERS)
    trainer = train_rlpost(run, tmp_path / "a")
    logs = step_logs(trainer)
    # entropy: the gate is closed in step 1, then 0.01 + 0.05 = 0.06 and 0.11 are applied (mean over 2 micro-batches)
    assert [log["entropy/coef"] for log in logs] == pytest.approx([0.0, 0.06, 0.11])
    # KL: step 1 is on the reference (KL 0): e = -1 clipped to -0.2 -> beta 0.05 * 0.8 = 0.04 in step 2; then the
    # policy has moved (KL > 1e-6): e = +0.2 -> 0.048 in step 3
    assert [log["adaptive_kl/coef"] for log in logs] == pytest.approx([0.05, 0.04, 0.048])
    entropy, kl = (dict(trainer.run.algorithm.regularizers)[name] for name in ("entropy", "adaptive_kl"))
    assert entropy.coef == pytest.approx(0.16) and kl.coef == pytest.approx(0.0576)

    saved = torch.load(tmp_path / "a" / "checkpoint-2" / STATE_FILE, weights_only=True)
    assert saved[ENTROPY]["coef"] == pytest.approx(0.11) and math.isfinite(saved[ENTROPY]["last_entropy"])
    assert saved[KL] == pytest.approx({"coef": 0.048})

    resumed = rlpost_trainer(make_run(CONTROLLERS), tmp_path / "a")
    resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-2"))
    again = step_logs(resumed)[-1]
    assert again["step"] == 3
    for key in ("loss", "grad_norm", "entropy", "entropy/coef", "adaptive_kl/coef", "adaptive_kl/kl"):
        assert again[key] == pytest.approx(logs[2][key], rel=1e-6), key
    entropy2, kl2 = (dict(resumed.run.algorithm.regularizers)[name] for name in ("entropy", "adaptive_kl"))
    assert (entropy2.coef, entropy2.last_entropy, kl2.coef) == pytest.approx(
        (entropy.coef, entropy.last_entropy, kl.coef)
    )
