"""infill_likelihood: maximum-likelihood infilling, a Cross-Entropy Game (Frost, seed 004 #1).

The policy fills the blank of ``prefix ____ suffix``; a frozen judge LM scores the filled sentence by how
likely the suffix becomes after the fill::

    r = (1 / |S|) sum_{t in S} log p_judge(s_t | prefix, middle, s_<t)        middle = the completion's text

The reward is differentiable in the middle's one-hot tokens (``score_onehot``), which is what Frost's
token swaps use (``algorithm/rollout=frost``, rlpost/rollouts/frost.py).

Choices where the abstract is silent: the judge reads plain text (no chat template): the prefix, then
``" " + middle``, then ``" " + suffix``, each tokenized on its own so the three parts have fixed token
boundaries; the middle is the completion's first line, stripped of quotes and of the blank marker, cut
to ``max_middle_tokens``; an empty middle scores ``empty`` (-10, below any real fill). ``judge: null``
scores with a frozen copy of the run's own model. A mean over suffix tokens, so sentences of different
lengths score on one scale.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.core.chat import completion_text
from rlpost.core.schema import Range
from rlpost.models.loading import ModelConfig
from rlpost.rewards.base import REWARDS, Reward, column


def middle_text(completion: Any) -> str:
    """The fill: the completion's first non-empty line, without quotes or blank markers."""
    text = completion_text(completion).strip()
    line = next((part for part in text.splitlines() if part.strip()), "")
    return line.replace("____", " ").replace("___", " ").strip().strip("\"'").strip()


@REWARDS.register("infill_likelihood")
class InfillLikelihood(Reward):
    """Mean log-likelihood of the suffix under a frozen judge LM, given the prefix and the completion's fill."""

    seed = "seed 004 #1"

    @dataclass(frozen=True)
    class Config:
        prefix_column: str = "prefix"  # dataset column: the text before the blank
        suffix_column: str = "suffix"  # dataset column: the text after the blank (scored)
        judge: ModelConfig | None = None  # the frozen judge LM (null: a copy of the run's model)
        max_middle_tokens: Annotated[int, Range(ge=1)] = 16  # the fill is cut to this many judge tokens
        empty: Annotated[float, Range()] = -10.0  # the reward of an empty fill
        device: Literal["auto", "cpu", "cuda"] = "auto"  # where the judge runs

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.judge = cfg.judge  # null until check_run copies the run's model config
        self.model: Any = None
        self.tokenizer: Any = None
        self._lock = threading.Lock()

    def __getstate__(self):  # pickling (TRL's async worker) drops the loaded model and the lock
        return {**self.__dict__, "model": None, "tokenizer": None, "_lock": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def check_run(self, run: Any) -> None:
        if self.judge is None:
            self.judge = run.model

    def load(self) -> tuple[Any, Any]:
        from rlpost.models.loading import load_model, load_tokenizer

        if self.judge is None:
            raise ValueError("infill_likelihood: params.judge is null and no run set it; give an rlpost model config")
        if self.model is None:
            device = self.cfg.device
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            self.tokenizer = load_tokenizer(self.judge)
            self.model = load_model(self.judge).to(device).eval().requires_grad_(False)
        return self.model, self.tokenizer

    def parts(self, prefix: str, middle: str, suffix: str) -> tuple[list[int], list[int], list[int]]:
        """Judge token ids of the prefix, the middle (``middle_ids``) and the suffix (``" " + suffix``)."""
        return self._ids(prefix), self.middle_ids(middle), self._ids(" " + suffix)

    def middle_ids(self, middle: str) -> list[int]:
        """The judge ids ``[m]`` the reward scores for a fill: ``" " + middle`` cut to ``max_middle_tokens`` (``[]``
        for an empty fill)."""
        return self._ids(" " + middle)[: self.cfg.max_middle_tokens] if middle else []

    def _ids(self, text: str) -> list[int]:
        return self.load()[1](text, add_special_tokens=False)["input_ids"]

    def score_ids(self, prefix: list[int], middles: list[list[int]], suffix: list[int]) -> torch.Tensor:
        """Rewards ``[M]`` of middles of one length ``m`` (token ids ``[M][m]``) between one prefix and suffix."""
        model = self.load()[0]
        rows = torch.tensor([prefix + middle + suffix for middle in middles], device=model.device)
        with torch.no_grad():
            logits = model(rows).logits.float()
        return suffix_logprob(logits, rows, len(suffix))

    def score_onehot(self, prefix: list[int], onehot: torch.Tensor, suffix: list[int]) -> torch.Tensor:
        """The reward of one middle given as one-hot rows ``[m, V]`` (differentiable in ``onehot``)."""
        model = self.load()[0]
        embed = model.get_input_embeddings().weight  # [V, d]
        ids = lambda x: torch.tensor(x, device=embed.device, dtype=torch.long)  # noqa: E731
        inputs = torch.cat([embed[ids(prefix)], onehot.to(embed.dtype) @ embed, embed[ids(suffix)]])[None]
        logits = model(inputs_embeds=inputs).logits.float()
        full = torch.cat([ids(prefix), onehot.argmax(-1), ids(suffix)])[None]
        return suffix_logprob(logits, full, len(suffix))[0]

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` with the prefix / suffix columns ``[N]`` -> rewards ``[N]`` (mean suffix log-prob)."""
        n = len(completions)
        prefixes = column(kwargs, self.cfg.prefix_column, n, self.registry_name)
        suffixes = column(kwargs, self.cfg.suffix_column, n, self.registry_name)
        out: list[float | None] = []
        with self._lock:
            for completion, prefix, suffix in zip(completions, prefixes, suffixes):
                if prefix is None or suffix is None:
                    out.append(None)
                    continue
                out.append(self.score_fill(str(prefix), middle_text(completion), str(suffix)))
        return out

    def score_fill(self, prefix: str, middle: str, suffix: str) -> float:
        """The reward of one fill (``middle_text`` of a completion) between ``prefix`` and ``suffix``."""
        p, m, s = self.parts(prefix, middle, suffix)
        return self.cfg.empty if not m else float(self.score_ids(p, [m], s)[0])


def suffix_logprob(logits: torch.Tensor, ids: torch.Tensor, n_suffix: int) -> torch.Tensor:
    """Mean log-prob of the last ``n_suffix`` tokens of each row: logits ``[M, L, V]``, ids ``[M, L]`` -> ``[M]``."""
    predicted = torch.log_softmax(logits[:, -n_suffix - 1 : -1], dim=-1)  # position t predicts token t + 1
    return predicted.gather(-1, ids[:, -n_suffix:, None])[..., 0].mean(-1)
