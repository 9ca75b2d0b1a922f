"""language_routed: LRPO, language-routed policy optimization (seed 004 #9).

LRPO "elicits multilingual rollouts for each training question", "integrates their relative quality into
preference-based policy updates" and chooses the languages with "a trainable language router formulated as
a multi-armed bandit". K = len(languages) arms, P = prompts of the (gathered) batch, G = its group size::

    p       = (1 - explore) * softmax(w) + explore / K                    [K]  EXP3 pick probabilities
    picked  = m distinct languages per prompt, drawn one by one from p    (renormalised without the drawn)
    pi_a    = P(a is among the m drawn)                                   [K]  exact, by a subset recursion
    rows    : the G rows split among the m languages in draw order (the first G mod m get one more);
              row i is sampled *and trained* under x_i = x + "Answer in <language>." (its own prompt)
    info_ga = clamp(mean_{i in g, lang a} |r_i - mean_{j in g} r_j| / reward_scale, 0, 1)   [P, K]
    w_a    += lr * (1/P) * sum_g info_ga / pi_a        (importance-weighted EXP3 update, unpicked -> 0)

The GRPO group stays the question's G rows across all its languages, so the run's advantage is already
a cross-language comparison. The preference signal on top: per group, the best language a+ and the worst
a- by mean reward rbar_ga (only when rbar_{g,a+} - rbar_{g,a-} > min_gap); a row of a+ that beats the
worst language's mean is a winner (s_i = +1), a row of a- below the best language's mean a loser
(s_i = -1), every other row s_i = 0. The pairwise Bradley-Terry term -log sigma(beta (rho_w - rho_l)),
with rho = log pi(y|x_y) - log pi_old(y|x_y), is taken against an opponent held at its rollout value
(rho = 0), so it factorizes per row and survives TRL's shuffling of micro-batches::

    rho_i      = sum_t (logp_it - old_it) m_it / sum_t m_it             [B]   length-normalised log-ratio
    L_pref[i,t]= pref_coef * |s_i| * -log sigma(beta * s_i * rho_i)       [B, T] (``loss_term``), then the run's
                                                                         aggregation
    d L_i / d rho_i at rho = 0: -pref_coef * beta * s_i / 2   (the pairwise term's gradient at the rollout policy)

Choices where the abstract is silent:
- EXP3 (not UCB or Thompson): informativeness drifts as the policy learns (non-stationary), and EXP3 makes
  no stationarity assumption; its explicit p and pi give an unbiased importance-weighted update and the
  per-language pick probability that is logged. m languages per prompt are drawn *without* replacement
  (each prompt really is multilingual) and the update divides by the exact inclusion probability pi_a.
- Informativeness = the |centred reward| mass of the language's rows in its group (what the group's
  advantage pushes on before std normalisation): a language whose rows tie with the group mean gives no
  gradient. ``reward_scale`` maps it to EXP3's [0, 1]. Rows with NaN reward are left out.
- The router's probabilities are fixed within a generation batch and updated once per batch on the gathered
  rewards (after combine and the rollout adjustment, before shaping), training batches only.
- The instruction is added for every language, English included ("Answer in English."); the reward must be
  language-agnostic (a number checked by math_answer is; a text judge in English is not).
- The preference term rows: winners/losers as above (an a+ row that is itself worse than a-'s mean is not
  pushed up); s and the term are 0 for rows of the middle languages and when the group has one language.
- Router state (the log-weights w and per-language pick counts, keyed by language name) is checkpointed.
Logged (``rlpost/rollout/``): ``language_routed/p/<lang>``, ``lang_<lang>_frac`` (the kinds), per picked
language ``language_routed/info/<lang>`` and ``language_routed/reward/<lang>``, ``language_routed/pref_frac``
(rows with s != 0), ``language_routed/pref_gap`` and the term ``language_routed/pref_loss``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Annotated, Any

import torch
import torch.nn.functional as F

from rlpost.core.component import ScoringInputs
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.losses.base import LANGUAGE_PREF, LossInputs
from rlpost.rollouts.base import ROLLOUTS, RolloutContext, Rollouts, RolloutStrategy, user_text, with_user_text

LANGUAGES = ["English", "French", "Spanish", "German", "Chinese"]
PREF = LANGUAGE_PREF  # the loss-batch key: s_i in {-1, 0, +1} per row [B] (declared in rlpost/losses/base.py)


def kind_of(language: str) -> str:
    return "lang_" + language.replace(" ", "_")


def exp3_probs(log_w: torch.Tensor, explore: float) -> torch.Tensor:
    """log-weights w [K] -> p [K] = (1 - explore) softmax(w) + explore / K."""
    return (1 - explore) * torch.softmax(log_w, 0) + explore / log_w.numel()


def inclusion_probs(p: torch.Tensor, m: int) -> torch.Tensor:
    """p [K] -> pi [K]: probability that arm a is among m arms drawn one by one without replacement from p.

    P(S) = probability that the first |S| draws are the set S:  P(S + a) += P(S) * p_a / (1 - p(S)).
    """
    k, probs = p.numel(), p.tolist()
    level = {0: 1.0}  # bitmask of drawn arms -> probability
    for _ in range(m):
        nxt: dict[int, float] = {}
        for mask, prob in level.items():
            left = 1.0 - sum(probs[a] for a in range(k) if mask >> a & 1)
            for a in range(k):
                if not mask >> a & 1 and left > 0:
                    nxt[mask | 1 << a] = nxt.get(mask | 1 << a, 0.0) + prob * probs[a] / left
        level = nxt
    return torch.tensor([sum(q for mask, q in level.items() if mask >> a & 1) for a in range(k)])


def draw_languages(p: torch.Tensor, m: int, rng: random.Random) -> list[int]:
    """m distinct arm indices drawn one by one from p [K] (each draw renormalised over the arms left)."""
    left, picked = p.tolist(), []
    for _ in range(m):
        a = rng.choices(range(len(left)), weights=left)[0]
        picked.append(a)
        left[a] = 0.0
    return picked


def split_rows(g: int, picked: list[int]) -> list[int]:
    """G rows among the picked languages in draw order -> language index per row [G] (first G mod m: +1 row)."""
    m = len(picked)
    return [a for j, a in enumerate(picked) for _ in range(g // m + (j < g % m))]


def language_stats(rewards: torch.Tensor, lang: torch.Tensor, g: int, k: int, scale: float):
    """rewards [N] (NaN: unscored), lang [N] arm index per row -> (rbar [P, K], info [P, K]), NaN where the
    group has no scored row of that language; info_ga = clamp(mean |r_i - rbar_g| / scale, 0, 1)."""
    r, lang = rewards.view(-1, g), lang.view(-1, g)
    scored = ~torch.isnan(r)
    centred = (r - torch.nanmean(r, dim=1, keepdim=True)).abs()
    onehot = F.one_hot(lang, k).float() * scored.unsqueeze(2)  # [P, G, K]
    count = onehot.sum(1)  # [P, K]
    rbar = (torch.nan_to_num(r).unsqueeze(2) * onehot).sum(1) / count  # 0/0 -> NaN
    info = ((torch.nan_to_num(centred).unsqueeze(2) * onehot).sum(1) / count / scale).clamp(0, 1)
    return rbar, info


def exp3_update(log_w: torch.Tensor, info: torch.Tensor, pi: torch.Tensor, lr: float) -> torch.Tensor:
    """w [K], info [P, K] (NaN: not picked), pi [K] -> w + lr * (1/P) sum_g info_ga / pi_a."""
    estimate = torch.nan_to_num(info).sum(0) / pi / info.size(0)
    return log_w + lr * estimate


def preference_signs(rewards: torch.Tensor, lang: torch.Tensor, rbar: torch.Tensor, min_gap: float) -> torch.Tensor:
    """rewards [N], lang [N], rbar [P, K] -> s [N]: +1 rows of the best language above the worst's mean, -1 rows
    of the worst language below the best's mean, 0 otherwise (and in groups with a gap <= min_gap)."""
    g = rewards.numel() // rbar.size(0)
    best = torch.nan_to_num(rbar, nan=-math.inf).max(1)  # [P]
    worst = torch.nan_to_num(rbar, nan=math.inf).min(1)
    ok = (best.values - worst.values > min_gap).repeat_interleave(g)  # [N]
    hi, lo = best.values.repeat_interleave(g), worst.values.repeat_interleave(g)
    win = ok & (lang == best.indices.repeat_interleave(g)) & (rewards > lo)
    lose = ok & (lang == worst.indices.repeat_interleave(g)) & (rewards < hi)
    return win.float() - lose.float()


def preference_loss(x: LossInputs, sign: torch.Tensor, beta: float, coef: float) -> torch.Tensor:
    """s [B] -> coef * |s_i| * -log sigma(beta * s_i * rho_i) [B, T], rho_i the length-normalised log-ratio."""
    rho = ((x.logps - x.old_logps) * x.mask).sum(1) / x.mask.sum(1).clamp(min=1.0)  # [B]
    per_row = coef * sign.abs() * -F.logsigmoid(beta * sign * rho)
    return per_row.unsqueeze(1).expand_as(x.logps)


@ROLLOUTS.register("language_routed")
class LanguageRouted(RolloutStrategy):
    """LRPO: each group's rows in m router-picked languages; EXP3 on their informativeness; a best-vs-worst
    language preference term."""

    seed = "seed 004 #9"
    stateful = True  # the router's log-weights and pick counts travel with every checkpoint (rlpost/runs/state.py)

    @dataclass(frozen=True)
    class Config:
        languages: list[str] = field(default_factory=lambda: list(LANGUAGES))  # the router's arms
        instruction: str = "Answer in {language}."  # appended to the user message after a blank line
        per_prompt: Annotated[int, Range(ge=1)] = 2  # m: languages per question (<= G and <= len(languages))
        explore: Annotated[float, Range(ge=0, le=1)] = 0.2  # EXP3's uniform share of p
        lr: Annotated[float, Range(ge=0)] = 0.3  # EXP3 step on the log-weights
        reward_scale: Annotated[float, Range(gt=0)] = 1.0  # informativeness = |centred reward| / this, in [0, 1]
        pref_coef: Annotated[float, Range(ge=0)] = 1.0  # weight of the cross-language preference term (0: off)
        pref_beta: Annotated[float, Range(gt=0)] = 1.0  # Bradley-Terry temperature on the log-ratio
        min_gap: Annotated[float, Range(ge=0)] = 0.0  # a preference needs best - worst language mean > this

        def __post_init__(self):
            names = [kind_of(str(n)) for n in self.languages]
            if not self.languages or not all(isinstance(n, str) and n.strip() for n in self.languages):
                raise ValueError("languages must be a non-empty list of non-empty names")
            if len(set(names)) != len(names) or len(names) > 16:
                raise ValueError("languages must be distinct, at most 16")
            if "{language}" not in self.instruction:
                raise ValueError("instruction must contain {language}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.kinds = {kind_of(n): a for a, n in enumerate(cfg.languages)}
        self.log_w = torch.zeros(len(cfg.languages), dtype=torch.float64)
        self.picks = [0] * len(cfg.languages)

    def check_run(self, run: Any) -> None:
        g, k, m = run.settings.train.num_generations, len(self.cfg.languages), self.cfg.per_prompt
        if m > k or m > g:
            raise ConfigError(
                f"algorithm.rollout.per_prompt={m} must be at most len(algorithm.rollout.languages)={k} and "
                f"train.num_generations={g}: each picked language needs a row."
            )

    def probs(self) -> torch.Tensor:
        return exp3_probs(self.log_w, self.cfg.explore)

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        p = self.probs()
        for name, prob in zip(self.cfg.languages, p.tolist()):
            ctx.log(f"language_routed/p/{name}", prob)
        conditioned, kinds = list(prompts), [""] * len(prompts)
        for group in ctx.groups(len(prompts)):
            picked = draw_languages(p, self.cfg.per_prompt, ctx.rng)
            for i, a in zip(group, split_rows(len(group), picked)):
                name = self.cfg.languages[a]
                note = self.cfg.instruction.format(language=name)
                conditioned[i] = with_user_text(prompts[i], f"{user_text(prompts[i])}\n\n{note}")
                kinds[i] = kind_of(name)
        out = ctx.generate(conditioned)
        out.kinds = kinds
        return out

    def route(self, rewards: torch.Tensor, kinds: list[str], g: int) -> tuple[torch.Tensor, dict[str, float]]:
        """One batch: gathered rewards [N] and kinds [N] -> preference signs s [N]; updates the router."""
        k = len(self.cfg.languages)
        lang = torch.tensor([self.kinds[kind] for kind in kinds])
        rewards = rewards.detach().double().cpu()
        pi = inclusion_probs(self.probs(), self.cfg.per_prompt)  # the p the batch was drawn with
        rbar, info = language_stats(rewards, lang, g, k, self.cfg.reward_scale)
        self.log_w = exp3_update(self.log_w, info, pi.double(), self.cfg.lr)
        picked = F.one_hot(lang.view(-1, g), k).amax(1).sum(0)  # [K] groups that picked each language
        self.picks = [c + int(n) for c, n in zip(self.picks, picked)]
        metrics = {}
        for a, name in enumerate(self.cfg.languages):
            if not torch.isnan(info[:, a]).all():
                metrics[f"language_routed/info/{name}"] = torch.nanmean(info[:, a]).item()
                metrics[f"language_routed/reward/{name}"] = torch.nanmean(rbar[:, a]).item()
        sign = preference_signs(rewards, lang, rbar, self.cfg.min_gap)
        gap = torch.nan_to_num(rbar, nan=-math.inf).max(1).values - torch.nan_to_num(rbar, nan=math.inf).min(1).values
        metrics["language_routed/pref_frac"] = sign.abs().mean().item()
        metrics["language_routed/pref_gap"] = (
            gap[torch.isfinite(gap)].mean().item() if torch.isfinite(gap).any() else 0.0
        )
        return sign, metrics

    def score_rollouts(self, x: ScoringInputs) -> dict[str, torch.Tensor]:
        """``rlpost_language_pref`` [B]: this process's s_i on training batches (the router updates), else 0."""
        rows, device = x.output["completion_ids"].size(0), x.output["completion_ids"].device
        if not x.training or x.all_kinds is None or x.task_rewards is None:
            return {PREF: torch.zeros(rows, device=device)}
        sign, metrics = self.route(x.task_rewards, x.all_kinds, x.num_generations)
        for name, value in metrics.items():
            x.log(f"rlpost/rollout/{name}", value)
        return {PREF: sign[x.local].to(device=device, dtype=torch.float32)}

    def loss_term(self, x: LossInputs) -> tuple[torch.Tensor | None, dict[str, float]]:
        """The cross-language preference term [B, T] on the rows with s != 0 (``preference_loss``)."""
        sign = x.batch.get(PREF)
        if sign is None or self.cfg.pref_coef == 0 or not bool((sign != 0).any()):
            return None, {}
        term = preference_loss(x, sign, self.cfg.pref_beta, self.cfg.pref_coef)
        rows = (sign != 0).float()
        return term, {"language_routed/pref_loss": float((term[:, 0].detach() * rows).sum() / rows.sum())}

    def state_dict(self) -> dict[str, Any]:
        return {"languages": list(self.cfg.languages), "log_w": self.log_w.tolist(), "picks": list(self.picks)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restored by language name (a language new to the list starts at weight 0, no picks)."""
        saved = {n: (w, c) for n, w, c in zip(state["languages"], state["log_w"], state["picks"])}
        for a, name in enumerate(self.cfg.languages):
            w, c = saved.get(name, (0.0, 0))
            self.log_w[a], self.picks[a] = w, c
