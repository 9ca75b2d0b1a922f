"""rlpost's components reproduce plain TRL GRPOTrainer exactly on the same model, data, seed, batch.

Same generations, and the same loss, grad norm and mean token entropy at every step to 1e-5 relative with TRL's
computation (``train.logprob_head=trl train.cpu_matmul=aten``), and to 1e-4 with rlpost's CPU defaults
(compact head, oneDNN matmuls, packed rows: fp32 sums in another order, rlpost/logprobs/head.py, rlpost/generation/onednn.py). The reward is a
deterministic hash of the completion text, so groups have variance and the loss is not trivially 0;
lr=1e-3 makes later steps depend on earlier updates, and micro_batch_size=4 with 8 completions per
step exercises gradient accumulation (2 micro-batches) in every aggregation's normalizer.
The reference is GRPOTrainer with the case's ``loss_type``, or a TRL subclass that overrides the loss
(``TRL_TRAINERS``: GMPO's). The cases of losses that differ from GRPO only off-policy run two passes
over each generation batch (``num_iterations=2``), so their step 2 has ratios != 1.
Each case prints its largest difference (``pytest -s``).

Beyond the loss types, TRL's own options (issue 49): the entropy bonus (``entropy_coef``: rlpost's
``entropy`` regularizer with ``reduce: token_mean``), its adaptive schedule over the 3 steps (the gate is
closed in step 1, the coefficient grows and hits ``entropy_coef_max``; the applied coefficients are
compared with TRL's logged ``entropy_coef``), ``top_entropy_quantile`` (rlpost's ``top_entropy``), alone
and with the adaptive bonus, both ``multi_objective_aggregation`` modes on two reward terms of different
scales and weights, and ``loss_type="bnpo"`` (``local-token-mean``). The tiny model's completions all reach
the length limit, so in ``entropy_bonus`` TRL's token-mean bonus equals the policy-reduced one; in
``top_entropy_adaptive`` the selection leaves unequal token counts, which tells the two reductions apart.
"""

import math

import pytest
from trl import GRPOConfig, GRPOTrainer
from trl.experimental.gmpo import GMPOConfig, GMPOTrainer

from support.trainer import make_run, step_logs, train_plain_trl, train_rlpost

OFF_POLICY = ["train.num_iterations=2"]
ENTROPY = "algorithm.regularizers.entropy"
ADAPTIVE = [f"{ENTROPY}.{k}={v}" for k, v in (("adaptive", "true"), ("coef", 0.01), ("coef_delta", 0.05))]
ADAPTIVE += [f"{ENTROPY}.coef_max=0.08", f"{ENTROPY}.target=100.0"]  # the tiny model's entropy is ~10.8 nats
TRL_ADAPTIVE = dict(
    use_adaptive_entropy=True, entropy_coef=0.01, entropy_coef_delta=0.05, entropy_coef_max=0.08, entropy_target=100.0
)
TWO_TERMS = (  # two reward terms of different scales ([0, 1) and [0, 3)), weighted 1 and 0.5
    "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}},"
    "{name: callable, weight: 0.5, params: {path: 'support.rewards:text_hash_reward_b'}}]"
)

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
    # ---- TRL 1.16's entropy options and multi-objective aggregation (issue 49)
    "entropy_bonus": (
        ["algorithm/regularizers=[entropy]", f"{ENTROPY}.reduce=token_mean", f"{ENTROPY}.coef=0.05"],
        dict(loss_type="grpo", entropy_coef=0.05),
    ),
    "entropy_adaptive": (  # coef 0.01 -> gate closed in step 1 -> 0.06 -> 0.08 (capped) as entropy < target
        ["algorithm/regularizers=[entropy]", f"{ENTROPY}.reduce=token_mean", *ADAPTIVE],
        dict(loss_type="grpo", **TRL_ADAPTIVE),
    ),
    "top_entropy": (
        ["algorithm/regularizers=[top_entropy]", "algorithm.regularizers.top_entropy.quantile=0.2"],
        dict(loss_type="grpo", top_entropy_quantile=0.2),
    ),
    "top_entropy_adaptive": (  # the bonus and the controller on the selected tokens, under token-mean (dapo)
        [
            "algorithm/regularizers=[top_entropy,entropy]",
            "algorithm.regularizers.top_entropy.quantile=0.5",
            f"{ENTROPY}.reduce=token_mean",
            *ADAPTIVE,
            "algorithm.aggregation=token-mean",
        ],
        dict(loss_type="dapo", top_entropy_quantile=0.5, **TRL_ADAPTIVE),
    ),
    "sum_then_normalize": ([TWO_TERMS], dict(loss_type="grpo", reward_weights=[1.0, 0.5])),
    "normalize_then_sum": (
        [TWO_TERMS, "reward/combine=normalize_then_sum"],
        dict(loss_type="grpo", reward_weights=[1.0, 0.5], multi_objective_aggregation="normalize_then_sum"),
    ),
    "bnpo": (["algorithm.aggregation=local-token-mean"], dict(loss_type="bnpo")),
}  # fmt: skip
# cases whose TRL reference is another trainer than GRPOTrainer: (trainer class, its config class)
TRL_TRAINERS = {"gmpo": (GMPOTrainer, GMPOConfig)}


BUNDLES = ("grpo", "dr_grpo", "dapo", "gspo", "cispo", "sapo", "vespo", "luspo", "gmpo")  # other cases use grpo
KEYS = ("loss", "grad_norm", "entropy")


def _close(a: float, b: float, rel: float = 1e-5, floor: float = 1e-8) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=floor)


# The logged loss is a mean of per-token terms of size ~|A| (|A| * |log pi| ~ 10 for cispo and vespo, whose value
# contains log pi; |A| * |o| for luspo) that cancel to ~0 on-policy (ratio 1, zero-mean advantages), so its rounding
# error is relative to those terms, not to the cancelled sum: the loss is compared to `rel` of a term of size 0.1.
LOSS_TERM = 0.1


# trl: TRL's computation (its head, PyTorch's matmuls); fast: rlpost's CPU defaults (compact head, oneDNN)
FORWARD = {"trl": ["train.logprob_head=trl", "train.cpu_matmul=aten"], "fast": []}


# A token selection by entropy is a threshold on entropies that rlpost's fast forward computes ~1e-6 apart from TRL's,
# and the tiny random model's entropies all lie within ~1e-3 of 10.79 nats: the selected tokens (and so the
# updates) differ. Those cases run with TRL's computation only.
SELECTION_CASES = {"top_entropy", "top_entropy_adaptive"}
PARAMS = [
    (algorithm, forward, rel)
    for algorithm in CASES
    for forward, rel in (("trl", 1e-5), ("fast", 1e-4))
    if not (forward == "fast" and algorithm in SELECTION_CASES)
]


# Plain TRL does not depend on rlpost's forward (``FORWARD`` sets only rlpost's head and matmuls): each case's
# reference is trained once and compared with both of rlpost's forwards (half the suite's TRL runs).
_PLAIN: dict[str, GRPOTrainer] = {}


def plain_trl(algorithm: str, run, folder, trl_settings: dict) -> GRPOTrainer:
    if algorithm not in _PLAIN:
        trainer_class, config_class = TRL_TRAINERS.get(algorithm, (GRPOTrainer, GRPOConfig))
        _PLAIN[algorithm] = train_plain_trl(run, folder, trainer_class, config_class, **trl_settings)
    return _PLAIN[algorithm]


@pytest.mark.parametrize(("algorithm", "forward", "rel"), PARAMS)
def test_matches_plain_trl(algorithm, forward, rel, tmp_path):
    extra, trl_settings = CASES[algorithm]
    bundle = algorithm if algorithm in BUNDLES else "grpo"
    run = make_run([f"algorithm={bundle}", "train.micro_batch_size=4", *FORWARD[forward], *extra])
    assert run.plan.grad_accum == 2

    plain = plain_trl(algorithm, run, tmp_path / "trl", trl_settings)
    ours = train_rlpost(run, tmp_path / "rlpost")

    assert list(plain._logs["completion"]) == list(ours._logs["completion"]), "different generations"
    plain_logs, our_logs = step_logs(plain), step_logs(ours)
    assert len(plain_logs) == len(our_logs) == 3
    # On-policy GRPO losses are ~0 by construction (ratio 1, zero-mean advantages); the gradient is not.
    assert any(log["grad_norm"] > 1e-6 for log in plain_logs), "vacuous comparison: no gradient"
    for step, (p, o) in enumerate(zip(plain_logs, our_logs), start=1):
        assert _close(p["loss"], o["loss"], rel, rel * LOSS_TERM), (
            f"step {step} loss: TRL {p['loss']} vs rlpost {o['loss']}"
        )
        assert _close(p["grad_norm"], o["grad_norm"], rel), (
            f"step {step} grad_norm: TRL {p['grad_norm']} vs {o['grad_norm']}"
        )
        assert _close(p["entropy"], o["entropy"], rel), f"step {step} entropy: TRL {p['entropy']} vs {o['entropy']}"
    diffs = {key: max(abs(p[key] - o[key]) for p, o in zip(plain_logs, our_logs)) for key in KEYS}
    print(f"\n{algorithm}/{forward}: max abs diff vs TRL " + ", ".join(f"{k} {v:.3g}" for k, v in diffs.items()))
    if trl_settings.get("use_adaptive_entropy"):
        _check_adaptive_schedule(plain, ours, plain_logs, our_logs)
    if "top_entropy_quantile" in trl_settings:  # a real selection happened (not every token kept)
        assert all(0 < log["top_entropy/kept_frac"] < 1 for log in our_logs)


def _check_adaptive_schedule(plain, ours, plain_logs, our_logs) -> None:
    """TRL logs its coefficient after each step's update; rlpost logs the one each step applied (0 while the gate
    is closed): step k+1 applies what TRL logged at step k, and both controllers end in the same state."""
    trl_coefs = [log["entropy_coef"] for log in plain_logs]
    applied = [log["entropy/coef"] for log in our_logs]
    assert trl_coefs == pytest.approx([0.06, 0.08, 0.08]), trl_coefs  # +0.05 per step, capped at 0.08
    assert applied == pytest.approx([0.0, *trl_coefs[:-1]]), applied  # gate closed in step 1 (no entropy seen yet)
    controller = dict(ours.run.algorithm.regularizers)["entropy"]
    assert controller.coef == pytest.approx(plain.entropy_coef)
    assert controller.last_entropy == pytest.approx(plain._last_world_entropy, rel=1e-5)
