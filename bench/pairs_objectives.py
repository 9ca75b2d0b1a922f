"""The pairs of ``bench/method_experiments.py`` for advantages, losses, regularizers, gradient
transforms, sampling and corrections."""

from __future__ import annotations

from method_pair import ACRL_BAND, Pair, batch_overrides


def pairs(steps: int) -> list[Pair]:
    batch = batch_overrides(steps)
    return [
        Pair(
            "or",
            "Output Reset (seed 000 #29): GRPO-OR vs GRPO, 2 passes per batch",
            ["recipe=grpo_or", *batch],
            ["recipe=default", "train.num_iterations=2", *batch],
            ["reward", "grad_norm", "or/overshoot_frac", "or/log_ratio_displacement", "or/log_ratio_abs_mean"],
        ),
        Pair(
            "tp",
            "Trusted projection (seed 004 #10) vs GRPO + direction monitor, hackable reward",
            ["recipe=trusted_projection", *batch],
            ["recipe=trusted_projection", "algorithm/grad=[direction_monitor]", *batch],
            [
                "rewards/math_answer/mean",
                "rewards/format/mean",
                "grad/direction/change_mean",
                "grad/projection/kept_norm_ratio",
                "completions/mean_length",
            ],
            ["eval/accuracy", "eval/format"],
        ),
        Pair(
            "air",
            "AIR (seed 004 #14) vs GRPO on the bundled intents",
            ["recipe=air", f"train.steps={steps}"],
            ["recipe=air", "algorithm/regularizers=[]", f"train.steps={steps}"],
            ["reward", "air/gap", "air/term_abs", "grad_norm"],
            ["eval/accuracy", "eval/accuracy/anchor", "eval/accuracy/open"],
        ),
        Pair(
            "gepo",
            "GEPO (seed 000 #30) vs GRPO",
            ["recipe=gepo", *batch],
            ["recipe=default", *batch],
            ["reward", "entropy", "rlpost/gepo/attenuated_frac", "rlpost/gepo/group_entropy_mean"],
        ),
        Pair(
            "dapo",
            "DAPO dynamic sampling with refill (seed 000 #23, up to 2 extra rounds) vs mask-only (the previous behaviour)",
            ["algorithm=dapo", "algorithm.max_refill_rounds=2", *batch],
            ["algorithm=dapo", "algorithm.max_refill_rounds=0", *batch],
            [
                "reward",
                "dynamic_sampling/kept_fraction",
                "dynamic_sampling/rounds",
                "dynamic_sampling/groups_drawn",
                "dynamic_sampling/effective_groups",
                "dynamic_sampling/kept_fraction_after_refill",
            ],
            baseline_label="dapo, mask only",
        ),
        Pair(
            "acrl",
            "ACRL (seed 000 #18) controlling the real bf16-rollout mismatch vs the admitted one (the previous "
            "behaviour), band [5e-3, 2e-2]: the real mismatch sits above it, the admitted one can be brought into it",
            ["algorithm/correction=acrl", *ACRL_BAND, *batch],
            ["algorithm/correction=acrl", "algorithm.correction.controlled=admitted", *ACRL_BAND, *batch],
            [
                "reward",
                "entropy",
                "correction/tau",
                "correction/real_discrepancy",
                "correction/admitted_discrepancy",
                "correction/gated_fraction",
            ],
            baseline_label="acrl, admitted",
        ),
        Pair(
            "opd",
            "OPD (seed 000 #1, #27) with Qwen2.5-Coder-0.5B as the teacher (another tokenizer, aligned by "
            "characters) vs SmolLM2-135M, the student's own model (the previous default)",
            ["algorithm=opd", *batch],
            ["algorithm=opd", "algorithm.loss.teacher_model=smollm2-135m", *batch],
            ["reward", "opd/reverse_kl", "opd/teacher_logp", "opd/student_logp"],
            baseline_label="opd, SmolLM2 teacher",
        ),
        Pair(
            "structpo",
            "StructPO (seed 000 #10): struct-aware credit with refinement-guided rollouts vs struct-aware credit alone",
            ["recipe=structpo", *batch],
            ["recipe=structpo", "algorithm/rollout=none", *batch],
            [
                "reward",
                "rewards/math_answer/mean",
                "rewards/format/mean",
                "rollout/struct_refine/improved_frac",
                "rollout/struct_refine/draft_reward",
                "segments/local_token_frac",
            ],
            baseline_label="segments only",
        ),
        Pair(
            "ed_idpo",
            "ED-iDPO (seed 004 #30): iterative DPO with the exploration term (alpha 0.05) vs plain iterative DPO "
            "(alpha 0), 5-step rounds",
            ["recipe=ed_idpo", *batch],
            ["recipe=ed_idpo", "algorithm.advantage.alpha=0", *batch],
            ["reward", "entropy", "dpo/loss", "dpo/accuracy", "dpo/pair_frac", "completions/mean_length"],
            baseline_label="idpo",
        ),
    ]
