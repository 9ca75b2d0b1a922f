"""``rlpost align-simulator``: fit the simulated user to logged dialogues and report the sim-to-real gap before and
after (calibrated interactive RL, seed 004 #5; the method: rlpost/tools/sim_alignment.py).

    rlpost align-simulator out=runs/simulator                    # SmolLM2 on the bundled booking dialogues
    rlpost train recipe=calibrated_irl data.env.user_overrides.path=runs/simulator/model
    rlpost align-simulator out=runs/policy side=assistant         # a policy warm start on the assistant turns
    rlpost train recipe=calibrated_irl model=hf model.path=runs/policy/model

Writes ``<out>/model`` (the aligned simulator: safetensors and tokenizer, for ``data.env.user_model=hf``) and
``<out>/alignment.json`` (the gap before and after, the losses). ``out`` must not exist yet; everything is written
into a temporary folder that is renamed to ``out`` at the end, so a killed run leaves nothing half-written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from rlpost.app import launch, tool
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range

USER = (
    "You are a traveller talking to a train booking assistant. You want a {goal_class} class ticket to "
    "{goal_city} on {goal_day}. Answer the assistant's questions in one short sentence each."
)


@dataclass(frozen=True)
class AlignSettings:
    out: str | None = None  # the output folder (required; must not exist): model/ and alignment.json
    side: Literal["user", "assistant"] = "user"  # fit the simulator (user turns) or warm-start the policy (assistant)
    user_model: str = "smollm2-135m"  # conf/model option to fit: the simulator (side=assistant: the policy)
    user_overrides: dict[str, Any] = field(default_factory=dict)  # its ModelConfig fields
    user_prompt: str = USER  # the simulator's persona, formatted with the dialogue's goal_* columns
    dialogues: str = "recipes/data/booking_dialogues.jsonl"  # logged dialogues to fit
    eval_dialogues: str = "recipes/data/booking_dialogues_eval.jsonl"  # held-out logged dialogues (the gap)
    steps: Annotated[int, Range(ge=0)] = 60  # AdamW steps
    batch_size: Annotated[int, Range(ge=1)] = 8  # logged user turns per step
    learning_rate: Annotated[float, Range(gt=0)] = 2.0e-5  # AdamW learning rate (full fine-tuning)
    max_new_tokens: Annotated[int, Range(ge=1)] = 32  # the simulator's reply length when the gap is measured
    seed: int = 0  # example order


def read_dialogues(path: str, key: str) -> list[dict]:
    from rlpost.core.schema import resolve_data_path

    try:
        text = Path(resolve_data_path(path)).read_text()
    except (OSError, ValueError) as err:
        raise ConfigError(f"{key}={path!r}: {err}") from None
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    bad = [i + 1 for i, r in enumerate(rows) if not isinstance(r.get("turns"), list)]
    if not rows or bad:
        raise ConfigError(f"{key}={path!r}: every line needs a 'turns' list (lines {bad[:5]})" if bad else
                          f"{key}={path!r} holds no dialogue")  # fmt: skip
    return rows


def side_examples(s: AlignSettings, logged: list[dict]) -> list:
    """The examples of ``s.side``: the user turns in the simulator's context, or the assistant turns in the policy's."""
    from rlpost.envs.simulated_user import SYSTEM
    from rlpost.tools.sim_alignment import examples, policy_examples

    if s.side == "user":
        return [e for d in logged for e in examples(d, s.user_prompt)]
    return [e for d in logged for e in policy_examples(d, SYSTEM)]


def check(s: AlignSettings, overrides: list[str]) -> AlignSettings:
    from rlpost.models.options import named_model_config

    if not s.out:
        raise ConfigError("out is required: rlpost align-simulator out=<new folder>.")
    if Path(s.out).expanduser().exists():
        raise ConfigError(f"out={s.out!r} exists; give a new folder (nothing is overwritten).")
    named_model_config(s.user_model, s.user_overrides, "user_model", "user_overrides")
    for path, key in ((s.dialogues, "dialogues"), (s.eval_dialogues, "eval_dialogues")):
        try:
            side_examples(s, read_dialogues(path, key))
        except KeyError as err:
            raise ConfigError(f"{key}: a dialogue lacks the column {err} that user_prompt uses") from None
    return s


def run(s: AlignSettings, output_dir: str, overrides: list[str]) -> int:
    import os

    from rich.progress import Progress

    from rlpost.models.loading import load_model, load_tokenizer
    from rlpost.models.options import named_model_config
    from rlpost.runs.rundir import write_atomic
    from rlpost.tools.sim_alignment import MATCH, align, gap

    config = named_model_config(s.user_model, s.user_overrides, "user_model", "user_overrides")
    model, tokenizer = load_model(config), load_tokenizer(config)
    train = side_examples(s, read_dialogues(s.dialogues, "dialogues"))
    held_out = side_examples(s, read_dialogues(s.eval_dialogues, "eval_dialogues"))
    before = gap(model, tokenizer, held_out, s.batch_size, s.max_new_tokens, s.side)
    what = "aligning the simulator" if s.side == "user" else "warm-starting the policy"
    with Progress(transient=True) as progress:
        task = progress.add_task(what, total=s.steps)
        losses = align(model, tokenizer, train, s.steps, s.learning_rate, s.batch_size, s.seed,
                       lambda loss: progress.update(task, advance=1, description=f"{what} (loss {loss:.3f})"))  # fmt: skip
    after = gap(model, tokenizer, held_out, s.batch_size, s.max_new_tokens, s.side)
    out = Path(s.out or "").expanduser()
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    report = {"side": s.side, "before": before, "after": after, "losses": losses, "train_turns": len(train),
              "held_out_turns": len(held_out), "settings": {k: str(v) for k, v in vars(s).items()}}  # fmt: skip
    write_atomic(tmp / "alignment.json", json.dumps(report, indent=2))
    os.replace(tmp, out)
    print(f"{f'gap on held-out {s.side} turns':<33} {'before':>8} {'after':>8}")
    for key in ("nll", MATCH[s.side][0], "length_ratio"):
        print(f"{key:<33} {before[key]:>8.3f} {after[key]:>8.3f}")
    fitted = "aligned simulator" if s.side == "user" else "warm-started policy"
    print(f"{len(train)} logged {s.side} turns, {s.steps} steps; {fitted}: {out / 'model'}")
    return 0


APP = tool("align-simulator", "align_simulator", AlignSettings, check, run)


def main(args: list[str]) -> int:
    return launch(APP, args)
