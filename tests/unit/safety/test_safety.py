"""The stability kit's pieces by hand (seed 000 #16, issue 7): ratio guard, whitening, rules, fp32 masters,
non-finite guard, LoRA merge-and-reinit, and the config errors raised before any model loads."""

import math
import warnings

import pytest
import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.losses.base import LossInputs
from rlpost.losses.clip import Clip
from rlpost.runs.state import load_component_state, save_component_state
from rlpost.safety.config import RollbackSettings
from rlpost.safety.fp32_updates import MasterWeights
from rlpost.safety.kit import SafetyKit
from rlpost.safety.nonfinite import NonFiniteGuard, drop_grads, grads_finite
from rlpost.safety.ratio_guard import guard_log_ratio
from rlpost.safety.rollback import RollbackRules
from rlpost.safety.whiten import RewardWhitener, RunningMoments

TINY = ["model=tiny-random", "logging.trackers=[]"]


# ---- importance-ratio guard -------------------------------------------------------------------
def test_ratio_guard_clamps_the_log_ratio_before_exp():
    # d = logps - old = [0.5, 28, -25.5]; c = 5 -> clamp(d) = [0.5, 5, -5]
    # ratio = exp(clamp(d)) = [1.648721, 148.413159, 0.006738]; guarded tokens: |d| > 5 on the mask [1, 1, 0] -> 1
    logps = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old = torch.tensor([[-1.5, -30.0, 25.0]])
    x = LossInputs(logps=logps, old_logps=old, advantages=torch.ones(1, 1), mask=torch.tensor([[1.0, 1.0, 0.0]]))
    g, metrics = guard_log_ratio(x, 5.0)
    ratio = torch.exp(g.logps - g.old_logps)
    assert torch.allclose(ratio, torch.tensor([[1.648721, 148.413159, 0.006738]]), rtol=1e-5)
    assert metrics == {"safety/ratio_guarded": 1.0}
    # a true clamp: tokens beyond c get no gradient through the ratio; d(exp(d))/d logps = exp(0.5) inside
    ratio.sum().backward()
    assert torch.allclose(logps.grad, torch.tensor([[1.648721, 0.0, 0.0]]), rtol=1e-5)


def test_ratio_guard_keeps_a_bf16_clip_loss_finite():
    # bf16 overflows above ~3.4e38: exp(100) = inf. With A = -1, the clip loss is -min(r*A, clip(r)*A) = r -> inf.
    # Guarded at c = 20: r = exp(20) = 4.85165e8, the loss is 4.85165e8 (finite) and its gradient is 0.
    logps = torch.tensor([[-1.0]], dtype=torch.bfloat16, requires_grad=True)
    old = torch.tensor([[-101.0]], dtype=torch.bfloat16)
    adv, mask = -torch.ones(1, 1, dtype=torch.bfloat16), torch.ones(1, 1)
    loss, _ = Clip(Clip.Config())(LossInputs(logps=logps, old_logps=old, advantages=adv, mask=mask))
    assert math.isinf(loss.item())
    x, _ = guard_log_ratio(LossInputs(logps=logps, old_logps=old, advantages=adv, mask=mask), 20.0)
    loss, _ = Clip(Clip.Config())(x)
    assert loss.item() == pytest.approx(4.85165e8, rel=1e-2)  # bf16 rounding of exp(20)
    loss.sum().backward()
    assert logps.grad.item() == 0.0


def test_ratio_guard_is_identity_inside_the_bound():
    logps = torch.tensor([[-1.0, -2.0]])
    old = torch.tensor([[-1.25, -1.5]])
    x = LossInputs(logps=logps, old_logps=old, advantages=torch.ones(1, 1), mask=torch.ones(1, 2))
    g, metrics = guard_log_ratio(x, 1.0)
    assert torch.equal(g.old_logps, old) and metrics["safety/ratio_guarded"] == 0.0


# ---- reward whitening -------------------------------------------------------------------------
def test_reward_whitening_by_hand():
    # batch 1 = [1, 2, 3, 4]: mean 2.5, var = (2.25 + .25 + .25 + 2.25) / 4 = 1.25, std = 1.118034
    #   whitened = (r - 2.5) / 1.118034 = [-1.341641, -0.447214, 0.447214, 1.341641]
    # batch 2 = [10, 10]: all six seen: mean = 30 / 6 = 5, var = (16 + 9 + 4 + 1 + 25 + 25) / 6 = 13.3333,
    #   std = 3.651484; (parallel update: delta = 7.5, M2 = 5 + 0 + 7.5^2 * 4 * 2 / 6 = 80, 80 / 6 = 13.3333)
    #   whitened = (10 - 5) / 3.651484 = 1.369306
    w = RewardWhitener(eps=1e-8)
    out, metrics = w(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert torch.allclose(out, torch.tensor([-1.341641, -0.447214, 0.447214, 1.341641]), atol=1e-6)
    assert metrics["safety/reward_running_std"] == pytest.approx(1.118034, abs=1e-6)
    out, metrics = w(torch.tensor([10.0, 10.0]))
    assert torch.allclose(out, torch.tensor([1.369306, 1.369306]), atol=1e-6)
    assert metrics["safety/reward_running_mean"] == pytest.approx(5.0)
    assert w.moments.m2 == pytest.approx(80.0)
    # an evaluation batch is whitened with the statistics as they are (no update)
    out, _ = w(torch.tensor([5.0]), update=False)
    assert out.item() == pytest.approx(0.0) and w.moments.count == 6


def test_reward_whitening_skips_nan_and_restores_from_state(tmp_path):
    # NaN (an abstaining term) stays NaN and does not count: stats of [1, 3] = mean 2, std 1 -> [nan, -1, 1]
    kit = SafetyKit(build_run(compose([*TINY, "algorithm.safety.whiten_rewards.enabled=true"])).algorithm.safety.cfg)
    out = kit.on_rewards(torch.tensor([float("nan"), 1.0, 3.0]), {}, train=True)
    assert torch.isnan(out[0]) and torch.allclose(out[1:], torch.tensor([-1.0, 1.0]))
    save_component_state([("algorithm.safety", kit)], tmp_path)
    fresh = SafetyKit(kit.cfg)
    assert load_component_state([("algorithm.safety", fresh)], tmp_path) == ["algorithm.safety"]
    assert fresh.whitener.moments.state_dict() == {"count": 2, "mean": 2.0, "m2": 2.0}


def test_running_moments_match_torch():
    values = torch.randn(37, generator=torch.Generator().manual_seed(0))
    m = RunningMoments()
    for chunk in values.split(5):
        m.update(chunk)
    assert m.mean == pytest.approx(values.double().mean().item())
    assert m.std == pytest.approx(values.double().std(unbiased=False).item())


# ---- rollback rules ---------------------------------------------------------------------------
def test_reward_rule_by_hand():
    # k = 2, n = 2, warmup 3. Good rewards 1, 2, 3: mean 2, std = sqrt(2/3) = 0.816497, floor = 2 - 1.632993 = 0.367007
    rules = RollbackRules(RollbackSettings(reward_drop_std=2.0, reward_patience=2, reward_warmup=3))
    for r in (1.0, 2.0):
        assert rules.judge(r, None) == (False, None)
    assert rules.judge(-5.0, None) == (False, None)  # only 2 good steps seen: the rule is not armed yet
    assert rules.reward.count == 3  # so -5 counted as good; redo with a clean history
    rules = RollbackRules(RollbackSettings(reward_drop_std=2.0, reward_patience=2, reward_warmup=3))
    for r in (1.0, 2.0, 3.0):
        rules.judge(r, None)
    assert rules.reward.mean == pytest.approx(2.0) and rules.reward.std == pytest.approx(0.816497, abs=1e-6)
    assert rules.judge(0.4, None) == (False, None)  # 0.4 >= 0.367007: good, streak stays 0
    rules = RollbackRules(RollbackSettings(reward_drop_std=2.0, reward_patience=2, reward_warmup=3))
    for r in (1.0, 2.0, 3.0):
        rules.judge(r, None)
    assert rules.judge(0.3, None) == (True, None)  # bad, streak 1 < n
    bad, reason = rules.judge(0.3, None)  # bad, streak 2 = n -> roll back
    assert bad and reason.startswith("reward 0.3 < 0.367 for 2 steps")
    assert rules.reward.count == 3  # bad steps stay out of the baseline


def test_kl_rule_and_no_reward_step():
    rules = RollbackRules(RollbackSettings(kl_max=0.5, kl_patience=2))
    assert rules.judge(None, 0.6) == (True, None)
    assert rules.judge(None, 0.4) == (False, None)  # streak reset
    assert rules.judge(None, 0.6) == (True, None)
    assert rules.judge(None, 0.7)[1] == "kl 0.7 > 0.5 for 2 steps"


# ---- non-finite guard -------------------------------------------------------------------------
def test_nonfinite_guard_streak_and_grad_checks():
    guard = NonFiniteGuard(rollback_after=2)
    guard.note_loss(torch.tensor(float("inf")))
    assert guard.loss_nonfinite
    assert guard.end_step(False) is False and guard.streak == 1
    assert guard.end_step(True) is False and guard.streak == 0  # a finite step breaks the streak
    assert [guard.end_step(False), guard.end_step(False)] == [False, True] and guard.total == 3
    w = torch.nn.Parameter(torch.ones(2))
    w.grad = torch.tensor([1.0, float("nan")])
    assert not grads_finite([w])
    drop_grads([w])
    opt = torch.optim.AdamW([w], lr=0.1)
    opt.step()  # no gradient: the parameter and the optimizer state are untouched
    assert torch.equal(w.detach(), torch.ones(2)) and not opt.state


# ---- fp32 master weights ----------------------------------------------------------------------
def test_fp32_masters_accumulate_updates_bf16_rounds_away():
    # SGD, lr 1e-4, gradient 1, 100 steps: w = 1 - 100 * 1e-4 = 0.99 in the fp32 master.
    # In bf16, 1 - 1e-4 rounds back to 1 (spacing below 1 is 2^-8 = 0.0039): plain bf16 never moves.
    # The model's bf16 weight is the master rounded: bf16(0.99) = 253/256 = 0.98828125.
    plain = torch.nn.Parameter(torch.ones(1, dtype=torch.bfloat16))
    mixed = torch.nn.Parameter(torch.ones(1, dtype=torch.bfloat16))
    opt_plain, opt_mixed = torch.optim.SGD([plain], lr=1e-4), torch.optim.SGD([mixed], lr=1e-4)
    masters = MasterWeights()
    masters.adopt(opt_mixed)
    assert opt_mixed.param_groups[0]["params"][0].dtype == torch.float32
    for _ in range(100):
        for p, opt in ((plain, opt_plain), (mixed, opt_mixed)):
            p.grad = torch.ones(1, dtype=torch.bfloat16)
            opt.step()
    assert plain.item() == 1.0
    assert masters.master_of(mixed).item() == pytest.approx(0.99, abs=1e-5)  # fp32 sum of 100 steps
    assert mixed.dtype == torch.bfloat16 and mixed.item() == 0.98828125


# ---- LoRA merge-and-reinitialize --------------------------------------------------------------
def test_lora_merge_keeps_outputs_and_zeroes_b():
    from peft import get_peft_model

    from rlpost.models.loading import load_model, peft_config
    from rlpost.safety.lora_merge import lora_layers, merge_and_reinit

    run = build_run(compose([*TINY, "model.lora.enabled=true", "model.lora.dropout=0.0"]))
    model = get_peft_model(load_model(run.model), peft_config(run.model))
    torch.manual_seed(1)
    for layer in lora_layers(model):  # a trained-looking adapter: B != 0
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.05)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model(torch.tensor([[1, 2, 3, 4]])).logits.sum().backward()
    opt.step()
    ids = torch.tensor([[5, 17, 42, 7, 99, 3]])
    model.eval()
    with torch.no_grad():
        before = model(ids).logits
    a_before = lora_layers(model)[0].lora_A["default"].weight.clone()
    assert merge_and_reinit(model, opt) == 4 * run.model.tiny_layers  # q, k, v, o per layer
    with torch.no_grad():
        after = model(ids).logits
    assert torch.allclose(before, after, atol=1e-5)
    for layer in lora_layers(model):
        assert torch.count_nonzero(layer.lora_B["default"].weight) == 0
        for param in (layer.lora_A["default"].weight, layer.lora_B["default"].weight):
            assert param not in opt.state  # AdamW moments of the adapter start over
    assert not torch.equal(lora_layers(model)[0].lora_A["default"].weight, a_before)  # re-initialized


# ---- config errors before any model loads -----------------------------------------------------
@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algorithm.safety.lora_merge.every=5"], "needs a LoRA adapter: set model.lora.enabled=true"),
        (["algorithm.safety.rollback.kl_max=0.1"], "algorithm.kl.coef=0 loads no reference model"),
        (["algorithm.safety.ratio_guard.max_log_ratio=0"], "max_log_ratio must be > 0"),
        (["algorithm.safety.rollback.optimizer=restore"], "Valid choices: snapshot, reset, keep"),
        (["algorithm.safety.rollback.reward_patience=0"], "reward_patience must be >= 1"),
        (["+algorithm.safety.ratio_gaurd.enabled=true"], "Did you mean 'ratio_guard'?"),
        (
            ["algorithm.safety.fp32_updates=true", "model.lora.enabled=true", "model.lora.target_modules=[lm_head]"],
            "drop lm_head from the targets",
        ),
    ],
)
def test_impossible_combinations_fail_before_loading(overrides, message, monkeypatch):
    import rlpost.models.loading

    monkeypatch.setattr(rlpost.models.loading, "load_model", lambda cfg: pytest.fail("model loaded"))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("?", r"\?")):
        build_run(compose([*TINY, *overrides]))


def test_fp32_updates_on_an_fp32_run_warns_and_is_a_no_op():
    with pytest.warns(UserWarning, match="fp32_updates=true does nothing here"):
        run = build_run(compose([*TINY, "algorithm.safety.fp32_updates=true"]))
    assert "cast_lm_head_to_fp32" not in run.grpo_config_kwargs("/tmp/unused")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = build_run(compose([*TINY, "algorithm.safety.fp32_updates=true", "model.dtype=bfloat16"]))
    assert run.grpo_config_kwargs("/tmp/unused")["cast_lm_head_to_fp32"] is True


def test_defaults_are_off_and_bundles_unchanged():
    for algorithm in ("grpo", "gepo", "dapo", "cispo", "gspo", "rloo", "dr_grpo", "grpo_or"):
        run = build_run(compose([*TINY, f"algorithm={algorithm}"]))
        assert not run.algorithm.safety.cfg.any
        assert "algorithm.safety" not in dict(run.named_components())
    kit = build_run(compose([*TINY, "algorithm/safety=kit"])).algorithm.safety.cfg
    assert kit.ratio_guard.enabled and kit.whiten_rewards.enabled and kit.nonfinite.enabled
    assert kit.rollback.reward_drop_std == 3.0 and kit.lora_merge.every == 0
