"""few_shot_gain (FSA-GRPO, seed 004 #2): reward how much a completion draws on the demonstrations in its prompt.

Seed 004 #2 trains with "a specially designed reward to encourage the model to leverage few-shot
demonstrations" next to the task reward ("auxiliary reward weighting"), and names no formula. The
reading implemented here is the log-likelihood gain of the completion from the demonstrations, under a
frozen scorer LM ``s`` (an rlpost model config; ``model: null``, the default, is a frozen copy of the
run's own base model, set in ``check_run``, so the gain is measured by the model being adapted)::

    g(y) = (1/|y|) sum_t [ log s(y_t | demos, x, y_<t) - log s(y_t | x, y_<t) ]     (reduce: mean)
    r(y) = clip(scale * g(y), -clip, clip)

i.e. the pointwise mutual information of the completion and the demonstrations: positive when the
demonstrations made this completion more likely than the bare question did. It varies within a GRPO
group, unlike "score with demos minus a per-prompt zero-shot baseline score", which group
normalization would cancel. Combine it with the task reward by weights, e.g.
``reward.terms=[{name: exact_match}, {name: few_shot_gain, weight: 0.1}]``.

Choices where nothing dictated one:
- With demos = the prompt the completion was sampled from; without = ``zero_shot_column`` (the row's bare
  question, e.g. the ``question`` column that ``data.template`` expanded with demonstrations): for a
  conversational prompt it replaces the content of the last user message (a system message stays).
- The scorer is a separate frozen copy (a scorer that moved with the policy would reward its own drift);
  prompts are rendered with its chat template (generation prompt opened), the completion text is
  re-tokenized by its tokenizer, and ``max_length`` keeps the last tokens of the context. One sequence
  per forward pass (no padding to get wrong); ``reduce: sum`` sums instead of averaging over tokens.
- An empty completion, or a row whose column is None, is unscorable (None).
- Logged: ``<term>/gain`` (mean unclipped g) and ``<term>/clipped`` (fraction clipped).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.core.chat import completion_text
from rlpost.core.schema import Range
from rlpost.models.loading import ModelConfig
from rlpost.rewards.base import REWARDS, ParamError, Reward, column


def gain(with_demos: torch.Tensor, without: torch.Tensor, reduce: str) -> float:
    """Per-token log-probs of one completion ``[T]`` with and without demos -> g (mean or sum of the difference)."""
    diff = with_demos - without
    return float(diff.mean() if reduce == "mean" else diff.sum())


def zero_shot_prompt(prompt: Any, question: str) -> Any:
    """``prompt`` with its last user message (or the whole string) replaced by ``question``."""
    if isinstance(prompt, list):
        last = max(i for i, m in enumerate(prompt) if m.get("role") == "user")
        return [*prompt[:last], {**prompt[last], "content": question}, *prompt[last + 1 :]]
    return question


@REWARDS.register("few_shot_gain")
class FewShotGain(Reward):
    """Log-likelihood gain of the completion from the prompt's demonstrations under a frozen scorer LM."""

    @dataclass(frozen=True)
    class Config:
        zero_shot_column: str = "question"  # dataset column with the prompt text without demonstrations
        model: ModelConfig | None = None  # the frozen scorer, an rlpost model config (null: a copy of the run's model)
        reduce: Literal["mean", "sum"] = "mean"  # average or sum the per-token gain
        scale: Annotated[float, Range()] = 1.0  # multiplier of the gain
        clip: Annotated[float, Range(gt=0)] = 5.0  # |reward| bound after scaling
        max_length: Annotated[int, Range(ge=1)] = 1024  # context tokens kept (the last ones) before the completion
        device: Literal["auto", "cpu", "cuda"] = "auto"  # where the scorer runs

    def __init__(self, cfg: Config):
        if cfg.clip <= 0:
            raise ParamError("clip", f"must be > 0, got {cfg.clip}")
        if cfg.max_length < 1:
            raise ParamError("max_length", f"must be >= 1, got {cfg.max_length}")
        super().__init__(cfg)
        self.scorer = cfg.model  # null until check_run copies the run's model config
        self._model: Any = None  # loaded on first use (a transformers model / tokenizer)
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def __getstate__(self):  # pickling (TRL's async worker) drops the loaded model and the lock
        return {**self.__dict__, "_model": None, "_tokenizer": None, "_lock": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def check_run(self, run: Any) -> None:
        """Called by ``build_run``: ``model: null`` scores with a frozen copy of the run's (base) model."""
        if self.scorer is None:
            self.scorer = run.model

    def load(self) -> None:
        from rlpost.models.loading import load_model, load_tokenizer

        if self.scorer is None:
            raise ValueError("few_shot_gain: params.model is null and no run set it; give an rlpost model config")
        if self._model is None:
            device = self.cfg.device
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            self._tokenizer = load_tokenizer(self.scorer)
            self._model = load_model(self.scorer).to(device).eval().requires_grad_(False)

    def context_ids(self, prompt: Any) -> list[int]:
        tok = self._tokenizer
        if isinstance(prompt, list):
            text = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        else:
            text = str(prompt)
        return tok(text, add_special_tokens=False)["input_ids"][-self.cfg.max_length :]

    @torch.no_grad()
    def token_logprobs(self, prompt: Any, completion: str) -> torch.Tensor:
        """log s(y_t | context, y_<t) of each completion token ``[T]`` (one unpadded forward)."""
        context = self.context_ids(prompt)
        target = self._tokenizer(completion, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([context + target], device=self._model.device)
        logits = self._model(ids).logits[0, len(context) - 1 : -1].float()  # [T, V]: position t predicts t+1
        return torch.log_softmax(logits, -1).gather(1, ids[0, len(context) :, None])[:, 0].cpu()

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``prompts [N]``, ``completions [N]``, the zero-shot column ``[N]`` -> rewards ``[N]`` in [-clip, clip]."""
        questions = column(kwargs, self.cfg.zero_shot_column, len(completions), self.registry_name)
        rewards: list[float | None] = []
        gains: list[float] = []
        with self._lock:
            self.load()
            for prompt, completion, question in zip(prompts, completions, questions):
                text = completion_text(completion)
                if question is None or not self._tokenizer(text, add_special_tokens=False)["input_ids"]:
                    rewards.append(None)
                    continue
                with_demos = self.token_logprobs(prompt, text)
                without = self.token_logprobs(zero_shot_prompt(prompt, str(question)), text)
                g = gain(with_demos, without, self.cfg.reduce)
                gains.append(g)
                rewards.append(max(-self.cfg.clip, min(self.cfg.clip, self.cfg.scale * g)))
        log = kwargs.get("log_metric")
        if callable(log) and gains:
            label = self.__name__
            log(f"{label}/gain", sum(gains) / len(gains))
            log(f"{label}/clipped", sum(abs(self.cfg.scale * g) > self.cfg.clip for g in gains) / len(gains))
        return rewards
