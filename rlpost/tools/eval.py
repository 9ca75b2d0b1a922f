"""``rlpost eval``: accuracy, reward, pass@k and mean length on a split of any data config.

    rlpost eval model=smollm2-135m data=basic_arithmetic size=100               # greedy
    rlpost eval run=outputs/2026-01-01/12-00-00 samples=8 pass_k=[1,4,8]         # a run's final checkpoint
    rlpost eval model=hf model.path=outputs/merge/.../model                     # a merged model
    rlpost eval -m run=<dir> checkpoint=checkpoint-10,final                      # a sweep over checkpoints
    rlpost eval model=smollm2-135m compose.positives=[A,B] compose.negative=N    # PRISM: composed LoRA policies

Greedy (``greedy=true``): one completion per prompt, scored by the reward terms; ``eval/accuracy``
is the first term's mean (the same numbers as a training run's held-out eval). Sampled
(``samples=n``): n completions per prompt at ``temperature``; ``sampled/pass@k`` (unbiased
estimator), ``sampled/accuracy``, ``sampled/reward``, within-group ``reward_std``. Results are
written as JSON (``out``, default ``<hydra run dir>/eval.json``) and printed as a table. During
training the same greedy numbers are logged every ``eval.every`` steps (rlpost/evaluation/callback.py).
With ``compose.positives`` (PRISM, seed 000 #13, rlpost/models/prism.py) the policy is ``model`` plus LoRA adapters
decoded with composed log-probabilities, ``z_base + sum_j w_j (z_j - z_base) - gamma (z_neg - z_base)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from rlpost.app import launch, tool
from rlpost.core.config import check_columns, readout_columns
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.models.prism import ComposeSettings, check_compose
from rlpost.runs.ranks import is_main
from rlpost.runs.rundir import write_atomic
from rlpost.tools.policy import PolicySettings, check_policy, describe, load_policy, policy_correctness
from rlpost.tools.runref import apply_run


@dataclass(frozen=True)
class EvalCommand(PolicySettings):
    size: int | None = None
    greedy: bool = True
    samples: int = 0
    pass_k: list[int] = field(default_factory=lambda: [1, 4, 8])
    majority_answer: str | None = "last_number"  # what a sample votes for in maj@k (null: no maj@k)
    group_by: str | None = None
    variants_of: str | None = None  # a column naming the question a row is a variant of: group accuracy, consistency
    calibration: str | None = None  # a column of numeric targets: CRPS, coverage, rank correlation of the samples
    calibration_level: Annotated[float, Range(gt=0, lt=1)] = 0.8  # the central interval whose coverage is reported
    without_demos: str | None = None  # a column of each prompt's turn without demonstrations: accuracy with - without
    compose: ComposeSettings = field(default_factory=ComposeSettings)  # PRISM: decode with composed LoRA policies


def check(s: EvalCommand, overrides: list[str]) -> EvalCommand:
    reward, dataset = check_policy(s, s.size, "size")
    check_compose(s.compose, s.adapter, s.checkpoint, s.model)
    if not s.greedy and s.samples < 1:
        raise ConfigError("greedy=false and samples=0 leave nothing to evaluate; set samples=<n> (e.g. 8).")
    if s.samples < 0 or any(k < 1 for k in s.pass_k):
        raise ConfigError(f"samples={s.samples} and pass_k={list(s.pass_k)} must be >= 0 and >= 1.")
    from rlpost.rewards.group import ANSWER_CHOICES

    if s.majority_answer is not None and s.majority_answer not in ANSWER_CHOICES:
        raise ConfigError(
            f"Invalid majority_answer={s.majority_answer!r}. Valid choices: {', '.join(ANSWER_CHOICES)} (or null)."
        )
    check_columns(readout_columns(s), dataset.column_names, f"the {s.split} split")
    for key in ("variants_of", "without_demos"):
        if getattr(s, key) is not None:
            if not s.greedy:
                raise ConfigError(f"{key}={getattr(s, key)!r} compares the greedy verdicts; set greedy=true.")
            policy_correctness(s, reward, required_by=f"{key}={getattr(s, key)!r}")
    if s.calibration is not None and s.samples < 2:
        raise ConfigError(
            f"calibration={s.calibration!r} reads each prompt's sampled predictions as a distribution; set samples >= 2."
        )
    return s


def evaluate_policy(s: EvalCommand) -> dict[str, float]:
    """Load the policy and compute every requested metric (greedy and/or sampled)."""
    from transformers import set_seed

    from rlpost.evaluation.evaluate import evaluate, evaluate_sampled

    reward, dataset = check_policy(s, s.size, "size")
    correct = policy_correctness(s, reward)
    set_seed(s.seed)
    model, tokenizer = load_policy(s)
    if s.compose.positives:  # PRISM: the base plus its positive and negative adapters, composed per token
        from rlpost.models.prism import load_composed

        folders = check_compose(s.compose, s.adapter, s.checkpoint, s.model)
        model = load_composed(model, folders, s.compose, tokenizer.eos_token_id)
    results: dict[str, float] = {}
    if s.greedy:
        results.update(
            evaluate(
                model,
                tokenizer,
                dataset,
                reward.funcs,
                reward.names,
                reward.scored,
                max_new_tokens=s.max_new_tokens,
                correct=correct,
                batch_size=s.batch_size,
                size=s.size,
                group_by=s.group_by,
                variants_of=s.variants_of,
                show_progress=s.progress,
                without_demos=s.without_demos,
            )
        )
    if s.samples:
        results.update(
            evaluate_sampled(
                model,
                tokenizer,
                dataset,
                reward.funcs,
                reward.scored,
                n=s.samples,
                ks=list(s.pass_k),
                max_new_tokens=s.max_new_tokens,
                temperature=s.temperature,
                top_p=s.top_p,
                correct=correct,
                batch_size=s.batch_size,
                size=s.size,
                show_progress=s.progress,
                majority_answer=s.majority_answer,
                calibration=s.calibration,
                calibration_level=s.calibration_level,
            )
        )
    return results


def print_table(title: str, results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("metric", "value", title=title)
    for key, value in results.items():
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    Console().print(table)


def run(s: EvalCommand, output_dir: str, overrides: list[str]) -> int:
    results = evaluate_policy(s)
    out = Path(s.out) if s.out else Path(output_dir) / "eval.json"
    size = int(results.get("eval/num_prompts") or results.get("sampled/num_prompts") or 0)
    compose = {**vars(s.compose)} if s.compose.positives else None
    record = {
        **describe(s),
        "compose": compose,
        "size": size,
        "samples": s.samples,
        "overrides": overrides,
        "results": results,
    }
    if is_main():  # one writer per path (rlpost/runs/ranks.py)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, json.dumps(record, indent=2) + "\n")
    print_table(f"{s.model.display_name} on {record['data']} ({s.split}, {size} prompts)", results)
    print(f"results: {out}")
    return 0


APP = tool("eval", "eval", EvalCommand, check, run, prepare=apply_run)


def main(args: list[str]) -> int:
    return launch(APP, args)
