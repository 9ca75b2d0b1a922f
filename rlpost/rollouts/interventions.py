"""The interventions of ``intervention_bandit`` (RAIL, seed 000 #8): the notes a frozen writer writes (hints,
critiques of the worst probe attempt) and the prompt each arm's slots are sampled under. A plan entry ``g`` is one
group: ``start`` (its first row), ``arm``, ``worst`` / ``best`` (its lowest / highest-reward probe row) and ``note``
(filled here for hint and critique; None when the writer failed)."""

from __future__ import annotations

from typing import Any

from rlpost.core.chat import completion_text
from rlpost.rollouts.base import RolloutContext, Rollouts, user_text, with_user_text
from rlpost.rollouts.conditioned import revise_prompt
from rlpost.rollouts.feedback_refine import first_paragraph


def reference(cfg: Any, row: dict) -> str:
    """The writer's reference line: the data column ``reference_column`` (empty without one)."""
    col = cfg.reference_column
    if col is None:
        return ""
    if col not in row:
        raise KeyError(f"rollout 'intervention_bandit': no data column {col!r} (reference_column)")
    return f"\n\nReference: {row[col]}"


def write_notes(cfg: Any, writer: Any, ctx: RolloutContext, prompts: list, out: Rollouts, plan: list[dict]) -> None:
    """Fill each hint / critique group's ``note`` (None: not written) with one writer call for the batch."""
    asks, owners = [], []
    for g in plan:
        row, task = ctx.rows[g["start"]], user_text(prompts[g["start"]])
        if g["arm"] == "hint" and cfg.hint_column is not None:
            g["note"] = str(row[cfg.hint_column])
        elif g["arm"] == "hint":
            asks.append(cfg.hint_instruction.format(task=task, reference=reference(cfg, row)))
            owners.append(g)
        elif g["arm"] == "critique":
            attempt = completion_text(out.completions[g["worst"]])[: cfg.max_note_chars]
            ask = cfg.critique_instruction.format(task=task, response=attempt, reference=reference(cfg, row))
            asks.append(ask)
            owners.append(g)
    if asks:
        assert writer is not None  # InterventionBandit builds it whenever critique or a written hint is an arm
        written = writer.write(asks)
        for g, text in zip(owners, written):
            g["note"] = first_paragraph(text, cfg.max_note_chars) if text else None
        ctx.log("intervention_bandit/written_frac", sum(g["note"] is not None for g in owners) / len(owners))


def intervened_prompt(cfg: Any, g: dict, prompts: list, ctx: RolloutContext, out: Rollouts) -> Any:
    """The prompt the group's k slots are sampled under (x itself for extra)."""
    x, arm = prompts[g["start"]], g["arm"]
    if arm == "hint":
        return revise_prompt(x, None, cfg.hint_template.format(hint=g["note"]))
    if arm == "critique":
        attempt = completion_text(out.completions[g["worst"]])[: cfg.max_note_chars]
        return revise_prompt(x, attempt, cfg.critique_template.format(feedback=g["note"]))
    if arm == "draft":
        col = cfg.draft_column
        if col is not None:
            text = str(ctx.rows[g["start"]][col])
            draft = text[: max(1, round(len(text) * cfg.draft_fraction))]
        else:
            draft = completion_text(out.completions[g["best"]])[: cfg.max_note_chars]
        return with_user_text(x, cfg.draft_template.format(prompt=user_text(x), draft=draft))
    return x  # extra: more natural samples
