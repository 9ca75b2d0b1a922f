"""Held-out few-shot adaptation: accuracy with the demonstrations minus without them (FSA-GRPO, seed 004 #2).

FSA-GRPO's claim is that the model gets better at using demonstrations, on tasks it was not trained on. With
``eval.without_demos=<column>`` (a data column holding each prompt's user turn without its demonstrations, e.g.
data=few_shot_ops's ``zero_shot``, whose held-out operators are never trained on) the greedy evaluation also
answers every prompt with that text in place of its last user turn and reports, over the prompts the criterion
scored both times::

    with_demos    = mean_i c_i(x_d)         (the greedy verdicts of the ordinary pass)
    without_demos = mean_i c_i(x_0)         (the same prompts without their demonstrations)
    gain          = with_demos - without_demos
    rows          = |prompts scored both times|

as ``<prefix>/few_shot/{with_demos,without_demos,gain,rows}``. Choices: the pairing keeps each prompt's own
difference (a prompt unscored in either pass is left out of both means); the zero-shot pass is greedy like the
ordinary one and scored by the same correctness criterion (rlpost/scoring/correctness.py); a system message stays.
"""

from __future__ import annotations

from collections.abc import Sequence


def few_shot_scores(with_demos: Sequence[bool | None], without: Sequence[bool | None]) -> dict[str, float]:
    """Per prompt the verdict with ``[N]`` and without ``[N]`` its demonstrations (None: unscored) -> with_demos,
    without_demos, gain (NaN when no prompt was scored both times) and rows."""
    pairs = [(a, b) for a, b in zip(with_demos, without, strict=True) if a is not None and b is not None]
    if not pairs:
        return {"with_demos": float("nan"), "without_demos": float("nan"), "gain": float("nan"), "rows": 0.0}
    with_mean = sum(bool(a) for a, _ in pairs) / len(pairs)
    without_mean = sum(bool(b) for _, b in pairs) / len(pairs)
    return {
        "with_demos": with_mean,
        "without_demos": without_mean,
        "gain": with_mean - without_mean,
        "rows": float(len(pairs)),
    }


def few_shot_metrics(
    with_demos: Sequence[bool | None], without: Sequence[bool | None], prefix: str
) -> dict[str, float]:
    """``few_shot_scores`` as ``<prefix>/few_shot/<name>``."""
    return {f"{prefix}/few_shot/{name}": value for name, value in few_shot_scores(with_demos, without).items()}
