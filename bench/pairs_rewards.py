"""The pairs of ``bench/method_experiments.py`` for rewards, judges and reward data: rubrics, IFEval,
market outcomes, personalization, factor mining, infilling, adapters."""

from __future__ import annotations

from method_pair import FULL_IFEVAL, MARKET_SET, QWEN_JUDGE, Pair, batch_overrides


def pairs(steps: int) -> list[Pair]:
    batch = batch_overrides(steps)
    return [
        Pair(
            "focal",
            "Focal Reward over the rubric's criteria (seed 004 #4) vs the rubric's weighted mean (the previous "
            "behaviour: focal saw one column), local SmolLM2 judge",
            ["reward=rubric", "reward.terms.0.params.columns=criteria", "reward/combine=focal", *batch],
            ["reward=rubric", "reward.terms.0.params.columns=criteria", "reward/combine=weighted_sum", *batch],
            [
                "reward",
                "rewards/rubric/final_number/mean",
                "rewards/rubric/correct/mean",
                "focal/weight/rubric/final_number",
                "focal/weight/rubric/correct",
            ],
            eval_keys=["eval/rubric/final_number", "eval/rubric/correct", "eval/reward"],
            baseline_label="weighted mean",
        ),
        Pair(
            "focal_qwen",
            "Focal Reward over the rubric's criteria (seed 004 #4) vs the rubric's weighted mean, Qwen2.5-Coder-0.5B "
            "as the judge",
            ["reward=rubric", "reward.terms.0.params.columns=criteria", "reward/combine=focal", QWEN_JUDGE, *batch],
            [
                "reward=rubric",
                "reward.terms.0.params.columns=criteria",
                "reward/combine=weighted_sum",
                QWEN_JUDGE,
                *batch,
            ],
            [
                "reward",
                "rewards/rubric/final_number/mean",
                "rewards/rubric/correct/mean",
                "focal/saturation/rubric/final_number",
                "focal/saturation/rubric/correct",
                "focal/weight/rubric/final_number",
                "focal/weight/rubric/correct",
            ],
            eval_keys=["eval/rubric/final_number", "eval/rubric/correct", "eval/reward"],
            baseline_label="weighted mean",
        ),
        Pair(
            "dynamic_rubric",
            "DynamicRubric (seed 000 #24): the co-evolving Qwen2.5-Coder-0.5B writer vs the same writer frozen, "
            "8 steps of 8 completions",
            ["recipe=dynamic_rubric"],
            ["recipe=dynamic_rubric", "reward.terms.0.params.co_evolve.enabled=false"],
            [
                "dynamic_rubric/writer/gap",
                "dynamic_rubric/writer_failed",
                "dynamic_rubric/items",
                "rewards/dynamic_rubric/std",
                "dynamic_rubric/writer/updates",
            ],
            eval_keys=["eval/math_answer", "eval/dynamic_rubric"],
            baseline_label="frozen writer",
            extra={
                "SmolLM2 writer, frozen, static fallback (previous)": [
                    "recipe=dynamic_rubric",
                    "reward.terms.0.params.writer.model.source=smollm2",
                    "reward.terms.0.params.co_evolve.enabled=false",
                    "+reward.terms.0.params.writer_prefix=''",
                    "+reward.terms.0.params.fallback_items=['The response answers the task correctly',"
                    "'The response is clear and concise']",
                ]
            },
        ),
        Pair(
            "ifeval",
            "RLVR for instruction following: data=ifeval_train, scored on the real 541 IFEval prompts",
            ["recipe=ifeval_train", f"train.steps={steps}", FULL_IFEVAL],
            None,
            [
                "rlpost/reward",  # the reward trained on (runs before the logging fix logged TRL's column sum as reward)
                "rewards/ifeval/prompt_strict/mean",
                "rewards/ifeval/instruction_strict/mean",
                "completions/mean_length",
            ],  # fmt: skip
            eval_keys=[
                f"eval/ifeval/ifeval/{c}"
                for c in ("prompt_strict", "prompt_loose", "instruction_strict", "instruction_loose")
            ],  # fmt: skip
        ),
        Pair(
            "finsmart",
            "FinSMART (seed 000 #15): the market-aligned trading reward on filtered news vs GRPO on the annotator's "
            "sentiment labels (market-agnostic), synthetic headlines",
            ["recipe=finsmart", f"train.steps={steps}", MARKET_SET],
            ["recipe=finsmart", "data/transform=none", "reward=exact_match", f"train.steps={steps}", MARKET_SET],
            [
                "rlpost/reward",
                "outcome_table/positive_frac",
                "outcome_table/neutral_frac",
                "outcome_table/negative_frac",
                "outcome_table/unparsed_frac",
            ],
            eval_keys=["eval/market/reward", "eval/market/accuracy"],
            baseline_label="grpo on annotated labels",
            extra={
                "outcome_table without the market filter": [
                    "recipe=finsmart",
                    "data/transform=none",
                    f"train.steps={steps}",
                    MARKET_SET,
                ]
            },
        ),
        Pair(
            "iap",
            "IAP (seed 004 #26): the intent / think / answer schema with format + personalization-judge rewards vs "
            "GRPO on the personalization judge alone (no schema), local SmolLM2 judge",
            ["recipe=iap", f"train.steps={steps}"],
            [
                "recipe=iap",
                f"train.steps={steps}",
                "data.template='{question}'",  # no schema asked for
                "reward.terms.0.weight=0",  # format: logged, not trained on
                "reward.terms.1.params.answer_tag=null",  # the judge reads the whole response
            ],
            ["rlpost/reward", "rewards/format/mean", "rewards/rubric/mean", "completions/mean_length"],
            eval_keys=["eval/rubric", "eval/format"],
            extra={
                "iap, Qwen2.5-Coder-0.5B policy, 8 steps": ["recipe=iap", "model=qwen2.5-coder-0.5b", "train.steps=8"],
                "grpo, Qwen2.5-Coder-0.5B policy, 8 steps": [
                    "recipe=iap",
                    "model=qwen2.5-coder-0.5b",
                    "train.steps=8",
                    "data.template='{question}'",
                    "reward.terms.0.weight=0",
                    "reward.terms.1.params.answer_tag=null",
                ],
            },
        ),
        Pair(
            "quantevolver",
            "QuantEvolver (seed 004 #20): Diversity-Complementarity reward + compact memory of the factor database vs "
            "GRPO on the plain IC reward, synthetic panel",
            ["recipe=quantevolver", f"train.steps={steps}", f"train.save_steps={steps}"],
            [
                "recipe=quantevolver",
                f"train.steps={steps}",
                f"train.save_steps={steps}",
                "data.env.memory_size=0",
                "data.env.diversity_weight=0",
            ],
            ["rlpost/reward", "env/tool_errors", "env/tool_calls", "completions/mean_length"],
            eval_keys=["eval/reward"],
        ),
        Pair(
            "ug_ttt",
            "UG-TTT (seed 004 #28): 2 LoRA adapters over a frozen Qwen2.5-Coder-0.5B, MI bonus + nuclear-norm term vs "
            "GRPO with one LoRA of the same rank and learning rate, formula discovery on the synthetic panel",
            [
                "recipe=ug_ttt",
                "model=qwen2.5-coder-0.5b",
                f"train.steps={steps}",
                f"train.save_steps={steps}",
                "eval.size=20",
            ],
            [
                "recipe=quantevolver",
                "model=qwen2.5-coder-0.5b",
                f"train.steps={steps}",
                f"train.save_steps={steps}",
                "eval.size=20",
                "train.learning_rate=2e-4",
                "model.lora.enabled=true",
                "model.lora.r=8",
                "model.lora.alpha=16",
                "model.lora.dropout=0",
                "model.lora.target_modules=[q_proj,v_proj]",
            ],
            ["rlpost/reward_max", "rlpost/reward", "env/tool_errors", "ugttt/mi", "ugttt/distinctness", "step_time"],
            eval_keys=["eval/reward"],
        ),
        Pair(
            "frost",
            "Frost (seed 004 #1): GCG token swaps along the judge's gradient join each group vs plain GRPO, "
            "maximum-likelihood infilling, SmolLM2 judge",
            ["recipe=frost", f"train.steps={steps}"],
            ["recipe=frost", "algorithm/rollout=none", f"train.steps={steps}"],
            [
                "rlpost/reward",
                "rlpost/rollout/frost/gain",
                "rlpost/rollout/frost/realized_gain",
                "rlpost/rollout/frost/improved_frac",
                "rlpost/rollout/frost/roundtrip_exact_frac",
                "step_time",
            ],
            eval_keys=["eval/reward", "eval/sampled/reward_best@1", "eval/sampled/reward_best@4"],
        ),
    ]
