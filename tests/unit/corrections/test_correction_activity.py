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


def test_show_warns_when_acrl_s_band_holds_the_bf16_floor():
    assert not build_run(compose(["algorithm/correction=tis"])).config_warnings()  # (nothing to correct: refused)
    acrl = build_run(compose(["algorithm/correction=acrl", "algorithm.correction.rollout_precision=bf16"]))
    (band,) = acrl.config_warnings()  # the default band [0.01, 0.05] holds the floor 0.03-0.04
    assert "band [0.01, 0.05] contains the bf16 mismatch floor" in band
    above = [
        "algorithm/correction=acrl",
        "algorithm.correction.rollout_precision=bf16",
        "algorithm.correction.band_low=0.05",
    ]
    assert not build_run(compose([*above, "algorithm.correction.band_high=0.1"])).config_warnings()


def test_acrl_s_inert_reason_reads_in_band():
    acrl = AdaptiveControl(AdaptiveControl.Config(rollout_precision="bf16"))
    run = build_run(compose(["algorithm/correction=acrl", "algorithm.correction.rollout_precision=bf16"]))
    rows = [{"rlpost/correction/in_band": 1.0}, {"rlpost/correction/in_band": 1.0}]
    assert acrl.inert_reason(rows, run).startswith("the real discrepancy stayed inside the band at every step (the")
    assert acrl.inert_reason([{"rlpost/correction/in_band": 0.0}], run) is None
