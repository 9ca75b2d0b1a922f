"""rlpost's components reproduce plain TRL GRPOTrainer exactly on the same model, data, seed, batch.

Same generations, and the same loss and grad norm at every step to 1e-5 relative with TRL's
computation (``train.logprob_head=trl train.cpu_matmul=aten``), and to 1e-4 with rlpost's CPU defaults
(compact head, oneDNN matmuls, packed rows: fp32 sums in another order, rlpost/logprobs/head.py, rlpost/generation/onednn.py). The reward is a
deterministic hash of the completion text, so groups have variance and the loss is not trivially 0;
lr=1e-3 makes later steps depend on earlier updates, and micro_batch_size=4 with 8 completions per
step exercises gradient accumulation (2 micro-batches) in every aggregation's normalizer.
"""

import math

import pytest

from trainer_utils import make_run, step_logs, train_plain_trl, train_rlpost

CASES = {
    # rlpost bundle (+ overrides that switch off what TRL's loss type lacks) -> TRL settings
    "grpo": ([], dict(loss_type="grpo", scale_rewards="group")),
    "dr_grpo": ([], dict(loss_type="dr_grpo", scale_rewards="none")),
    "dapo": (
        ["algorithm.dynamic_sampling=false", "algorithm.overlong.soft_penalty=false"],
        dict(loss_type="dapo", scale_rewards="group", epsilon_high=0.28),
    ),
    "gspo": ([], dict(loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4)),
    "cispo": ([], dict(loss_type="cispo", epsilon_high=5.0)),
}


def _close(a: float, b: float, rel: float = 1e-5) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-8)


# trl: TRL's computation (its head, PyTorch's matmuls); fast: rlpost's CPU defaults (compact head, oneDNN)
FORWARD = {"trl": ["train.logprob_head=trl", "train.cpu_matmul=aten"], "fast": []}


@pytest.mark.parametrize(("forward", "rel"), [("trl", 1e-5), ("fast", 1e-4)])
@pytest.mark.parametrize("algorithm", list(CASES))
def test_matches_plain_trl(algorithm, forward, rel, tmp_path):
    extra, trl_settings = CASES[algorithm]
    run = make_run([f"algorithm={algorithm}", "train.micro_batch_size=4", *FORWARD[forward], *extra])
    assert run.plan.grad_accum == 2

    plain = train_plain_trl(run, tmp_path / "trl", **trl_settings)
    ours = train_rlpost(run, tmp_path / "rlpost")

    assert list(plain._logs["completion"]) == list(ours._logs["completion"]), "different generations"
    plain_logs, our_logs = step_logs(plain), step_logs(ours)
    assert len(plain_logs) == len(our_logs) == 3
    # On-policy GRPO losses are ~0 by construction (ratio 1, zero-mean advantages); the gradient is not.
    assert any(log["grad_norm"] > 1e-6 for log in plain_logs), "vacuous comparison: no gradient"
    for step, (p, o) in enumerate(zip(plain_logs, our_logs), start=1):
        assert _close(p["loss"], o["loss"], rel), f"step {step} loss: TRL {p['loss']} vs rlpost {o['loss']}"
        assert _close(p["grad_norm"], o["grad_norm"], rel), (
            f"step {step} grad_norm: TRL {p['grad_norm']} vs {o['grad_norm']}"
        )
