"""self_critique: ICRL, learning to internalize self-critique with RL (seed 004 #23).

"ICRL jointly trains a solver and a critic from a shared backbone to convert critique-induced success into
unassisted solver ability. The critic is rewarded based on the solver's subsequent performance gain ...
a distribution-calibration re-weighting ratio selectively transfers critique-guided improvements compatible
with the solver's own prompt distribution ... a role-wise group advantage estimation stabilizes joint
optimization across the two roles." One policy, three kinds of rows in each group of G (prompt x)::

    rows 0 .. n-1        natural   y0_i ~ pi(. | x)                     solver, trained under x
    rows n .. n+k-1      critic    c_j  ~ pi(. | critic(x, y0_0))       critic, trained under its critic prompt
    rows n+k .. G-1      refined   y1_j ~ pi(. | x, y0_0, c_j)          solver, trained under x       (n = G - 2k)

    critic reward        r_c(c_j)   = R(y1_j) - R(y0_0)                 (R: the run's combined reward under x)
    calibration ratio    rho_t      = pi(y1_t | x, y1_<t) / pi(y1_t | x, y0_0, c_j, y1_<t)      (no grad)
                         w          = clip(exp(mean_t log rho_t), low, high)   per row   (ratio_level=sequence)
                         w_t        = clip(rho_t, low, high)                   per token (ratio_level=token)
    solver advantages    the run's advantage (group_norm) on the n + k solver rows of the group: the critic
                         rows' rewards are NaN in the pipeline (``adjust_rewards``), so they leave the group
    critic advantages    A_c(c_j)   = (r_c_j - mean_j r_c) / (std_j r_c + eps) over the k critic rows of the
                         group (unbiased std, NaN -> 0, as group_norm)
    loss advantages      A [B, T]: natural rows A_i; refined rows A_i * w_t; critic rows A_c (``score_rollouts``)

The per-token weight enters as a scale of the advantage: for the run's (clipped) policy-gradient loss, which is
linear in A with w > 0, -min(r w A, clip(r) w A) = w * -min(r A, clip(r) A), i.e. exactly a per-token loss weight.

Choices where the abstract is silent:
- The group keeps G rows (batch arithmetic unchanged); k = ``critiques_per_group`` >= 2 critiques per group so
  that the critic role has a group to normalize in, and at least one natural row (G >= 2k + 1).
- All k critiques are of the same attempt, the group's first natural rollout y0_0 (a random sample): they share
  R(y0_0), so the critic group compares critiques, not attempts. The critic is not told whether the attempt is
  right and sees no reference: on a correct attempt its best reward is 0 (do not break it).
- Critic prompt: the task's user message replaced by ``critic_instruction`` (task, attempt); critiques are cut at
  ``max_critique_chars``. Refinement prompt: multi-turn (x, the attempt as an assistant turn, ``refine_template``
  with the critique), as the other conditioned rollouts (conditioned.py ``revise_prompt``).
- The ratio is the sequence-level geometric mean by default (one weight per refined row: tokens that only make
  sense with the critique in context, such as a copied answer, cannot be singled out, but the whole rewrite is
  down-weighted by how much it relied on the critique; per-token ratios of a 135M model are noisy); ``token`` is
  the per-token form. Default bounds [0.1, 1.0]: a rewrite at least as likely without the critique is fully
  transferred, none is up-weighted (variance), none is dropped entirely.
- Both log-probs of the ratio are one no-grad forward of the policy at generation time (the rollout weights);
  the refined rows' old log-probs are TRL's under x, so their PPO ratio is the usual on-policy one under x.
- Critic rows join the run's loss (clip, aggregation, token normalizer) with their own advantages; a critic row
  whose critic reward is NaN (an unscorable refinement) gets advantage 0. Dynamic sampling reads the solver rows.
- Combines that return advantages are refused (``reward_adjustment="absolute"``): the critic reward is a
  difference of combined rewards.
Logged: ``self_critique/critic_reward_mean``, ``improvement_rate`` (R(y1) > R(y0)), ``worsened_rate``,
``attempt_reward_mean``, ``refined_reward_mean``, ``critic_adv_std``, ``solver_adv_abs_mean`` (rlpost/...),
``rollout/self_critique/ratio_mean``, ``ratio_clip_frac``, ``critique_chars_mean``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.core.chat import completion_text
from rlpost.core.component import ScoringInputs
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.rollouts.base import NATURAL, ROLLOUTS, RolloutContext, Rollouts, RolloutStrategy, user_text, with_user_text
from rlpost.rollouts.conditioned import revise_prompt

CRITIC, REFINED = "critic", "refined"
CRITIC_INSTRUCTION = (
    "You are a critic. Read the task and the proposed response below. Say whether the response is correct; if "
    "it is not, point out the mistake and how to fix it. Do not rewrite the response.\n\n"
    "Task: {task}\n\nResponse: {response}"
)
REFINE = "Critique of your response: {critique}\nWrite a corrected response that takes this critique into account."


def layout(g: int, k: int) -> list[str]:
    """The kind of each position of a group of G: n = G - 2k natural, then k critic, then k refined rows."""
    return [NATURAL] * (g - 2 * k) + [CRITIC] * k + [REFINED] * k


def critic_rewards(rewards: torch.Tensor, g: int, k: int) -> torch.Tensor:
    """rewards [N] (groups laid out by ``layout``) -> [N]: R(y1_j) - R(y0_0) on critic row j, NaN elsewhere."""
    grouped = rewards.view(-1, g)  # [N/G, G]
    n = g - 2 * k
    out = torch.full_like(grouped, float("nan"))
    out[:, n : n + k] = grouped[:, n + k :] - grouped[:, :1]  # refined j minus the critiqued attempt (row 0)
    return out.reshape(-1)


def critic_advantages(critic: torch.Tensor, g: int, k: int, eps: float) -> torch.Tensor:
    """critic rewards [N] (NaN off critic rows) -> [N]: (r - mean) / (std + eps) over each group's critic rows,
    unbiased std, NaN rewards left out, 0 on every other row and where undefined (as group_norm)."""
    grouped = critic.view(-1, g)  # [N/G, G]
    n = g - 2 * k
    r = grouped[:, n : n + k]  # [N/G, k]
    mean = torch.nanmean(r, dim=1, keepdim=True)
    count = (~torch.isnan(r)).sum(1, keepdim=True)
    var = torch.nansum((r - mean) ** 2, dim=1, keepdim=True) / (count - 1).clamp(min=1)
    std = torch.where(count > 1, var.sqrt(), torch.full_like(var, float("nan")))
    out = torch.zeros_like(grouped)
    out[:, n : n + k] = torch.nan_to_num((r - mean) / (std + eps), nan=0.0)
    return out.reshape(-1)


def calibration_weights(
    plain: torch.Tensor, conditioned: torch.Tensor, mask: torch.Tensor, level: str, low: float, high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(y1_t | x, .) [M, T], log pi(y1_t | x, y0, c, .) [M, T], mask [M, T] -> (weights [M, T] on the
    masked tokens (1 elsewhere), clipped [M, T] bool: the raw ratio lay outside [low, high])."""
    log_ratio = (plain - conditioned) * mask
    if level == "sequence":  # geometric mean of the token ratios, broadcast over the row
        log_ratio = (log_ratio.sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)).expand_as(mask)
    ratio = log_ratio.exp()
    weights = torch.where(mask.bool(), ratio.clamp(low, high), torch.ones_like(ratio))
    return weights, ((ratio < low) | (ratio > high)) & mask.bool()


@ROLLOUTS.register("self_critique")
class SelfCritique(RolloutStrategy):
    """ICRL: the policy critiques its own attempt, refines it, and is trained as solver and as critic."""

    reward_adjustment = "absolute"  # critic rows leave the solver group; combines returning advantages refused

    @dataclass(frozen=True)
    class Config:
        # k: critiques (and refinements) per group; n = train.num_generations - 2k natural rollouts (>= 1)
        critiques_per_group: Annotated[int, Range(ge=2)] = 2
        max_attempt_chars: Annotated[int, Range(ge=1)] = 1000  # the attempt shown to the critic is cut to this
        max_critique_chars: Annotated[int, Range(ge=1)] = 400  # the critique shown to the solver is cut to this
        critic_instruction: str = CRITIC_INSTRUCTION  # the critic role's user message; {task} {response}
        refine_template: str = REFINE  # the user turn after the attempt; {critique}
        ratio_level: Literal["sequence", "token"] = "sequence"  # calibration ratio per refined row or per token
        ratio_low: Annotated[float, Range(ge=0)] = 0.1  # the calibration weight is clipped to [ratio_low, ...
        ratio_high: Annotated[float, Range(gt=0)] = 1.0  # ... ratio_high]
        critic_eps: Annotated[float, Range(ge=0)] = 1e-4  # added to the critic group's std (as group_norm)

        def __post_init__(self):
            if self.critiques_per_group < 2:
                raise ValueError("critiques_per_group must be >= 2 (the critic role's group)")
            if not 0 <= self.ratio_low <= self.ratio_high:
                raise ValueError("need 0 <= ratio_low <= ratio_high")
            if self.ratio_level not in ("sequence", "token"):
                raise ValueError(f"Unknown ratio_level {self.ratio_level!r}. Valid choices: sequence, token.")
            missing = [key for key in ("{task}", "{response}") if key not in self.critic_instruction]
            if missing or "{critique}" not in self.refine_template:
                raise ValueError("critic_instruction needs {task} and {response}, refine_template {critique}")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self._weights: dict[int, list[float]] = {}  # local refined row -> calibration weight per completion token
        self._critic_adv: torch.Tensor | None = None  # [N] the last training batch's critic advantages

    def check_run(self, run: Any) -> None:
        g, k = run.settings.train.num_generations, self.cfg.critiques_per_group
        if g < 2 * k + 1:
            raise ConfigError(
                f"algorithm.rollout.critiques_per_group={k} needs train.num_generations >= {2 * k + 1} "
                f"(got {g}): each group holds n >= 1 natural rollouts, k critiques and k refinements."
            )

    def critic_prompt(self, prompt: Any, attempt: str) -> Any:
        return with_user_text(prompt, self.cfg.critic_instruction.format(task=user_text(prompt), response=attempt))

    def generate(self, prompts: list, ctx: RolloutContext) -> Rollouts:
        k, g = self.cfg.critiques_per_group, ctx.num_generations
        kinds, groups = layout(g, k), ctx.groups(len(prompts))
        natural = [i for grp in groups for i in grp if kinds[i - grp[0]] == NATURAL]
        first = ctx.generate([prompts[i] for i in natural])
        out = Rollouts.empty(len(prompts), first)
        for j, i in enumerate(natural):
            out.put(i, first, j)
        critic = [i for grp in groups for i in grp if kinds[i - grp[0]] == CRITIC]
        source = [i - i % g for i in critic]  # every critique is of its group's first attempt
        attempts = [completion_text(out.completions[s])[: self.cfg.max_attempt_chars] for s in source]
        critiques = ctx.generate([self.critic_prompt(prompts[s], a) for s, a in zip(source, attempts)], CRITIC)
        for j, i in enumerate(critic):
            out.put(i, critiques, j)  # trained in its role: under the critic prompt it was sampled from
        texts = [completion_text(c).strip()[: self.cfg.max_critique_chars] or "(none)" for c in critiques.completions]
        notes = [self.cfg.refine_template.format(critique=t) for t in texts]
        refined = ctx.generate([revise_prompt(prompts[s], a, n) for s, a, n in zip(source, attempts, notes)], REFINED)
        plain_ids = [out.prompt_ids[s] for s in source]
        self._calibrate(ctx, plain_ids, refined)
        rows = [i + k for i in critic]  # refined row j of a group sits k after critic row j
        self._weights = {}
        for j, i in enumerate(rows):
            out.put(i, refined, j)
            out.prompt_ids[i] = list(plain_ids[j])  # trained under the original x
            if out.logprobs is not None:  # sampled under (x, y0, c), not x: no IS correction against x
                out.logprobs[i] = [None] * len(out.completion_ids[i])
            self._weights[i] = self._row_weights[j]
        ctx.log("self_critique/critique_chars_mean", sum(map(len, texts)) / max(len(texts), 1))
        return out

    def _calibrate(self, ctx: RolloutContext, plain_ids: list, refined: Rollouts) -> None:
        """The calibration weights of the refined rows (one no-grad forward each under x and under (x, y0, c))."""
        logp_x, mask = ctx.policy_logprobs(plain_ids, refined.completion_ids)
        logp_c, _ = ctx.policy_logprobs(refined.prompt_ids, refined.completion_ids)
        w, clipped = calibration_weights(
            logp_x, logp_c, mask, self.cfg.ratio_level, self.cfg.ratio_low, self.cfg.ratio_high
        )
        self._row_weights = [w[j, : len(ids)].tolist() for j, ids in enumerate(refined.completion_ids)]
        tokens = mask.sum().clamp(min=1)
        ctx.log("self_critique/ratio_mean", float((w * mask).sum() / tokens))
        ctx.log("self_critique/ratio_clip_frac", float(clipped.sum() / tokens))

    def adjust_rewards(
        self, rewards: torch.Tensor, kinds: list[str], rows: list[dict], completions: list, group_size: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Combined rewards [N] -> the critic rows' NaN (they leave the solver group); keeps their role-wise
        advantages [N] for ``score_rollouts``."""
        k, g = self.cfg.critiques_per_group, group_size
        if kinds != layout(g, k) * (len(kinds) // g):
            raise RuntimeError("self_critique: the batch's rows are not in the strategy's layout")
        gain = critic_rewards(rewards, g, k)
        self._critic_adv = critic_advantages(gain, g, k, self.cfg.critic_eps)
        on = torch.tensor([kind == CRITIC for kind in kinds], device=rewards.device)
        gains, adv = gain[on], self._critic_adv[on]
        scored = gains[~torch.isnan(gains)]
        grouped = rewards.view(-1, g)
        metrics = {
            "self_critique/critic_reward_mean": scored.mean().item() if scored.numel() else float("nan"),
            "self_critique/improvement_rate": (scored > 0).float().mean().item() if scored.numel() else float("nan"),
            "self_critique/worsened_rate": (scored < 0).float().mean().item() if scored.numel() else float("nan"),
            "self_critique/attempt_reward_mean": torch.nanmean(grouped[:, 0]).item(),
            "self_critique/refined_reward_mean": torch.nanmean(grouped[:, g - k :]).item(),
            "self_critique/critic_adv_std": adv.std().item() if adv.numel() > 1 else 0.0,
        }
        return rewards.masked_fill(on, float("nan")), metrics

    def score_rollouts(self, x: ScoringInputs) -> dict[str, torch.Tensor]:
        """Training batches: ``advantages`` [B, T] with the refined rows' calibration weights and the critic rows'
        role-wise advantages (module docstring); evaluation batches: nothing."""
        kinds = x.kinds
        if kinds is None or self._critic_adv is None:
            return {}
        adv = x.output["advantages"]
        mask = x.output["completion_mask"]
        adv = (adv.unsqueeze(1) if adv.dim() == 1 else adv).expand_as(mask).clone()  # [B, T]
        critic = self._critic_adv[x.local].to(adv)
        solver = [i for i, kind in enumerate(kinds) if kind != CRITIC]
        x.log("rlpost/self_critique/solver_adv_abs_mean", float(adv[solver, 0].abs().mean()) if solver else 0.0)
        for i, kind in enumerate(kinds):
            if kind == CRITIC:
                adv[i] = critic[i]
            elif kind == REFINED:
                w = torch.tensor(self._weights[i], dtype=adv.dtype, device=adv.device)[: adv.size(1)]
                adv[i, : w.numel()] = adv[i, : w.numel()] * w
        return {"advantages": adv}

    def describe(self) -> str:
        k = self.cfg.critiques_per_group
        return (
            f"self_critique (ICRL): the policy writes {k} critiques of an attempt per group and {k} refinements; "
            f"critic reward R(y1) - R(y0), refinements trained under x with a {self.cfg.ratio_level} calibration "
            f"ratio clipped to [{self.cfg.ratio_low:g}, {self.cfg.ratio_high:g}], advantages normalized per role"
        )
