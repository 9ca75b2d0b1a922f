"""Corrections by hand: tis, mis, f_tis, ais, acrl, none on small tensors (formulas in the comments),
their config errors, listing/show, and acrl's controller state through a checkpoint file."""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.app import compose, validate
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.corrections.acrl import AdaptiveControl
from rlpost.corrections.ais import AdaptiveIS
from rlpost.corrections.base import CorrectionInputs
from rlpost.corrections.f_tis import FilteredTruncatedIS, sample_kl
from rlpost.corrections.mis import MaskedIS
from rlpost.corrections.none import NoCorrection
from rlpost.corrections.tis import TruncatedIS
from rlpost.runs.state import load_component_state, save_component_state
from rlpost.tools.explain import explain
from rlpost.tools.listing import rows

LN2 = math.log(2.0)


def inputs(log_ratio, mask=None, advantages=None, peer=None, training=True) -> CorrectionInputs:
    """train - behaviour = log_ratio: behaviour fixed at -3 per token."""
    log_ratio = torch.tensor(log_ratio, dtype=torch.float32)
    mask = torch.ones_like(log_ratio) if mask is None else torch.tensor(mask, dtype=torch.float32)
    n = log_ratio.size(0)
    adv = torch.ones(n, 1) if advantages is None else torch.tensor(advantages, dtype=torch.float32).view(n, -1)
    behaviour = torch.full_like(log_ratio, -3.0)
    return CorrectionInputs(
        train_logps=behaviour + log_ratio,
        behaviour_logps=behaviour,
        mask=mask,
        advantages=adv,
        peer=torch.zeros(n, dtype=torch.bool) if peer is None else torch.tensor(peer),
        training=training,
    )


# Two completions, 3 tokens; row 1's last token is padding. Ratios pi/mu:
#   row 0: [2, 0.5, 4]      row 1: [0.25, 1, (masked)]
X = dict(log_ratio=[[LN2, -LN2, 2 * LN2], [-2 * LN2, 0.0, 3 * LN2]], mask=[[1, 1, 1], [1, 1, 0]])


def test_tis_token_truncates_at_cap():
    # w = min(r, 2) = [[2, 0.5, 2], [0.25, 1, 1]]; mean over 5 tokens = 5.75 / 5; 1 of 5 tokens clipped (4)
    w, m = TruncatedIS(TruncatedIS.Config(cap=2.0))(inputs(**X))
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.5, 2.0], [0.25, 1.0, 1.0]]))
    assert m["weight_mean"] == pytest.approx(1.15)
    assert m["clipped_fraction"] == pytest.approx(0.2)
    assert (m["weight_min"], m["weight_max"]) == (pytest.approx(0.25), pytest.approx(2.0))


def test_tis_sequence_uses_the_product_over_counted_tokens():
    # row 0: 2 * 0.5 * 4 = 4 -> min(4, 2) = 2;  row 1: 0.25 * 1 = 0.25 (the padded 8 is not counted)
    w, m = TruncatedIS(TruncatedIS.Config(level="sequence", cap=2.0))(inputs(**X))
    torch.testing.assert_close(w, torch.tensor([[2.0], [0.25]]))
    assert m["clipped_fraction"] == pytest.approx(0.5)


def test_mis_token_masks_outside_the_band():
    # keep r in [0.5, 2]: [[2, 0.5, 0], [0, 1, .]]; masked: 4 and 0.25 = 2 of 5 tokens
    w, m = MaskedIS(MaskedIS.Config(low=0.5, high=2.0))(inputs(**X))
    assert w[0].tolist() == pytest.approx([2.0, 0.5, 0.0]) and w[1, :2].tolist() == pytest.approx([0.0, 1.0])
    assert m["masked_fraction"] == pytest.approx(0.4)
    assert m["weight_mean"] == pytest.approx(3.5 / 5)


def test_mis_sequence_masks_whole_completions():
    # sequence ratios 4 and 0.25 with band [0.5, 5]: row 0 kept at 4, row 1 dropped
    w, m = MaskedIS(MaskedIS.Config(level="sequence", low=0.5, high=5.0))(inputs(**X))
    torch.testing.assert_close(w, torch.tensor([[4.0], [0.0]]))
    assert m["masked_fraction"] == pytest.approx(0.5)


# k3 per token = r - 1 - ln r:  r=2: 1-ln2 = 0.306853; r=0.5: ln2-0.5 = 0.193147; r=4: 3-ln4 = 1.613706;
# r=0.25: ln4-0.75 = 0.636294; r=1: 0.   Sample means: row 0 = 2.113706/3 = 0.704569, row 1 = 0.636294/2 = 0.318147
def test_f_tis_sample_kl():
    torch.testing.assert_close(sample_kl(inputs(**X)), torch.tensor([[0.704569], [0.318147]]), atol=1e-6, rtol=0)


def test_f_tis_filters_far_samples_and_truncates_the_rest():
    # max_kl 0.5: row 0 (0.70) dropped; row 1 (0.32) kept with min(r, 2) = [0.25, 1, .]
    w, m = FilteredTruncatedIS(FilteredTruncatedIS.Config(cap=2.0, max_kl=0.5))(inputs(**X))
    assert w[0].tolist() == [0.0, 0.0, 0.0] and w[1, :2].tolist() == pytest.approx([0.25, 1.0])
    assert m["filtered_fraction"] == pytest.approx(0.5)
    assert m["clipped_fraction"] == pytest.approx(0.2)


def test_f_tis_negative_filter_keeps_far_samples_with_positive_advantage():
    # max_kl 0.3: both rows are far; only row 1 has A < 0, so only row 1 is dropped
    cfg = FilteredTruncatedIS.Config(cap=2.0, max_kl=0.3, filter="negative")
    w, m = FilteredTruncatedIS(cfg)(inputs(**X, advantages=[1.0, -1.0], peer=[False, True]))
    assert w[0].tolist() == pytest.approx([2.0, 0.5, 2.0]) and w[1].tolist() == [0.0, 0.0, 0.0]
    assert m["peer_filtered_fraction"] == 1.0 and m["peer_weight_mean"] == 0.0
    assert m["peer_kl"] == pytest.approx(0.318147, abs=1e-6)


def test_ais_mixing_coefficient_by_hand():
    # two one-token completions, r = [2, 1], A = [1, -1], cap 2 -> w = [2, 1]
    # rho = (2 + 1)^2 / (2 * (4 + 1)) = 0.9
    # KL = ((1 - ln2) + 0) / 2; kl_scale = KL / ln2 -> severity = 1 - exp(-ln2) = 0.5
    # Var(A) = 1; w*A = [2, -1], mean 0.5, Var = 2.25 -> phi = 1 / 2.25
    # lambda = 0.5 * 0.9 / 2.25 = 0.2;  weight = 0.8 + 0.2 * w = [1.2, 1.0]
    kl = (1 - LN2) / 2
    ais = AdaptiveIS(AdaptiveIS.Config(cap=2.0, kl_scale=kl / LN2))
    w, m = ais(inputs([[LN2], [0.0]], advantages=[1.0, -1.0]))
    torch.testing.assert_close(w, torch.tensor([[1.2], [1.0]]))
    assert m["reliability"] == pytest.approx(0.9)
    assert m["severity"] == pytest.approx(0.5)
    assert m["variance_factor"] == pytest.approx(1 / 2.25)
    assert m["lam"] == pytest.approx(0.2)
    assert m["kl"] == pytest.approx(kl)


def test_ais_is_uncorrected_without_mismatch():
    # r = 1 everywhere: KL = 0 -> severity 0 -> lambda 0 -> weight exactly 1
    w, m = AdaptiveIS(AdaptiveIS.Config())(inputs([[0.0, 0.0], [0.0, 0.0]], advantages=[1.0, -1.0]))
    assert torch.equal(w, torch.ones(2, 2)) and m["lam"] == 0.0


def test_acrl_controller_on_the_admitted_discrepancy_tightens_then_holds_in_band():
    # controlled: admitted. |Delta| = [0.1, 0.2, 0.3, 0]; tau 0.25 -> gate [1, 1, 0, 1]; D = (0.1 + 0.2) / 4 = 0.075 > 0.05
    #   -> tau = 0.25 * exp(-0.5) = 0.151633
    # next batch: gate [1, 0, 0, 1]; D = 0.1 / 4 = 0.025 in [0.01, 0.05] -> tau unchanged
    cfg = AdaptiveControl.Config(band_low=0.01, band_high=0.05, tau_init=0.25, gain=0.5, controlled="admitted")
    acrl = AdaptiveControl(cfg)
    x = inputs([[0.1, -0.2, 0.3, 0.0]])
    w, m = acrl(x)
    assert w.tolist() == [[1.0, 1.0, 0.0, 1.0]]
    assert m["admitted_discrepancy"] == pytest.approx(0.075) and m["tau"] == 0.25 and m["in_band"] == 0.0
    assert acrl.tau == pytest.approx(0.25 * math.exp(-0.5))
    w, m = acrl(x)
    assert w.tolist() == [[1.0, 0.0, 0.0, 1.0]] and m["gated_fraction"] == pytest.approx(0.5)
    assert m["admitted_discrepancy"] == pytest.approx(0.025) and m["in_band"] == 1.0
    assert acrl.tau == pytest.approx(0.25 * math.exp(-0.5)) and acrl.updates == 2


def test_acrl_controller_on_the_real_discrepancy_keeps_tightening_while_the_engines_disagree():
    # controlled: real. |Delta| = [0.1, 0.2, 0.3, 0]: D_real = 0.6 / 4 = 0.15 > 0.05 on every
    # batch, whatever the gate admits -> tau = 0.25 e^-0.5 = 0.151633, then 0.25 e^-1 = 0.091970
    cfg = AdaptiveControl.Config(band_low=0.01, band_high=0.05, tau_init=0.25, gain=0.5, controlled="real")
    acrl = AdaptiveControl(cfg)
    x = inputs([[0.1, -0.2, 0.3, 0.0]])
    w, m = acrl(x)  # tau 0.25: gate [1, 1, 0, 1], D_adm = 0.075
    assert w.tolist() == [[1.0, 1.0, 0.0, 1.0]] and m["real_discrepancy"] == pytest.approx(0.15)
    assert m["admitted_discrepancy"] == pytest.approx(0.075) and m["in_band"] == 0.0
    w, m = acrl(x)  # tau 0.151633: gate [1, 0, 0, 1], D_adm = 0.025 would be in band; D_real is not
    assert w.tolist() == [[1.0, 0.0, 0.0, 1.0]] and m["in_band"] == 0.0
    assert acrl.tau == pytest.approx(0.25 * math.exp(-1.0))
    w, m = acrl(x)  # tau 0.091970 < 0.1: only the matched token passes
    assert w.tolist() == [[0.0, 0.0, 0.0, 1.0]] and m["gated_fraction"] == pytest.approx(0.75)
    # the engines agree again: D_real = (0.02 + 0.01) / 2 = 0.015 in [0.01, 0.05] -> tau holds
    held = acrl.tau
    acrl(inputs([[0.02, -0.01]]))
    assert acrl.tau == held and acrl.last_discrepancy == pytest.approx(0.015)


def test_acrl_warns_once_when_the_band_lies_below_what_gating_can_reach(caplog):
    # D_real = 0.15 > band_high every batch: tau 0.3 -> 0.3 e^-1 = 0.110 (not yet), then max(0.041, 0.1) = 0.1
    # = tau_min with D still above the band: saturated from the second batch's update on
    cfg = AdaptiveControl.Config(band_low=0.01, band_high=0.05, tau_init=0.3, tau_min=0.1, gain=1.0, controlled="real")
    acrl = AdaptiveControl(cfg)
    x = inputs([[0.1, -0.2, 0.3, 0.0]])
    with caplog.at_level("WARNING", logger="rlpost.corrections.acrl"):
        _, first = acrl(x)
        _, second = acrl(x)
        acrl(x)
    assert acrl.tau == 0.1 and first["saturated"] == 0.0 and second["saturated"] == 1.0
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "stays above band_high=0.05 with the gate at tau_min=0.1" in warnings[0]


def test_acrl_relaxes_below_the_band_up_to_tau_max_and_eval_batches_do_not_move_it():
    # D = 0 < band_low: tau = min(tau * e^0.5, tau_max): 1 -> 1.648721 -> 2 (cap)
    acrl = AdaptiveControl(AdaptiveControl.Config(tau_init=1.0, tau_max=2.0, gain=0.5))
    x = inputs([[0.0, 0.0]])
    acrl(x)
    assert acrl.tau == pytest.approx(math.exp(0.5))
    acrl(x)
    assert acrl.tau == 2.0
    acrl(inputs([[1.5, 1.5]], training=False))  # D = 1.5 > band_high, but an eval batch
    assert acrl.tau == 2.0 and acrl.updates == 2


def test_acrl_state_travels_through_a_checkpoint_file(tmp_path):
    acrl = AdaptiveControl(AdaptiveControl.Config(tau_init=1.0, gain=0.5))
    acrl(inputs([[3.0, 0.5]]))  # gate [0, 1]; D_adm = 0.5 / 2 = 0.25 > band_high 0.1 -> tau = e^-0.5
    save_component_state([("algorithm.correction", acrl)], tmp_path)
    fresh = AdaptiveControl(AdaptiveControl.Config(tau_init=1.0, gain=0.5))
    assert load_component_state([("algorithm.correction", fresh)], tmp_path) == ["algorithm.correction"]
    assert fresh.state_dict() == acrl.state_dict() and fresh.tau == pytest.approx(math.exp(-0.5))


def test_none_is_exactly_one():
    w, m = NoCorrection(NoCorrection.Config())(inputs(**X))
    assert torch.equal(w, torch.ones(2, 1)) and m == {}


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["algorithm/correction=tis", "algorithm.correction.rollout_precision=null"], "nothing to correct"),
        (["algorithm/correction=mis", "algorithm.correction.low=3.0"], "low < high"),
        (["algorithm/correction=tis", "algorithm.correction.level=tokens"], "Valid choices: token, sequence"),
        (["algorithm/correction=tis", "algorithm.correction.rollout_precision=fp4"], "rollout_precision"),
        (["algorithm/correction=tsi"], "algorithm/correction.*acrl, ais, f_tis, mis, none, tis"),
        (["algorithm/correction=f_tis", "algorithm.correction.peer_model=tiny"], "choices: .*tiny-random"),
        (
            [
                "algorithm/correction=f_tis",
                "algorithm.correction.peer_model=tiny-random",
                "algorithm.correction.peer_per_group=4",
            ],
            "peer_per_group=4 must be smaller than train.num_generations=4",
        ),
        (
            [
                "algorithm/correction=f_tis",
                "algorithm.correction.peer_model=tiny-random",
                "+algorithm.correction.peer_overrides.tiny_hiden=32",
            ],
            "Did you mean 'tiny_hidden'",
        ),
        (["algorithm/correction=acrl", "algorithm.correction.tau_init=9.0"], "tau_min <= tau_init <= tau_max"),
    ],
)
def test_bad_correction_config_is_a_config_error(overrides, match):
    with pytest.raises(ConfigError, match=match):  # what `rlpost train` runs before any model loads
        validate(overrides, multirun=False)


def test_list_shows_corrections_with_their_seeds_and_show_explains_the_selected_one():
    listed = {name: seed for kind, name, _, seed in rows("correction")}
    assert set(listed) == {"none", "tis", "mis", "f_tis", "ais", "acrl"}
    assert listed["f_tis"] == "seed 004 #12" and listed["ais"] == "seed 004 #24" and listed["acrl"] == "seed 000 #18"
    text = explain(build_run(compose(["algorithm=gepo", "algorithm/correction=ais"])))
    assert "x correction ais:" in text and "a bf16 copy of the policy" in text
    assert "correction" not in explain(build_run(compose([])))
