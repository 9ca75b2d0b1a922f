"""The one explicit import list that registers every component (import order = nothing depends on it)."""

# advantages
import rlpost.advantages.dpo  # noqa: F401
import rlpost.advantages.ed  # noqa: F401
import rlpost.advantages.gae  # noqa: F401
import rlpost.advantages.gepo  # noqa: F401
import rlpost.advantages.group_norm  # noqa: F401
import rlpost.advantages.hargo  # noqa: F401
import rlpost.advantages.pmi_tokens  # noqa: F401
import rlpost.advantages.reinforce_pp  # noqa: F401
import rlpost.advantages.routed  # noqa: F401
import rlpost.advantages.segments  # noqa: F401
import rlpost.advantages.tiar  # noqa: F401
import rlpost.advantages.turn_grpo  # noqa: F401

# combiners
import rlpost.combine.decoupled  # noqa: F401
import rlpost.combine.focal  # noqa: F401
import rlpost.combine.normalize_then_sum  # noqa: F401
import rlpost.combine.odrpo  # noqa: F401
import rlpost.combine.rdpo  # noqa: F401
import rlpost.combine.weighted_sum  # noqa: F401

# corrections
import rlpost.corrections.acrl  # noqa: F401
import rlpost.corrections.ais  # noqa: F401
import rlpost.corrections.f_tis  # noqa: F401
import rlpost.corrections.mis  # noqa: F401
import rlpost.corrections.none  # noqa: F401
import rlpost.corrections.tis  # noqa: F401

# environments (data/env)
import rlpost.envs.calculator  # noqa: F401
import rlpost.envs.callable  # noqa: F401
import rlpost.envs.code_repair  # noqa: F401
import rlpost.envs.diagnose_revise  # noqa: F401
import rlpost.envs.formula  # noqa: F401
import rlpost.envs.frozen_worker  # noqa: F401
import rlpost.envs.gym  # noqa: F401
import rlpost.envs.none  # noqa: F401
import rlpost.envs.python  # noqa: F401
import rlpost.envs.safety_controller  # noqa: F401
import rlpost.envs.search  # noqa: F401
import rlpost.envs.simulated_user  # noqa: F401
import rlpost.envs.skill_executor  # noqa: F401

# gradient transforms
import rlpost.grad.direction_monitor  # noqa: F401
import rlpost.grad.trusted_projection  # noqa: F401

# judges
import rlpost.judges.local  # noqa: F401
import rlpost.judges.openai  # noqa: F401

# policy losses
import rlpost.losses.adaptive_clip  # noqa: F401
import rlpost.losses.cispo  # noqa: F401
import rlpost.losses.clip  # noqa: F401
import rlpost.losses.gmpo  # noqa: F401
import rlpost.losses.gspo  # noqa: F401
import rlpost.losses.luspo  # noqa: F401
import rlpost.losses.opd  # noqa: F401
import rlpost.losses.output_reset  # noqa: F401
import rlpost.losses.sapo  # noqa: F401
import rlpost.losses.vespo  # noqa: F401

# regularizers
import rlpost.regularizers.adaptive_kl  # noqa: F401
import rlpost.regularizers.air  # noqa: F401
import rlpost.regularizers.entropy  # noqa: F401
import rlpost.regularizers.top_entropy  # noqa: F401

# rewards
import rlpost.rewards.bleu  # noqa: F401
import rlpost.rewards.callable  # noqa: F401
import rlpost.rewards.choice_or_text  # noqa: F401
import rlpost.rewards.chrf  # noqa: F401
import rlpost.rewards.code_exec  # noqa: F401
import rlpost.rewards.core  # noqa: F401
import rlpost.rewards.dar  # noqa: F401
import rlpost.rewards.dynamic_rubric  # noqa: F401
import rlpost.rewards.ens_gap  # noqa: F401
import rlpost.rewards.ensemble_weights  # noqa: F401
import rlpost.rewards.env  # noqa: F401
import rlpost.rewards.exact_match  # noqa: F401
import rlpost.rewards.few_shot_gain  # noqa: F401
import rlpost.rewards.format  # noqa: F401
import rlpost.rewards.group_diversity  # noqa: F401
import rlpost.rewards.ifeval  # noqa: F401
import rlpost.rewards.infill_likelihood  # noqa: F401
import rlpost.rewards.length  # noqa: F401
import rlpost.rewards.majority_vote  # noqa: F401
import rlpost.rewards.math_answer  # noqa: F401
import rlpost.rewards.noisy_rater  # noqa: F401
import rlpost.rewards.outcome_table  # noqa: F401
import rlpost.rewards.pairwise_preference  # noqa: F401
import rlpost.rewards.pared  # noqa: F401
import rlpost.rewards.qe_lid  # noqa: F401
import rlpost.rewards.rank_judge  # noqa: F401
import rlpost.rewards.reciprocal  # noqa: F401
import rlpost.rewards.reward_model  # noqa: F401
import rlpost.rewards.rubric  # noqa: F401
import rlpost.rewards.stage_check  # noqa: F401
import rlpost.rewards.ternary_abstention  # noqa: F401
import rlpost.rewards.token_f1  # noqa: F401
import rlpost.rewards.word_recall  # noqa: F401

# rollout strategies
import rlpost.rollouts.draft_injection  # noqa: F401
import rlpost.rollouts.experience_buffer  # noqa: F401
import rlpost.rollouts.feedback_refine  # noqa: F401
import rlpost.rollouts.forced_refusal  # noqa: F401
import rlpost.rollouts.frost  # noqa: F401
import rlpost.rollouts.generic_negative  # noqa: F401
import rlpost.rollouts.hindsight_critique  # noqa: F401
import rlpost.rollouts.intervention_bandit  # noqa: F401
import rlpost.rollouts.language_routed  # noqa: F401
import rlpost.rollouts.none  # noqa: F401
import rlpost.rollouts.rubric_guidance  # noqa: F401
import rlpost.rollouts.self_critique  # noqa: F401
import rlpost.rollouts.struct_refine  # noqa: F401

# selectors (the update budget)
import rlpost.select.none  # noqa: F401
import rlpost.select.sdga_auto  # noqa: F401
import rlpost.select.sdga_phase  # noqa: F401

# data transforms
import rlpost.transforms.ect  # noqa: F401
import rlpost.transforms.languages  # noqa: F401
import rlpost.transforms.market_filter  # noqa: F401
import rlpost.transforms.none  # noqa: F401
