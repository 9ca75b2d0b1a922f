"""``rlpost <command> [overrides]``: the top floor. Each subcommand is one module of ``rlpost/tools/``
(imported only when it runs) whose ``main(args)`` goes through the one launch path, rlpost/app.py
(compose, validate every job, Hydra's errors as one line, sweeps, then ``hydra.main``). Nothing in
the package imports this module.
"""

from __future__ import annotations

import difflib
import sys

USAGE = """usage: rlpost <command> [overrides]

commands:
  train   train a policy: rlpost train algorithm=dapo reward=math_answer [-m for sweeps]
  show    the composed config and a plain-language explanation of the run
  list    every choice: components and config group options: rlpost list [kind | group, e.g. loss, algorithm, recipe]
  subspace  reference subspaces from two checkpoints: rlpost subspace --from A --to B --rank 8 --out FILE
  sft     supervised fine-tuning on targets made from the data: rlpost sft ['target="{expression} = {answer}"'] [-m]
  train-rm  a reward model from preference pairs or valuations: rlpost train-rm [objective=regression] [data.train=...]
  merge   interpolate / task-arithmetic / TIES checkpoints, merge LoRA: rlpost merge models=[A,B] alpha=0.5 [-m]
  eval    accuracy, reward, pass@k, length on held-out data: rlpost eval run=<run dir> | model=... [samples=8]
  plot    PNG curves of runs or sweeps: rlpost plot runs=[<run or multirun dir>,...] keys=[reward,loss] smooth=5
  sweep-summary  final/best metrics per job of a multirun (terminal, CSV, markdown): rlpost sweep-summary dir=<multirun dir>
  compare  methods across seeds: mean, IQM, bootstrap 95% CI, paired tests, curves: rlpost compare runs=[...] | dir=...
  diagnose  RL headroom before training (pass@k - pass@1, reward variance in groups): rlpost diagnose [model=...] [data=...]
  synth-rubrics  rubric-annotated RL data from documents (ARES): rlpost synth-rubrics documents=... [out=data.jsonl]
  revise-rubrics  revise a run's rubric from its evaluation memory (AMARIS): rlpost revise-rubrics run=<run dir>
  align-simulator  fit the simulated user to logged dialogues, gap before/after (calibrated IRL): rlpost align-simulator out=DIR
  probe   reward-seeking rates of a run's checkpoints (grader vs user/developer): rlpost probe run=<run dir> [belief=context]
  report  a self-contained HTML page of a run or a sweep: rlpost report path=<run or multirun dir> [out=FILE]
  serve   TRL's vLLM server for hardware=vllm-server rollouts: rlpost serve model=... [hardware.vllm_server_port=8000]
"""
# rlpost <command> -> its module rlpost/tools/<module>.py (each module's main(args) runs one app)
COMMANDS: dict[str, str] = {
    "train": "train",
    "show": "show",
    "list": "list",
    "subspace": "subspace",
    "sft": "sft",
    "train-rm": "train_rm",
    "merge": "merge",
    "eval": "eval",
    "plot": "plot",
    "sweep-summary": "sweep_summary",
    "compare": "compare",
    "diagnose": "diagnose",
    "synth-rubrics": "synth_rubrics",
    "revise-rubrics": "revise_rubrics",
    "align-simulator": "align_simulator",
    "probe": "probe",
    "report": "report",
    "serve": "serve",  # scale-out
}


def main(argv: list[str] | None = None) -> int:
    import importlib

    from rlpost.app import fail
    from rlpost.launch.accelerate import restore_stop_signals

    restore_stop_signals()  # a process started by `rlpost train hardware.num_processes=N` (rlpost/launch/)
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return fail(f"Unknown command {command!r}.{hint} Commands: {', '.join(COMMANDS)}.")
    return importlib.import_module(f"rlpost.tools.{COMMANDS[command]}").main(rest)


if __name__ == "__main__":
    sys.exit(main())
