"""rlpost's components reproduce plain TRL GRPOTrainer exactly on the same model, data, seed, batch.

Same generations, and the same loss and grad norm at every step to 1e-5 relative with TRL's
computation (``train.logprob_head=trl train.cpu_matmul=aten``), and to 1e-4 with rlpost's CPU defaults
(compact head, oneDNN matmuls, packed rows: fp32 sums in another order, rlpost/logprobs/head.py, rlpost/generation/onednn.py). The reward is a
deterministic hash of the completion text, so groups have variance and the loss is not trivially 0;
lr=1e-3 makes later steps depend on earlier updates, and micro_batch_size=4 with 8 completions per
step exercises gradient accumulation (2 micro-batches) in every aggregation's normalizer.
The reference is GRPOTrainer with the case's ``loss_type``, or a TRL subclass that overrides the loss
(``TRL_TRAINERS``: GMPO's). The cases of losses that differ from GRPO only off-policy run two passes
over each generation batch (``num_iterations=2``), so their step 2 has ratios != 1.
Each case prints its largest difference (``pytest -s``).
"""

import math

import pytest
from trl import GRPOConfig, GRPOTrainer
from trl.experimental.gmpo import GMPOConfig, GMPOTrainer

from trainer_utils import make_run, step_logs, train_plain_trl, train_rlpost

OFF_POLICY = ["train.num_iterations=2"]
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
    # off-policy (num_iterations=2: the second pass over each generation batch has ratios != 1), so the
    # gates, kernels and log-space clips are exercised and not only their value at r = 1
    "sapo": (OFF_POLICY, dict(loss_type="sapo", sapo_temperature_pos=1.0, sapo_temperature_neg=1.05)),
    "vespo": (OFF_POLICY, dict(loss_type="vespo", vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0,
                               vespo_lambda_neg=2.0)),
    "luspo": (OFF_POLICY, dict(loss_type="luspo", importance_sampling_level="sequence", epsilon=2e-3,
                               epsilon_high=2.5e-3)),
    "gmpo": (OFF_POLICY, dict(epsilon=0.4, epsilon_high=0.4)),  # trl.experimental.gmpo (TRL_TRAINERS)
}  # fmt: skip
# cases whose TRL reference is another trainer than GRPOTrainer: (trainer class, its config class)
TRL_TRAINERS = {"gmpo": (GMPOTrainer, GMPOConfig)}


def _close(a: float, b: float, rel: float = 1e-5, floor: float = 1e-8) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=floor)


# The logged loss is a mean of per-token terms of size ~|A| (|A| * |log pi| ~ 10 for cispo and vespo, whose value
# contains log pi; |A| * |o| for luspo) that cancel to ~0 on-policy (ratio 1, zero-mean advantages), so its rounding
# error is relative to those terms, not to the cancelled sum: the loss is compared to `rel` of a term of size 0.1.
LOSS_TERM = 0.1


# trl: TRL's computation (its head, PyTorch's matmuls); fast: rlpost's CPU defaults (compact head, oneDNN)
FORWARD = {"trl": ["train.logprob_head=trl", "train.cpu_matmul=aten"], "fast": []}


@pytest.mark.parametrize(("forward", "rel"), [("trl", 1e-5), ("fast", 1e-4)])
@pytest.mark.parametrize("algorithm", list(CASES))
def test_matches_plain_trl(algorithm, forward, rel, tmp_path):
    extra, trl_settings = CASES[algorithm]
    run = make_run([f"algorithm={algorithm}", "train.micro_batch_size=4", *FORWARD[forward], *extra])
    assert run.plan.grad_accum == 2

    trainer_class, config_class = TRL_TRAINERS.get(algorithm, (GRPOTrainer, GRPOConfig))
    plain = train_plain_trl(run, tmp_path / "trl", trainer_class, config_class, **trl_settings)
    ours = train_rlpost(run, tmp_path / "rlpost")

    assert list(plain._logs["completion"]) == list(ours._logs["completion"]), "different generations"
    plain_logs, our_logs = step_logs(plain), step_logs(ours)
    assert len(plain_logs) == len(our_logs) == 3
    # On-policy GRPO losses are ~0 by construction (ratio 1, zero-mean advantages); the gradient is not.
    assert any(log["grad_norm"] > 1e-6 for log in plain_logs), "vacuous comparison: no gradient"
    diffs = {key: max(abs(p[key] - o[key]) for p, o in zip(plain_logs, our_logs)) for key in ("loss", "grad_norm")}
    print(f"{algorithm} ({forward}): max |TRL - rlpost| loss {diffs['loss']:.3g}, grad_norm {diffs['grad_norm']:.3g}")
    for step, (p, o) in enumerate(zip(plain_logs, our_logs), start=1):
        assert _close(p["loss"], o["loss"], rel, rel * LOSS_TERM), (
            f"step {step} loss: TRL {p['loss']} vs rlpost {o['loss']}"
        )
        assert _close(p["grad_norm"], o["grad_norm"], rel), (
            f"step {step} grad_norm: TRL {p['grad_norm']} vs {o['grad_norm']}"
        )
