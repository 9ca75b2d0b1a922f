"""``Correction.activity`` by hand: the share of counted tokens (sequences, for [N, 1] weights) whose weight is not 1;
ACRL's warning in ``rlpost show`` and its inert reason (rlpost/corrections/)."""

from __future__ import annotations

import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.corrections.acrl import AdaptiveControl
from rlpost.corrections.base import CorrectionInputs
from rlpost.corrections.none import NoCorrection
from rlpost.corrections.tis import TruncatedIS


def inputs(mask) -> CorrectionInputs:
    mask = torch.tensor(mask)
    zeros = torch.zeros_like(mask)
    return CorrectionInputs(
        zeros, zeros, mask, torch.zeros(mask.size(0), 1), torch.zeros(mask.size(0), dtype=torch.bool)
    )


def test_share_of_weights_that_are_not_one():
    tis = TruncatedIS(TruncatedIS.Config())
    x = inputs([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # five counted tokens
    # (0, 1) = 0.5 and (1, 1) = 2 differ; (1, 0) = 1 + 1e-7 is within the tolerance; (1, 2) is not counted: 2 / 5
    weights = torch.tensor([[1.0, 0.5, 1.0], [1.0000001, 2.0, 3.0]])
    assert tis.activity(x, weights) == 2 / 5
    # sequence weights [N, 1]: row 2 has no counted token; rows 0 and 1: one of two is not 1
    rows = inputs([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    assert tis.activity(rows, torch.tensor([[1.0], [0.9], [0.5]])) == 0.5
    assert NoCorrection(NoCorrection.Config()).activity(x, torch.ones(2, 1)) is None


def test_show_warns_when_acrl_s_band_holds_the_floor_or_controls_the_real_discrepancy_below_it():
    assert not build_run(compose(["algorithm/correction=tis"])).config_warnings()  # (nothing to correct: refused)
    acrl = ["algorithm/correction=acrl", "algorithm.correction.rollout_precision=bf16"]
    old_band = ["algorithm.correction.band_low=0.01", "algorithm.correction.band_high=0.05"]
    (band,) = build_run(compose([*acrl, *old_band])).config_warnings()  # [0.01, 0.05] holds 0.03-0.04
    assert "band [0.01, 0.05] contains the bf16 mismatch floor" in band
    assert not build_run(compose(acrl)).config_warnings()  # the shipped band [0.05, 0.1] lies above it
    # fp8 rollouts: the shipped band lies below their floor 0.13-0.20; admitted (the default) can meet it
    assert not build_run(compose(["algorithm/correction=acrl"])).config_warnings()
    fp8_band = ["algorithm.correction.band_low=0.1", "algorithm.correction.band_high=0.2"]
    (band,) = build_run(compose(["algorithm/correction=acrl", *fp8_band])).config_warnings()
    assert "band [0.1, 0.2] contains the fp8 mismatch floor" in band
    (real,) = build_run(
        compose(["algorithm/correction=acrl", "algorithm.correction.controlled=real"])
    ).config_warnings()
    assert "controlled=real with the band [0.05, 0.1] below the fp8 mismatch floor" in real


def test_acrl_s_inert_reasons():
    floor = AdaptiveControl.Config(rollout_precision="bf16", band_low=0.01, band_high=0.05, controlled="real")
    run = build_run(compose(["algorithm/correction=acrl"]))
    rows = [{"rlpost/correction/in_band": 1.0}, {"rlpost/correction/in_band": 1.0}]
    reason = AdaptiveControl(floor).inert_reason(rows, run)
    assert reason.startswith("the real discrepancy stayed inside the band at every step (the band contains the bf16")
    acrl = AdaptiveControl(AdaptiveControl.Config(rollout_precision="bf16"))  # band [0.05, 0.1]
    assert "band contains" not in acrl.inert_reason(rows, run)
    # bf16 rollouts below the shipped band: the gate only opened
    below = [{"rlpost/correction/in_band": 0.0, "rlpost/correction/admitted_discrepancy": d} for d in (0.03, 0.04)]
    assert acrl.inert_reason(below, run).startswith("the admitted discrepancy stayed below band_low=0.05")
    # above the band, tau tightened but never below any token's |Delta|
    above = [
        {"rlpost/correction/in_band": 0.0, "rlpost/correction/admitted_discrepancy": 0.2, "rlpost/correction/tau": t}
        for t in (0.5, 0.3)
    ]
    assert acrl.inert_reason(above, run).startswith("tau (down to 0.3) stayed above every token's")
