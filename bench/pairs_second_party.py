"""The pairs of ``bench/method_experiments.py`` for methods with a second party in the loop (issue 19):
search, simulator, critic, bandit, frozen worker."""

from __future__ import annotations

from method_pair import GRPO_2X4, Pair, batch_overrides


def pairs(steps: int) -> list[Pair]:
    batch = batch_overrides(steps)
    return [
        Pair(
            "cusearch",
            "CuSearch (seed 004 #27): SDGA gives an 8-episode update budget to the deepest of 16 sampled searches vs "
            "GRPO on 8 uniformly sampled episodes, search environment",
            ["recipe=cusearch", f"train.steps={steps}"],
            ["recipe=search_tool", f"train.steps={steps}"],
            [
                "rlpost/reward",
                "env/tool_calls",
                "rlpost/select/depth_mean",
                "rlpost/select/kept_depth_mean",
                "step_time",
            ],
            eval_keys=["eval/accuracy", "eval/env/tool_use"],
            extra={"sdga_phase": ["recipe=cusearch", "algorithm/select=sdga_phase", f"train.steps={steps}"]},
        ),
        Pair(
            "ditto",
            "DITTO (seed 004 #16): a frozen Qwen2.5-Coder-0.5B writes feedback on 2 rollouts per group, the "
            "feedback-conditioned rewrites join the group vs GRPO, basic_arithmetic",
            ["recipe=ditto", *batch],
            ["recipe=default", *batch],
            [
                "rlpost/reward",
                "rlpost/rollout/feedback_refine/written_frac",
                "rlpost/rollout/feedback_refine/feedback_chars_mean",
                "rlpost/rollout/feedback_refine/kept_frac",
                "step_time",
            ],
        ),
        Pair(
            "calibrated_irl",
            "Calibrated interactive RL (seed 004 #5): GRPO against the simulator aligned to the logged dialogues vs "
            "against the raw SmolLM2 simulator, booking task, held-out episodes with the scripted travellers",
            ["recipe=calibrated_irl", f"train.steps={steps}", f"train.save_steps={steps}"],
            [
                "recipe=calibrated_irl",
                "data.env.user_model=smollm2-135m",
                "~data.env.user_overrides.path",
                f"train.steps={steps}",
                f"train.save_steps={steps}",
            ],
            ["rlpost/reward", "env/turns", "completions/mean_length", "step_time"],
            eval_keys=["eval/reward", "eval/accuracy", "eval/env/turns"],
            baseline_label="raw simulator",
        ),
        Pair(
            "rise_rl",
            "RISE-RL (seed 000 #6): privileged rollouts from repeatedly missed rubric items, trained by the "
            "separate auxiliary objective until it fades vs GRPO on the same rubric reward",
            ["recipe=rise_rl", *batch],
            ["recipe=rise_rl", "algorithm/rollout=none", *batch],
            [
                "rlpost/reward",
                "rlpost/rollout/rubric_guidance/repeated_criteria_per_group",
                "rlpost/rollout/rubric_guidance/kept_frac",
                "rlpost/rollout/rubric_guidance/benefit_ema",
                "rlpost/rollout/rubric_guidance/aux_on",
                "rlpost/rollout/rubric_guidance/aux_nll",
                "step_time",
            ],
            eval_keys=["eval/math_answer", "eval/reward"],
        ),
        Pair(
            "safectrl",
            "SafeCtrl-RL (seed 004 #6): a SmolLM2 controller picks prompt-adjustment strategies for a frozen SmolLM2, "
            "SmolLM2 rubric judge, bundled safety prompts; vs the fixed safety system prompt (no controller)",
            ["recipe=safectrl", f"train.steps={steps}", f"train.save_steps={steps}"],
            # the fixed strategy ignores the policy's text, so training cannot change it: one step gives its eval
            ["recipe=safectrl", "data.env.fixed_strategy=safety", "train.steps=1", "train.save_steps=1"],
            [
                "rlpost/reward",
                "env/format_failures",
                "env/score_before",
                "env/score_after",
                "env/regenerations",
                "env/pick/safety",
                "env/pick/stop",
            ],
            eval_keys=[
                "eval/reward",
                "eval/reward/harmful",
                "eval/reward/benign",
                "eval/env/score_after",
                "eval/env/format_failures",
            ],  # fmt: skip
            baseline_label="always safety",
        ),
        Pair(
            "skiller",
            "SKILLER (seed 000 #2): skill documents for a frozen SmolLM2 executor, trained on its success; before -> "
            "after vs the no-skill executor on the same held-out tasks",
            ["recipe=skiller", f"train.steps={steps}", f"train.save_steps={steps}"],
            None,  # the baselines are in the run: the untrained policy's documents (before) and no document
            ["reward", "env/executor_success", "env/no_skill_success", "env/skill_gain", "env/doc_chars", "step_time"],
            eval_keys=["eval/reward", "eval/env/no_skill_success", "eval/env/skill_gain", "eval/env/doc_chars"],
        ),
        Pair(
            "rail",
            "RAIL (seed 000 #8): a LinUCB bandit picks none / hint / critique / draft / extra samples per group after a "
            "2-rollout probe (4 shadow steps, then live) vs GRPO, basic_arithmetic",
            ["recipe=rail", *batch],
            ["recipe=default", *batch],
            [
                "rlpost/reward",
                "rlpost/rollout/intervention_bandit/probe_reward",
                *[
                    f"rlpost/rollout/intervention_bandit/pick/{a}"
                    for a in ("none", "hint", "critique", "draft", "extra")
                ],
                *[f"rlpost/intervention_bandit/gain_avg/{a}" for a in ("none", "hint", "critique", "draft", "extra")],
                "step_time",
            ],
        ),
        Pair(
            "icrl",
            "ICRL (seed 004 #23): the policy critiques its own attempt and refines it (2 critiques + 2 refinements per "
            "group of 6) vs GRPO (4 per group), the same 2 prompts per step; held-out accuracy without critique",
            ["recipe=icrl", "eval.size=50", f"train.steps={steps}"],
            ["recipe=default", *GRPO_2X4, "eval.size=50", f"train.steps={steps}"],
            [
                "reward",
                "rlpost/self_critique/attempt_reward_mean",
                "rlpost/self_critique/refined_reward_mean",
                "rlpost/self_critique/critic_reward_mean",
                "rlpost/self_critique/improvement_rate",
                "rlpost/rollout/self_critique/ratio_mean",
                "rlpost/rollout/self_critique/ratio_clip_frac",
            ],
        ),
        Pair(
            "lrpo",
            "LRPO (seed 004 #9): each group split between 2 of 5 response languages picked by an EXP3 router, "
            "best-vs-worst language preference term vs GRPO, basic_arithmetic",
            ["recipe=lrpo", *batch],
            ["recipe=default", *batch],
            [
                "reward",
                *(
                    f"rlpost/rollout/language_routed/p/{n}"
                    for n in ("English", "French", "Spanish", "German", "Chinese")
                ),
                "rlpost/rollout/language_routed/pref_frac",
                "rlpost/rollout/language_routed/pref_loss",
                "step_time",
            ],
        ),
        Pair(
            "la_rl",
            "LA-RL (seed 000 #19): predict -> diagnose (error labels) -> revise episodes, rewarded for the final answer, "
            "the first pass and format, vs single-turn GRPO on the same prompts",
            ["recipe=la_rl", *batch],
            ["recipe=default", *batch],
            [
                "rlpost/reward",
                "env/first_correct",
                "env/final_correct",
                "env/format_valid",
                "env/diagnosis_valid",
                "env/changed",
                "step_time",
            ],
            eval_keys=["eval/accuracy", "eval/env/first_correct", "eval/env/format_valid", "eval/env/changed"],
        ),
        Pair(
            "hindsearch",
            "HindSearch (seed 000 #12): critique-guided retries distilled into the plain-prompt policy (out of the "
            "GRPO group) vs GRPO, basic_arithmetic, SmolLM2 critique writer",
            ["recipe=hindsearch", f"train.steps={steps}"],
            ["recipe=default", *GRPO_2X4, f"train.steps={steps}"],
            [
                "rlpost/reward",
                "rlpost/rollout/hindsight_critique/failed_frac",
                "rlpost/rollout/hindsight_critique/critique_chars_mean",
                "rlpost/rollout/hindsight_critique/gold_in_critique_frac",
                "rlpost/rollout/hindsight_critique/retry_reward",
                "rlpost/rollout/hindsight_critique/opd_kl",
                "step_time",
            ],
            extra={"no_gold": ["recipe=hindsearch", "algorithm.rollout.judge_sees_gold=false", f"train.steps={steps}"]},
        ),
        Pair(
            "prompter",
            "Prompter policies (seed 004 #21): a contrastive experience buffer (best/worst past instructions with "
            "rewards and SmolLM2 critiques) conditions 2 of 4 rollouts, trained under the plain prompt, vs GRPO; "
            "frozen SmolLM2 worker",
            ["recipe=prompter", f"train.steps={steps}"],
            ["recipe=prompter", "algorithm/rollout=none", f"train.steps={steps}"],
            [
                "rlpost/reward",
                "rlpost/experience_buffer/conditioned_reward_mean",
                "rlpost/experience_buffer/plain_reward_mean",
                "rlpost/experience_buffer/buffer_size",
                "rlpost/experience_buffer/critique_chars_mean",
                "step_time",
            ],
        ),
    ]
