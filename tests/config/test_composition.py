"""The composition matrix (rlpost/dev/composition.py, docs/composition.md): every combine option against every
advantage, rollout, correction, bundle, environment, safety and shaping option (issue 20).

Every cell either builds or is refused by a ConfigError (any other exception fails the matrix). What an
accepted cell means:
- a combine that returns rewards (weighted_sum, focal): the advantage estimator reads them, and each
  estimator's own hand-worked tests apply (tests/unit/advantages/);
- a combine that returns advantages (odrpo, rdpo, decoupled): the advantages that reach the loss are
  exactly the combine's, for every accepted option (checked here on one batch per cell), so no stage
  re-standardizes or shapes them; refused cells give the reason a stage would have misread them.
Pairs not involving the combine are covered by tests/config/test_compose.py (rollout x bundle x reward,
correction x bundle x reward) and tests/config/test_env_compositions.py (episodes x every option).
"""

from __future__ import annotations

import pytest
import torch

from rlpost.core.errors import ConfigError
from rlpost.dev.composition import DOC, columns, matrix, rows, section, updated_doc
from rlpost.pipeline import PipelineInputs, run_pipeline
from rlpost.run import BuiltRun

from support.pipeline import pipeline_inputs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cells():
    return matrix()


def test_the_page_is_current(cells):
    text = DOC.read_text()
    assert updated_doc(text, section(cells)) == text, "stale: run python -m rlpost.dev.composition"


def test_the_matrix_covers_every_option():
    labels = {(row.axis, row.label) for row in rows()}
    assert {("advantage", "gepo"), ("rollout", "generic_negative"), ("correction", "tis"), ("bundle", "dapo"),
            ("environment", "calculator"), ("safety", "whiten_rewards"), ("shaping", "kl.placement=reward")} <= labels  # fmt: skip
    assert {"odrpo", "rdpo", "decoupled", "weighted_sum", "focal"} <= set(columns())


def batch(run: BuiltRun, g: int = 4, groups: int = 2) -> PipelineInputs:
    """Random reward terms (scores 0..3, one NaN) for the run's terms; no rollout kinds (plain sampling)."""
    n, r = g * groups, len(run.reward.names)
    terms = torch.randint(0, 4, (n, r), generator=torch.Generator().manual_seed(0)).float()
    terms[1, 0] = float("nan")
    return pipeline_inputs(terms, g)


def test_accepted_advantage_combines_reach_the_loss_unchanged(cells):
    checked = 0
    for row, by_combine in cells.items():
        for combine, built in by_combine.items():
            if isinstance(built, ConfigError) or built.reward.combine.produces != "advantages":
                continue
            x = batch(built)
            expected, _ = built.reward.combined(x.reward_terms, x.num_generations)
            result = run_pipeline(x, built.reward, built.algorithm)
            got = result.advantages.values
            assert torch.equal(got, expected.nan_to_num(0.0)), (row, combine)
            assert torch.isfinite(got).all() and got.abs().sum() > 0, (row, combine)
            checked += 1
    assert checked > 100


STAGE_KEYS = ("algorithm/advantage=", "algorithm/rollout=", "whiten_rewards", "overlong.soft_penalty", "kl.placement=")


def test_every_refusal_names_the_stage_it_protects(cells):
    refused = 0
    for row, by_combine in cells.items():
        for combine, built in by_combine.items():
            if not isinstance(built, ConfigError):
                continue
            message, refused = str(built), refused + 1
            if "needs reward.combine=weighted_sum" in message:  # tiar and turn_grpo read the weighted sum itself
                assert row.label in ("tiar", "turn_grpo"), (row, combine)
                continue
            assert combine not in ("weighted_sum", "focal"), (row, combine, message)  # rewards compose everywhere
            assert message.startswith(f"reward/combine={combine} returns group-centred advantages"), message
            assert any(key in message for key in STAGE_KEYS), (row, combine, message)
    assert refused > 40
