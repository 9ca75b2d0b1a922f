"""pared (PARED, seed 000 #17): a reward recovered from demonstrations by an online feature discriminator.

Seed 000 #17: "recovers the implicit reward underlying expert demonstrations as an explicit function over
a small set of response-level features, learned by a lightweight discriminator that separates
demonstrations from the policy's own samples"; used for "adversarial on-policy RL". Implemented as a
logistic discriminator ``D(y) = sigmoid(w . f(y) + b)`` over the features ``f`` below, trained online
(demonstrations label 1, the policy's completions label 0); the reward is ``D(y)``, the probability
that the completion is a demonstration, in (0, 1).

Choices where the abstract is silent:
- Features (``features``, each in [0, 1]): ``length`` = min(words / length_scale, 1); ``unique_ratio`` =
  distinct lower-cased words / words; ``mean_word_len`` = min(mean word chars / 10, 1); ``punct_rate`` and
  ``digit_rate`` = punctuation / digit characters over non-space characters; ``newline_rate`` =
  min(newlines / words, 1); ``ends_sentence`` = 1 when the stripped text ends in ``.``, ``!``, ``?`` or
  a closing fence. An empty text has all features 0. (The paper's AI-feedback features are not included.)
- Demonstrations: the row's ``demo_column`` (default ``answer``, the gold response; one per completion),
  or ``demos_path``, a jsonl of reference responses (field ``demo_field``), of which ``demos_per_update``
  are drawn per update with ``random.Random(seed + updates)`` (reproducible after a resume).
- One call scores first, then updates (the reward is not fitted to the very samples it scores): ``steps``
  gradient steps of lr ``lr`` on the class-balanced logistic loss
  ``L = -mean_demo log D - mean_policy log(1 - D) + l2/2 ||w||^2``, with
  ``dL/dw = -mean_demo (1 - D) f + mean_policy D f + l2 w``, ``dL/db = -mean_demo (1 - D) + mean_policy D``.
  With several processes the gradients are averaged (all_reduce), so every copy stays identical.
- It learns only on training batches: ``RLPostTrainer._calculate_rewards`` sets ``learning`` (True in
  train mode, False in eval and outside the trainer: ``rlpost eval`` scores with a frozen D).
- State (w, b, the update count) is saved with every checkpoint (``state_dict``, rlpost/runs/state.py).
- Logged: ``<term>/demo_prob``, ``<term>/policy_prob`` (mean D before the update), ``<term>/disc_acc``
  (accuracy at 0.5 on both classes), ``<term>/weight_norm``.
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field
from typing import Annotated, Any

import torch
import torch.distributed as dist

from rlpost.core.chat import completion_text
from rlpost.core.schema import PathSpec, Range
from rlpost.rewards.base import REWARDS, ParamError, Reward, column

FEATURES = ("length", "unique_ratio", "mean_word_len", "punct_rate", "digit_rate", "newline_rate", "ends_sentence")


def features(text: str, names: tuple[str, ...], length_scale: float) -> list[float]:
    """Response-level features of ``text`` (module docstring), one per name ``[F]``."""
    words = text.split()
    chars = [c for c in text if not c.isspace()]
    stripped = text.strip()
    values = {
        "length": min(len(words) / length_scale, 1.0),
        "unique_ratio": len({w.lower() for w in words}) / len(words) if words else 0.0,
        "mean_word_len": min(sum(map(len, words)) / len(words) / 10, 1.0) if words else 0.0,
        "punct_rate": sum(c in string.punctuation for c in chars) / len(chars) if chars else 0.0,
        "digit_rate": sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0,
        "newline_rate": min(text.count("\n") / len(words), 1.0) if words else 0.0,
        "ends_sentence": float(stripped.endswith((".", "!", "?", "```"))),
    }
    return [values[name] for name in names]


@REWARDS.register("pared")
class Pared(Reward):
    """Probability, under an online logistic discriminator on response features, that a completion is a demonstration."""

    stateful = True  # its running state travels with every checkpoint (rlpost/runs/state.py)

    @dataclass(frozen=True)
    class Config:
        features: list[str] = field(default_factory=lambda: list(FEATURES))  # which response features
        demo_column: str | None = "answer"  # dataset column with the demonstration (null: use demos_path)
        # jsonl of reference responses (used when demo_column is null)
        demos_path: Annotated[str | None, PathSpec("jsonl_file")] = None
        demo_field: str = "response"  # field of each demos_path line holding the response
        demos_per_update: Annotated[int, Range(ge=1)] = 16  # demonstrations drawn from demos_path per update
        lr: Annotated[float, Range(gt=0)] = 0.5  # discriminator learning rate (plain gradient descent)
        steps: Annotated[int, Range(ge=1)] = 1  # gradient steps per training batch
        l2: Annotated[float, Range(ge=0)] = 0.0  # L2 penalty on the weights (not the bias)
        length_scale: Annotated[float, Range(gt=0)] = 100.0  # words at which the length feature saturates at 1
        seed: Annotated[int, Range(ge=0)] = 0  # seed of the demonstration draws

    def __init__(self, cfg: Config):
        unknown = [f for f in cfg.features if f not in FEATURES]
        if unknown or not cfg.features:
            raise ParamError("features", f"unknown or empty {unknown or cfg.features}; choices: {', '.join(FEATURES)}")
        if (cfg.demo_column is None) == (cfg.demos_path is None):
            raise ParamError("demo_column", "set exactly one of demo_column and demos_path")
        if cfg.lr <= 0 or cfg.steps < 1 or cfg.length_scale <= 0 or cfg.demos_per_update < 1:
            raise ParamError("lr", "lr and length_scale must be > 0, steps and demos_per_update >= 1")
        super().__init__(cfg)
        self.names = tuple(cfg.features)
        self.demos = self.read_demos(cfg) if cfg.demos_path else None
        self.weight = torch.zeros(len(self.names))  # w [F]
        self.bias = torch.zeros(())  # b []
        self.updates = 0

    @staticmethod
    def read_demos(cfg: Config) -> list[str]:
        from rlpost.core.schema import resolve_data_path

        assert cfg.demos_path is not None  # __init__ reads demos only when demos_path is set
        try:
            with open(resolve_data_path(cfg.demos_path), encoding="utf-8") as handle:
                demos = [str(json.loads(line)[cfg.demo_field]) for line in handle if line.strip()]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ParamError(
                "demos_path", f"{cfg.demos_path!r}: cannot read {cfg.demo_field!r} of each line ({err})"
            ) from None
        if not demos:
            raise ParamError("demos_path", f"{cfg.demos_path!r} holds no demonstrations")
        return demos

    def featurize(self, texts: list[str]) -> torch.Tensor:
        """Texts ``[N]`` -> features ``[N, F]``."""
        return torch.tensor([features(t, self.names, self.cfg.length_scale) for t in texts], dtype=torch.float32)

    def prob(self, feats: torch.Tensor) -> torch.Tensor:
        """D = sigmoid(f . w + b): ``[N, F]`` -> ``[N]``."""
        return torch.sigmoid(feats @ self.weight + self.bias)

    def update(self, demo: torch.Tensor, policy: torch.Tensor) -> None:
        """``steps`` gradient steps on the balanced logistic loss (module docstring); ``[D, F]``, ``[P, F]``."""
        for _ in range(self.cfg.steps):
            d_demo, d_policy = self.prob(demo), self.prob(policy)
            grad_w = -((1 - d_demo)[:, None] * demo).mean(0) + (d_policy[:, None] * policy).mean(0)
            grad_w = grad_w + self.cfg.l2 * self.weight
            grad_b = -(1 - d_demo).mean() + d_policy.mean()
            grad = torch.cat([grad_w, grad_b[None]])
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                device = "cuda" if dist.get_backend() == "nccl" else "cpu"
                grad = grad.to(device)
                dist.all_reduce(grad)
                grad = grad.cpu() / dist.get_world_size()
            self.weight = self.weight - self.cfg.lr * grad[:-1]
            self.bias = self.bias - self.cfg.lr * grad[-1]
        self.updates += 1

    def demonstrations(self, kwargs: dict, n: int) -> list[str]:
        if self.demos is None:
            return [str(d) for d in column(kwargs, self.cfg.demo_column, n, self.registry_name) if d is not None]
        rng = random.Random(self.cfg.seed + self.updates)
        return [rng.choice(self.demos) for _ in range(self.cfg.demos_per_update)]

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` -> D(completion) ``[N]`` in (0, 1); then one online update when ``learning``."""
        policy = self.featurize([completion_text(c) for c in completions])
        demo = self.featurize(self.demonstrations(kwargs, len(completions)))
        p_policy, p_demo = self.prob(policy), self.prob(demo)
        rewards = p_policy.tolist()
        if self.learning and len(demo):
            self.update(demo, policy)
        log = kwargs.get("log_metric")
        if callable(log):
            label = self.__name__
            log(f"{label}/policy_prob", p_policy.mean().item())
            if len(demo):
                log(f"{label}/demo_prob", p_demo.mean().item())
                right = (p_demo >= 0.5).sum().item() + (p_policy < 0.5).sum().item()
                log(f"{label}/disc_acc", right / (len(demo) + len(policy)))
            log(f"{label}/weight_norm", self.weight.norm().item())
        return rewards

    def state_dict(self) -> dict:
        return {"weight": self.weight.clone(), "bias": self.bias.clone(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        weight = torch.as_tensor(state["weight"], dtype=torch.float32)
        if weight.shape != self.weight.shape:
            raise ValueError(f"pared state has {weight.numel()} weights; this run's features are {self.names}")
        self.weight, self.bias = weight, torch.as_tensor(state["bias"], dtype=torch.float32)
        self.updates = int(state["updates"])
