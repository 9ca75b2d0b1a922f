"""few_shot_gain (FSA-GRPO, seed 004 #2): credit for a correct answer that the demonstrations account for.

Seed 004 #2 trains with "a specially designed reward to encourage the model to leverage few-shot
demonstrations, thereby strengthening its few-shot adaptation ability", next to the task reward ("auxiliary
reward weighting"), and names no formula. Few-shot adaptation is a difference: how much better the model does
WITH the demonstrations than without them. The reading implemented here credits a completion sampled with the
demonstrations by that difference, and only when it is right::

    c(y)  = 1 if the last number of y equals the row's gold answer a*, else 0       (math_answer's check)
    l_0   = log pi(a* | x_0)   the gold answer's summed token log-probs after the zero-shot prompt x_0
    l_d   = log pi(a* | x_d)   ... after the prompt with the demonstrations x_d (the one y was sampled from)
    g     = 1 - exp(l_0)                            (measure: probability, the default)
          = clip(scale * (l_d - l_0), -clip, clip)  (measure: log_ratio)
    r(y)  = c(y) * g

``probability``: this completion is right with the demonstrations (1), and without them the scorer would write
the gold answer with probability exp(l_0): g is "correct with demos minus correct without". ``log_ratio``: how
much the demonstrations raised the gold answer's log-probability (its PMI with the demonstrations). Either way a
wrong completion gets no few-shot credit: copying a demonstration's output (what the earlier reading, the
completion's own log-likelihood gain from the demonstrations under a frozen base model, rewarded: demo-likeness)
earns nothing unless it is the query's answer. A success the scorer reaches without the demonstrations (an
operator memorised by name during training, data=few_shot_ops) earns little; one only the demonstrations make
possible earns up to 1.

Choices where the abstract is silent:
- The scorer ``pi`` is the policy being trained (``scorer: policy``, the default): the trainer computes l_0 (and
  l_d) with the rollout policy's weights when it samples (``Reward.policy_targets``, column
  ``rlpost_policy_logprobs``), so the term measures the adaptation of the model that is adapting. ``scorer:
  frozen`` scores with a frozen model instead (``model: null``: a copy of the run's base model), whose zero-shot
  probabilities never move. Outside training (held-out evaluation) the policy's column is absent and a
  ``scorer: policy`` term scores None; the held-out claim is read by ``eval.without_demos``
  (rlpost/evaluation/few_shot.py).
- g does not depend on which correct completion was sampled, so within a GRPO group the term multiplies the
  correctness by a per-prompt factor: with the task reward (weight w) a group's reward is ``c(y) (1 + w g(x))``.
  Group-std normalisation (``scale: group``) divides that factor out again; the recipe (recipes/fsa_grpo.yaml)
  uses ``scale: none``, under which prompts the demonstrations make solvable weigh up to (1 + w) times the ones
  solved without them.
- x_0 is the row's ``zero_shot_column`` text put in place of the prompt's last user turn (a system message
  stays); the gold answer is scored as the whole completion text (its tokens, no end-of-sequence token).
- A row whose gold, zero-shot text or scorer log-prob is None is unscorable (None).
- Logged: ``<term>/gain`` (mean g over scored rows), ``<term>/zero_shot_p`` (mean exp(l_0)), ``<term>/credited``
  (share of scored completions with c = 1) and, with ``demos_column`` (a JSON list of the demonstrations'
  outputs), ``<term>/copied`` (share of scored completions whose answer is a demonstration's output and wrong).
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.core.chat import answer_text
from rlpost.core.schema import Range
from rlpost.models.loading import ModelConfig
from rlpost.rewards.base import REWARDS, ParamError, Reward, column
from rlpost.rewards.math_answer import gold_number, last_number

POLICY_LOGPROBS = "rlpost_policy_logprobs"  # the trainer's column: per sample, l of each policy_targets pair


def gain(measure: str, zero_shot: float, with_demos: float | None, scale: float, clip: float) -> float:
    """g from the gold answer's summed log-probs without (l_0) and with (l_d) the demonstrations (module docstring)."""
    if measure == "probability":
        return 1.0 - math.exp(zero_shot)
    assert with_demos is not None
    return max(-clip, min(clip, scale * (with_demos - zero_shot)))


def zero_shot_prompt(prompt: Any, question: str) -> Any:
    """``prompt`` with its last user message (or the whole string) replaced by ``question``."""
    if isinstance(prompt, list):
        last = max(i for i, m in enumerate(prompt) if m.get("role") == "user")
        return [*prompt[:last], {**prompt[last], "content": question}, *prompt[last + 1 :]]
    return question


@REWARDS.register("few_shot_gain")
class FewShotGain(Reward):
    """Correctness times the gain the demonstrations bring to the gold answer under the policy (or a frozen LM)."""

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the gold answer
        zero_shot_column: str = "zero_shot"  # dataset column with the prompt's user turn without demonstrations
        demos_column: str | None = None  # JSON list of the demonstrations' outputs: logs <term>/copied (null: not)
        measure: Literal["probability", "log_ratio"] = "probability"  # g = 1 - p_0 | clip(scale * (l_d - l_0))
        scorer: Literal["policy", "frozen"] = "policy"  # whose log-probs: the policy being trained, or a frozen LM
        model: ModelConfig | None = None  # scorer frozen: an rlpost model config (null: a copy of the run's model)
        scale: Annotated[float, Range()] = 1.0  # measure log_ratio: multiplier of l_d - l_0
        clip: Annotated[float, Range(gt=0)] = 5.0  # measure log_ratio: |g| bound after scaling
        max_length: Annotated[int, Range(ge=1)] = 1024  # scorer frozen: context tokens kept (the last ones)
        device: Literal["auto", "cpu", "cuda"] = "auto"  # scorer frozen: where it runs

    def __init__(self, cfg: Config):
        if cfg.clip <= 0:
            raise ParamError("clip", f"must be > 0, got {cfg.clip}")
        if cfg.max_length < 1:
            raise ParamError("max_length", f"must be >= 1, got {cfg.max_length}")
        super().__init__(cfg)
        # the trainer adds rlpost_policy_logprobs: the policy's log-probs of policy_targets (rlpost/trainer/core.py)
        self.rollout_fields = ("policy_logprobs",) if cfg.scorer == "policy" else ()
        self.scorer = cfg.model  # scorer frozen: null until check_run copies the run's model config
        self._model: Any = None  # loaded on first use (a transformers model / tokenizer)
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def __getstate__(self):  # pickling (TRL's async worker) drops the loaded model and the lock
        return {**self.__dict__, "_model": None, "_tokenizer": None, "_lock": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def check_run(self, run: Any) -> None:
        """Called by ``build_run``: ``scorer: frozen`` with ``model: null`` scores with a copy of the run's model."""
        if self.cfg.scorer == "frozen" and self.scorer is None:
            self.scorer = run.model

    def policy_targets(self, prompt: Any, row: dict[str, Any]) -> list[tuple[Any, str]] | None:
        """``[(x_0, a*)]`` (measure log_ratio: then ``(x_d, a*)``): the contexts and gold text whose log-probs g
        reads; None when the row has no gold or zero-shot text."""
        gold, question = row.get(self.cfg.column), row.get(self.cfg.zero_shot_column)
        if gold is None or question is None or not str(gold).strip():
            return None
        targets = [(zero_shot_prompt(prompt, str(question)), str(gold).strip())]
        return targets + [(prompt, str(gold).strip())] if self.cfg.measure == "log_ratio" else targets

    # ---- scorer frozen -------------------------------------------------------------------------------------
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
        """log s(y_t | context, y_<t) of each completion token ``[T]`` under the frozen scorer (one unpadded forward)."""
        context = self.context_ids(prompt)
        target = self._tokenizer(completion, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([context + target], device=self._model.device)
        logits = self._model(ids).logits[0, len(context) - 1 : -1].float()  # [T, V]: position t predicts t+1
        return torch.log_softmax(logits, -1).gather(1, ids[0, len(context) :, None])[:, 0].cpu()

    def frozen_logprobs(self, targets: list[tuple[Any, str]] | None) -> list[float] | None:
        return None if targets is None else [float(self.token_logprobs(c, t).sum()) for c, t in targets]

    # ---- the reward -----------------------------------------------------------------------------------------
    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``prompts [N]``, ``completions [N]``, the gold and zero-shot columns ``[N]`` (and, scorer policy, the
        trainer's ``rlpost_policy_logprobs [N]``) -> rewards ``[N]``: 0 when wrong, g when right, None unscorable."""
        n = len(completions)
        golds = column(kwargs, self.cfg.column, n, self.registry_name)
        questions = column(kwargs, self.cfg.zero_shot_column, n, self.registry_name)
        demos = column(kwargs, self.cfg.demos_column, n, self.registry_name) if self.cfg.demos_column else [None] * n
        if self.cfg.scorer == "policy":  # absent outside training: unscorable
            logps = list(kwargs.get(POLICY_LOGPROBS) or [None] * n)
        else:
            with self._lock:
                self.load()
                logps = [
                    self.frozen_logprobs(self.policy_targets(p, {self.cfg.column: g, self.cfg.zero_shot_column: q}))
                    for p, g, q in zip(prompts, golds, questions)
                ]
        rewards: list[float | None] = []
        gains, p0s, credited, copied = [], [], [], []
        for completion, gold, lp, shown in zip(completions, golds, logps, demos):
            target = gold_number(gold)
            if target is None or lp is None or any(v is None or math.isnan(v) for v in lp):
                rewards.append(None)
                continue
            g = gain(self.cfg.measure, lp[0], lp[1] if len(lp) > 1 else None, self.cfg.scale, self.cfg.clip)
            answer = last_number(answer_text(completion, True))
            right = answer is not None and abs(answer - target) <= 1e-9 * max(1.0, abs(target))
            rewards.append(g if right else 0.0)
            gains.append(g)
            p0s.append(math.exp(lp[0]))
            credited.append(float(right))
            if shown is not None:
                outputs = [gold_number(x) for x in json.loads(shown)]
                copied.append(float(not right and answer is not None and answer in outputs))
        log = kwargs.get("log_metric")
        if callable(log) and gains:
            label = self.__name__
            log(f"{label}/gain", sum(gains) / len(gains))
            log(f"{label}/zero_shot_p", sum(p0s) / len(p0s))
            log(f"{label}/credited", sum(credited) / len(credited))
            if copied:
                log(f"{label}/copied", sum(copied) / len(copied))
        return rewards
