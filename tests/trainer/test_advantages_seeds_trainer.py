"""Two real steps through RLPostTrainer on the tiny model for each seed advantage of
tests/unit/advantages/test_advantages_seeds.py (hargo, tiar, routed, segments, pmi_tokens): their metrics are
finite and logged, and the advantages they hand the loss differ from group_norm's."""

import math

import pytest
import torch

from rlpost.advantages.group_norm import GroupNorm

from support.trainer import make_run, step_logs, train_rlpost


class Spy:
    """Records what the real component saw and returned (it still does all the work)."""

    def __init__(self, component):
        self.component, self.calls = component, []

    def __getattr__(self, name):
        return getattr(self.component, name)

    def __call__(self, batch):
        out = self.component(batch)
        self.calls.append((batch, out[0]))
        return out

    def estimate(self, batch):  # what the pipeline calls (rlpost/pipeline.py, stage 5)
        out = self.component.estimate(batch)
        self.calls.append((batch, out.advantages))
        return out


TWO_TERMS = (
    "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}},"
    " {name: callable, weight: 0.5, params: {path: 'support.rewards:binary_hash_reward'}}]"
)
INTEGRATION = {
    "hargo": (
        ["algorithm/advantage=hargo"],  # confidence from the reference model, loaded without a KL term
        ["hargo/discrimination_mean", "hargo/confidence_mean", "hargo/weight_max", "hargo/weight_std"],
    ),
    # random text is never right: the abstain pattern splits groups into abstain / wrong (confidence 0), where
    # TIAR's shipped defaults (conf/algorithm/advantage/tiar.yaml, as recipe=tiar uses them) double each
    # abstention's advantage, which group_norm cannot (test_advantages_seeds.py, the never-correct group)
    "tiar": (
        [
            "reward=ternary_abstention",  # make_run's hash reward replaces the terms: name them again
            "reward.terms=[{name: ternary_abstention, weight: 1.0, params: {abstain_patterns: ['[aeiou][aeiou]']}}]",
            "algorithm/advantage=tiar",
        ],
        ["tiar/abstain_frac", "tiar/confidence_mean", "tiar/abstain_weight_mean", "tiar/abstain_adv_mean"],
    ),
    "routed": (
        [
            TWO_TERMS,
            "algorithm/advantage=routed",
            "algorithm.advantage.routes=[{term: callable, span: 're:[aeiou]'}, {term: callable_2, span: rest}]",
        ],
        ["routed/callable_token_frac", "routed/callable_2_token_frac", "routed/unrouted_token_frac"],
    ),
    "segments": (
        [
            TWO_TERMS,
            "algorithm/advantage=segments",
            "algorithm.advantage.stages=[e, a]",
            "algorithm.advantage.local=[{stage: a, term: callable}]",
        ],
        ["segments/local_token_frac", "segments/stages_found_mean", "segments/global_abs_mean"],
    ),
    "pmi_tokens": (  # the token-id count estimator (the earlier default)
        ["algorithm/advantage=pmi_tokens", "algorithm.advantage.ramp_steps=0", "algorithm.advantage.estimator=counts"],
        ["pmi/strength", "pmi/weight_max", "pmi/weight_std"],
    ),
    "pmi_tokens_model": (  # the default: PMI with the answer by the policy (hinted forward)
        ["algorithm/advantage=pmi_tokens", "algorithm.advantage.ramp_steps=0"],
        ["pmi/strength", "pmi/weight_max", "pmi/weight_std", "pmi/abs_mean"],
    ),
}


@pytest.mark.parametrize("name", sorted(INTEGRATION))
def test_two_steps_through_the_trainer_log_metrics_and_change_the_advantages(name, tmp_path):
    overrides, keys = INTEGRATION[name]
    run = make_run(["train.steps=2", "train.num_generations=2", *overrides])
    spy = Spy(run.algorithm.advantage)
    run.algorithm.advantage = spy
    trainer = train_rlpost(run, tmp_path)
    logs = step_logs(trainer)
    if name == "hargo":  # the reference is loaded for HARGO's confidence, but no KL is trained
        assert trainer.ref_model is not None and run.algorithm.kl.coef == 0
        assert not any(key == "kl" or key.startswith("rlpost/kl") for log in logs for key in log)
    assert len(logs) == 2 and len(spy.calls) == 2
    for log in logs:
        for key in [*keys, "advantage/abs_mean"]:
            assert math.isfinite(log[f"rlpost/{key}"]), key
    changed = False
    for b, advantages in spy.calls:
        base = GroupNorm(GroupNorm.Config(scale=spy.cfg.scale))(b)[0]
        assert torch.isfinite(advantages).all()
        if advantages.dim() == 2:  # token-level: compare on the completion tokens
            valid = b.completion_mask[:, : advantages.size(1)] > 0
            assert advantages.shape[0] == b.rewards.numel()
            changed |= not torch.allclose(advantages[valid], base.unsqueeze(1).expand_as(advantages)[valid], atol=1e-5)
        else:
            changed |= not torch.allclose(advantages, base, atol=1e-5)
    if name == "pmi_tokens":
        # The tiny random model never repeats a token in a batch (49k ids, 4 x 8 tokens), so every token
        # is equally characteristic to the count estimator under either scope and P-GRPO must give GRPO's advantage back on each
        # token (weights mean 1 per completion); the redistribution itself is checked by hand
        # (tests/unit/advantages/test_advantages_seeds.py, batch and group scope).
        assert not changed
        return
    assert changed, f"{name} left every advantage equal to group_norm's"


def test_pmi_tokens_hinted_log_probs_are_the_policys_with_the_answer_in_context(tmp_path):
    # P-GRPO's model estimator (seed 000 #22): the trainer's hinted forward scores each sampled completion after x
    # with "The correct answer is <answer>." appended to its user turn; by hand on the first batch with the starting
    # weights (a fresh load of the same model): hinted_t = log pi(y_t | x (+) hint, y_<t), one forward on c + y
    from rlpost.models.loading import load_model, load_tokenizer
    from rlpost.rollouts.base import user_text, with_user_text

    run = make_run(["train.steps=1", "train.num_generations=2", "algorithm/advantage=pmi_tokens"])
    spy = Spy(run.algorithm.advantage)
    run.algorithm.advantage = spy
    train_rlpost(run, tmp_path)
    b = spy.calls[0][0]
    model, tok = load_model(run.model), load_tokenizer(run.model)
    for i in (0, 3):
        row = b.rows[i]
        c = with_user_text(row["prompt"], f"{user_text(row['prompt'])}\n\nThe correct answer is {row['answer']}.")
        prompt = tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=False)
        n = int(b.completion_mask[i].sum())
        y = b.completion_ids[i, :n].tolist()
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([list(prompt) + y])).logits[0].float()
        logps = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)[torch.arange(n), torch.tensor(y)]
        torch.testing.assert_close(b.extras["hinted_logps"][i, :n].float(), logps, atol=1e-4, rtol=1e-4)
        # and the PMI is not zero: the answer moves the policy's token probabilities
        assert (b.extras["hinted_logps"][i, :n] - b.extras["logps"][i, :n]).abs().max() > 1e-3
