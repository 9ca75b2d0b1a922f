"""pared (PARED, seed 000 #17): a reward recovered from demonstrations by an online feature discriminator.

Seed 000 #17: "recovers the implicit reward underlying expert demonstrations as an explicit function over
a small set of response-level features, learned by a lightweight discriminator that separates
demonstrations from the policy's own samples"; "demonstrations provide the task-specific supervision,
which can be augmented with AI feedback as additional dimensions of supervision"; used for "adversarial
on-policy RL", and for "contextual alignment, in which a single policy can be tailored to the preferences
of different audiences". Implemented as a logistic discriminator ``D(x, y) = sigmoid(w_a . f(x, y) + b_a)``
over the features ``f`` of a prompt x and its response y, one ``(w_a, b_a)`` per audience a, trained online
(demonstrations label 1, the policy's completions label 0); the reward is ``D``, the probability that the
completion is a demonstration for its prompt and audience, in (0, 1).

Choices where the abstract is silent:
- Features (``features``, each in [0, 1], formulas in rlpost/rewards/pared_features.py): 7 surface
  statistics of y (``length``, ``unique_ratio``, ``mean_word_len``, ``punct_rate``, ``digit_rate``,
  ``newline_rate``, ``ends_sentence``) and 4 functions of (x, y) (``prompt_overlap``,
  ``prompt_numbers_used``, ``new_numbers``, ``length_ratio``); all 11 by default, so D sees the prompt. x is
  the prompt's last user message. Still lexical: no feature computes whether an answer is right.
- AI feedback (``feedback``, empty by default: each criterion costs one judge call per distinct (x, y)):
  yes/no criteria stating good behaviour ("The response states the final answer."); criterion j adds the
  feature ``feedback_j`` = the judge's score of (x, y) on it (rlpost/judges/: P(Yes) for a local yes_no
  judge, 1/0 from an endpoint's reply), for demonstrations and completions alike, so D learns how much each
  criterion separates them. The judge sees ``feedback_template`` (question, response, criterion; no gold
  reference: a demonstration would trivially agree with itself). A failed judge call gives 0.5 (no evidence
  either way). Identical (x, y) pairs of one batch are judged once (a gold demo repeats G times).
- Audiences (``audience_column``, null by default): the row's value in that column must be one of
  ``audiences``; audience a has its own ``(w_a, b_a)``, trained only on the demonstrations and completions
  of rows of audience a, and scores only those rows. Without it there is one discriminator.
- Demonstrations: the row's ``demo_column`` (default ``answer``, the gold response; one per completion,
  with the row's prompt and audience), or ``demos_path``, a jsonl of reference responses (field
  ``demo_field``, with the prompt in ``demo_prompt_field`` when a prompt feature or feedback is used, and
  the audience in the field named ``audience_column`` when set), of which ``demos_per_update`` are drawn per
  update, for each audience in the batch, with ``random.Random(seed + updates)`` (reproducible after a
  resume).
- One call scores first, then updates (the reward is not fitted to the very samples it scores): ``steps``
  gradient steps of lr ``lr``, for each audience a with both demonstrations and completions in the batch,
  on its class-balanced logistic loss
  ``L_a = -mean_demo(a) log D - mean_policy(a) log(1 - D) + l2/2 ||w_a||^2``, with
  ``dL_a/dw_a = -mean_demo(a) (1 - D) f + mean_policy(a) D f + l2 w_a``,
  ``dL_a/db_a = -mean_demo(a) (1 - D) + mean_policy(a) D``. With several processes each audience's gradient
  is averaged over the processes that had it (all_reduce), so every copy stays identical.
- It learns only on training batches: ``RLPostTrainer._calculate_rewards`` sets ``learning`` (True in
  train mode, False in eval and outside the trainer: ``rlpost eval`` scores with a frozen D).
- State (``weight`` [F] or [A, F], ``bias`` [] or [A], ``audiences``, the update count) is saved with every
  checkpoint (``state_dict``, rlpost/runs/state.py); a single-discriminator state loads only into a run
  without audiences, and the other way round (a clear ValueError otherwise).
- Logged: ``<term>/demo_prob``, ``<term>/policy_prob`` (mean D before the update), ``<term>/disc_acc``
  (accuracy at 0.5 on both classes), ``<term>/weight_norm``; with audiences ``<term>/disc_acc/<audience>``;
  with feedback ``<term>/feedback_<j>/demo`` and ``/policy`` (mean judge scores), ``<term>/judge_calls`` and
  ``<term>/judge_failures``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Annotated, Any

import torch
import torch.distributed as dist

from rlpost.core.chat import completion_text, prompt_text
from rlpost.core.errors import ConfigError
from rlpost.core.schema import PathSpec, Range
from rlpost.judges.base import ANSWER_FORMAT, build_judge
from rlpost.rewards.base import REWARDS, ParamError, Reward, column
from rlpost.rewards.pared_features import FEATURES, PROMPT, features

DEFAULT_FEEDBACK_TEMPLATE = (
    "You are grading a response to a task against one criterion.\n\n"
    "Task: {question}\n\nResponse: {response}\n\n"
    "Criterion: {criterion}\n\nDoes the response meet the criterion? {answer_format}"
)

__all__ = ["FEATURES", "Pared", "features"]


@dataclass(frozen=True)
class Demo:
    """One demonstration: the response, the prompt it answers, its audience index (0 without audiences)."""

    response: str
    prompt: str
    audience: int


@REWARDS.register("pared")
class Pared(Reward):
    """Probability, under an online logistic discriminator on (prompt, response) features, that a completion is a demonstration."""

    stateful = True  # its running state travels with every checkpoint (rlpost/runs/state.py)

    @dataclass(frozen=True)
    class Config:
        features: list[str] = field(default_factory=lambda: list(FEATURES))  # which response features
        demo_column: str | None = "answer"  # dataset column with the demonstration (null: use demos_path)
        # jsonl of reference responses (used when demo_column is null)
        demos_path: Annotated[str | None, PathSpec("jsonl_file")] = None
        demo_field: str = "response"  # field of each demos_path line holding the response
        demo_prompt_field: str = "prompt"  # field of each demos_path line holding its prompt (prompt features)
        demos_per_update: Annotated[int, Range(ge=1)] = 16  # demonstrations drawn from demos_path per update
        lr: Annotated[float, Range(gt=0)] = 0.5  # discriminator learning rate (plain gradient descent)
        steps: Annotated[int, Range(ge=1)] = 1  # gradient steps per training batch
        l2: Annotated[float, Range(ge=0)] = 0.0  # L2 penalty on the weights (not the bias)
        length_scale: Annotated[float, Range(gt=0)] = 100.0  # words at which the length feature saturates at 1
        seed: Annotated[int, Range(ge=0)] = 0  # seed of the demonstration draws
        feedback: list[str] = field(default_factory=list)  # yes/no criteria, each one judged feature (AI feedback)
        judge: dict[str, Any] = field(default_factory=lambda: {"backend": "local"})  # judge of the feedback criteria
        # judge prompt of the feedback criteria: {question} {response} {criterion} {answer_format}
        feedback_template: str = DEFAULT_FEEDBACK_TEMPLATE
        audience_column: str | None = None  # dataset column naming each row's audience (null: one discriminator)
        audiences: list[str] | None = None  # the audience values, one discriminator each (with audience_column)

    def __init__(self, cfg: Config):
        unknown = [f for f in cfg.features if f not in FEATURES]
        if unknown or not cfg.features:
            raise ParamError("features", f"unknown or empty {unknown or cfg.features}; choices: {', '.join(FEATURES)}")
        if (cfg.demo_column is None) == (cfg.demos_path is None):
            raise ParamError("demo_column", "set exactly one of demo_column and demos_path")
        if cfg.lr <= 0 or cfg.steps < 1 or cfg.length_scale <= 0 or cfg.demos_per_update < 1:
            raise ParamError("lr", "lr and length_scale must be > 0, steps and demos_per_update >= 1")
        if (cfg.audience_column is None) != (cfg.audiences is None):
            raise ParamError("audiences", "set audience_column and audiences (its values) together, or neither")
        if cfg.audiences is not None and (not cfg.audiences or len(set(map(str, cfg.audiences))) < len(cfg.audiences)):
            raise ParamError("audiences", f"needs distinct audience values, got {cfg.audiences}")
        super().__init__(cfg)
        self.names = tuple(cfg.features) + tuple(f"feedback_{j}" for j in range(len(cfg.feedback)))
        self.audiences = [str(a) for a in cfg.audiences] if cfg.audiences is not None else None
        self.judge = self.build_feedback_judge(cfg) if cfg.feedback else None
        self.demos = self.read_demos(cfg) if cfg.demos_path else None
        shape = (len(self.audiences), len(self.names)) if self.audiences else (len(self.names),)
        self.weight = torch.zeros(shape)  # w [F], or [A, F] with audiences
        self.bias = torch.zeros(shape[:-1])  # b [], or [A]
        self.updates = 0

    @staticmethod
    def build_feedback_judge(cfg: Config):
        for key in ("question", "response", "criterion", "answer_format"):
            if "{" + key + "}" not in cfg.feedback_template:
                raise ParamError("feedback_template", f"must contain {{{key}}}")
        try:
            return build_judge(cfg.judge, "")
        except ConfigError as err:  # name the key: reward.terms[i].params.judge: ...
            raise ParamError("judge", str(err).lstrip(": ")) from None

    @property
    def n_audiences(self) -> int:
        return len(self.audiences) if self.audiences else 1

    def needs_prompt(self) -> bool:
        return bool(self.cfg.feedback) or any(name in PROMPT for name in self.cfg.features)

    def read_demos(self, cfg: Config) -> list[Demo]:
        from rlpost.core.schema import resolve_data_path

        assert cfg.demos_path is not None  # __init__ reads demos only when demos_path is set
        fields = [cfg.demo_field]
        if self.needs_prompt():
            fields.append(cfg.demo_prompt_field)
        if cfg.audience_column:
            fields.append(cfg.audience_column)
        try:
            with open(resolve_data_path(cfg.demos_path), encoding="utf-8") as handle:
                lines = [json.loads(line) for line in handle if line.strip()]
            demos = [
                Demo(
                    str(line[cfg.demo_field]),
                    str(line[cfg.demo_prompt_field]) if self.needs_prompt() else "",
                    self.audience_index(line[cfg.audience_column]) if cfg.audience_column else 0,
                )
                for line in lines
            ]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ParamError(
                "demos_path", f"{cfg.demos_path!r}: cannot read {' and '.join(map(repr, fields))} of each line ({err})"
            ) from None
        if not demos:
            raise ParamError("demos_path", f"{cfg.demos_path!r} holds no demonstrations")
        missing = [a for i, a in enumerate(self.audiences or []) if not any(d.audience == i for d in demos)]
        if missing:
            raise ParamError("demos_path", f"{cfg.demos_path!r} holds no demonstrations for audiences {missing}")
        return demos

    def audience_index(self, value: Any) -> int:
        """A row's audience value -> its discriminator's index (ValueError for a value outside ``audiences``)."""
        assert self.audiences is not None
        if str(value) not in self.audiences:
            raise ValueError(
                f"reward {self.registry_name!r}: audience {value!r} (column {self.cfg.audience_column!r}) is not "
                f"among audiences {self.audiences}"
            )
        return self.audiences.index(str(value))

    def featurize(self, texts: list[str], prompts: list[str] | None = None) -> torch.Tensor:
        """Responses ``[N]`` to prompts ``[N]`` -> features ``[N, F]`` (the judged ``feedback_j`` last)."""
        prompts = prompts if prompts is not None else [""] * len(texts)
        own = tuple(self.cfg.features)
        rows = [features(t, own, self.cfg.length_scale, p) for t, p in zip(texts, prompts)]
        if self.judge is not None:
            judged = self.feedback_scores(texts, prompts)
            rows = [row + extra for row, extra in zip(rows, judged)]
        return torch.tensor(rows, dtype=torch.float32).reshape(len(texts), len(self.names))

    def feedback_scores(self, texts: list[str], prompts: list[str]) -> list[list[float]]:
        """Judge scores ``[N][J]`` of each (prompt, response) on each ``feedback`` criterion (None -> 0.5)."""
        assert self.judge is not None
        pairs = list(dict.fromkeys(zip(prompts, texts)))  # distinct (prompt, response), first-seen order
        asks = [
            self.cfg.feedback_template.format(
                question=p, response=t, criterion=c, answer_format=ANSWER_FORMAT[self.judge.mode]
            )
            for p, t in pairs
            for c in self.cfg.feedback
        ]
        scores = self.judge.score(asks) if asks else []
        j = len(self.cfg.feedback)
        by_pair = {pair: [0.5 if s is None else s for s in scores[k * j : (k + 1) * j]] for k, pair in enumerate(pairs)}
        return [by_pair[pair] for pair in zip(prompts, texts)]

    def prob(self, feats: torch.Tensor, audience: torch.Tensor | None = None) -> torch.Tensor:
        """D = sigmoid(f . w_a + b_a): features ``[N, F]``, audience indices ``[N]`` (default 0) -> ``[N]``."""
        weight, bias = self.weight.reshape(self.n_audiences, -1), self.bias.reshape(self.n_audiences)
        index = audience if audience is not None else torch.zeros(len(feats), dtype=torch.long)
        return torch.sigmoid((feats * weight[index]).sum(-1) + bias[index])

    def update(
        self,
        demo: torch.Tensor,
        policy: torch.Tensor,
        demo_audience: torch.Tensor | None = None,
        policy_audience: torch.Tensor | None = None,
    ) -> None:
        """``steps`` gradient steps on each audience's balanced logistic loss (module docstring): features
        ``[D, F]``, ``[P, F]``, audience indices ``[D]``, ``[P]`` (default 0)."""
        a, f = self.n_audiences, len(self.names)
        demo_audience = demo_audience if demo_audience is not None else torch.zeros(len(demo), dtype=torch.long)
        policy_audience = policy_audience if policy_audience is not None else torch.zeros(len(policy), dtype=torch.long)
        demo_hot = torch.nn.functional.one_hot(demo_audience, a).float()  # [D, A]
        policy_hot = torch.nn.functional.one_hot(policy_audience, a).float()  # [P, A]
        active = ((demo_hot.sum(0) > 0) & (policy_hot.sum(0) > 0)).float()  # [A]: audiences this batch can train
        # mean_demo(a) and mean_policy(a) as matrices: row a averages the rows of audience a (0 when it has none)
        demo_mean = demo_hot.T / demo_hot.sum(0).clamp(min=1)[:, None]  # [A, D]
        policy_mean = policy_hot.T / policy_hot.sum(0).clamp(min=1)[:, None]  # [A, P]
        for _ in range(self.cfg.steps):
            d_demo, d_policy = self.prob(demo, demo_audience), self.prob(policy, policy_audience)
            weight = self.weight.reshape(a, f)
            grad_w = -demo_mean @ ((1 - d_demo)[:, None] * demo) + policy_mean @ (d_policy[:, None] * policy)
            grad_w = grad_w + self.cfg.l2 * weight  # [A, F]
            grad_b = -demo_mean @ (1 - d_demo) + policy_mean @ d_policy  # [A]
            grad = torch.cat([grad_w, grad_b[:, None], torch.ones(a, 1)], dim=1) * active[:, None]  # [A, F + 2]
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                device = "cuda" if dist.get_backend() == "nccl" else "cpu"
                grad = grad.to(device)
                dist.all_reduce(grad)  # sums; the last column counts the processes that trained each audience
                grad = grad.cpu()
            grad = grad[:, :-1] / grad[:, -1:].clamp(min=1)
            self.weight = (weight - self.cfg.lr * grad[:, :-1]).reshape(self.weight.shape)
            self.bias = (self.bias.reshape(a) - self.cfg.lr * grad[:, -1]).reshape(self.bias.shape)
        self.updates += 1

    def demonstrations(self, prompts: list[str], audience: list[int], kwargs: dict) -> list[Demo]:
        """This batch's demonstrations: the rows' ``demo_column`` or ``demos_per_update`` file draws per audience."""
        n = len(prompts)
        if self.demos is None:
            demos = column(kwargs, self.cfg.demo_column, n, self.registry_name)
            return [Demo(str(d), p, a) for d, p, a in zip(demos, prompts, audience) if d is not None]
        rng = random.Random(self.cfg.seed + self.updates)
        drawn = []
        for a in sorted(set(audience)):
            pool = [d for d in self.demos if d.audience == a]
            drawn += [rng.choice(pool) for _ in range(self.cfg.demos_per_update)]
        return drawn

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` -> D(prompt, completion) ``[N]`` in (0, 1); then one online update when ``learning``."""
        n = len(completions)
        questions = [prompt_text(p) for p in prompts]
        audience = (
            [self.audience_index(v) for v in column(kwargs, self.cfg.audience_column, n, self.registry_name)]
            if self.cfg.audience_column
            else [0] * n
        )
        before = dict(self.judge.stats) if self.judge is not None else {}
        texts = [completion_text(c) for c in completions]
        policy = self.featurize(texts, questions)
        demos = self.demonstrations(questions, audience, kwargs)
        demo = self.featurize([d.response for d in demos], [d.prompt for d in demos])
        policy_aud = torch.tensor(audience, dtype=torch.long)
        demo_aud = torch.tensor([d.audience for d in demos], dtype=torch.long)
        p_policy, p_demo = self.prob(policy, policy_aud), self.prob(demo, demo_aud)
        rewards = p_policy.tolist()
        if self.learning:
            self.update(demo, policy, demo_aud, policy_aud)
        log = kwargs.get("log_metric")
        if callable(log):
            self.log_metrics(log, policy, demo, p_policy, p_demo, policy_aud, demo_aud, before)
        return rewards

    def log_metrics(self, log, policy, demo, p_policy, p_demo, policy_aud, demo_aud, before: dict) -> None:
        label = self.__name__
        log(f"{label}/policy_prob", p_policy.mean().item())
        if len(demo):
            log(f"{label}/demo_prob", p_demo.mean().item())
            right = (p_demo >= 0.5).sum().item() + (p_policy < 0.5).sum().item()
            log(f"{label}/disc_acc", right / (len(demo) + len(policy)))
        for a, name in enumerate(self.audiences or []):
            d_a, p_a = p_demo[demo_aud == a], p_policy[policy_aud == a]
            if len(d_a) and len(p_a):
                log(f"{label}/disc_acc/{name}", ((d_a >= 0.5).sum() + (p_a < 0.5).sum()).item() / (len(d_a) + len(p_a)))
        log(f"{label}/weight_norm", self.weight.norm().item())
        if self.judge is not None:
            first = len(self.cfg.features)
            for j in range(len(self.cfg.feedback)):
                log(f"{label}/feedback_{j}/policy", policy[:, first + j].mean().item())
                if len(demo):
                    log(f"{label}/feedback_{j}/demo", demo[:, first + j].mean().item())
            for key in ("calls", "failures"):
                log(f"{label}/judge_{key}", float(self.judge.stats[key] - before[key]))

    def state_dict(self) -> dict:
        state = {"weight": self.weight.clone(), "bias": self.bias.clone(), "updates": self.updates}
        if self.audiences:
            state["audiences"] = list(self.audiences)
        return state

    def load_state_dict(self, state: dict) -> None:
        weight = torch.as_tensor(state["weight"], dtype=torch.float32)
        saved = state.get("audiences")
        if (saved is None) != (self.audiences is None) or (saved is not None and list(saved) != self.audiences):
            raise ValueError(
                f"pared state holds the discriminators of audiences {saved or '(none: one discriminator)'}; this run "
                f"has audiences {self.audiences or '(none: audience_column is null)'}. Resume with the same "
                "audience_column and audiences, or start the discriminator afresh"
            )
        if weight.shape != self.weight.shape:
            raise ValueError(f"pared state has {weight.shape[-1]} weights; this run's features are {self.names}")
        self.weight, self.bias = weight, torch.as_tensor(state["bias"], dtype=torch.float32)
        self.updates = int(state["updates"])
