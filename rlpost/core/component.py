"""Component: the contract every registered component keeps (issue 17 item 5).

A component is one small class: a nested frozen ``Config`` dataclass (its schema; YAML only sets
values), one constructor ``__init__(self, cfg: Config)``, and ``__call__`` doing its work (declared
by its kind's base, ``rlpost/<kind>/base.py``). Every *optional* member the builder, ``rlpost show``,
the checkpoint code and the trainer use is declared here (or on the kind's base) with a no-op
default, so they call it on every component and never probe for it:

    requires           set by a component       rollout statistics the trainer computes for it
    check_run(run)     build.check_run          cross-group checks against the built run
    training_columns() rlpost/train.py          the training data's columns it reads, checked before the model loads
    hint(row)          trainer stage 3          with requires={"hinted_logps"}: the text added to x's user turn
    config_warnings(run)  rlpost show           settings under which it cannot act (its activity stays 0)
    inert_reason(rows, run)  rlpost train's summary  why its activity figure stayed 0 for a whole run
    describe()         rlpost show              the component's formula in one line
    sampler(...)       trainer stage 0          which prompts share a generation batch (None: TRL's)
    score_rollouts(x)  trainer stage 3          this process's tensors computed with another model
    stateful, state_dict(), load_state_dict()   rlpost/runs/state.py: saved with every checkpoint

What each kind adds: ``Regularizer.prepare``, ``GradTransform.check_compatible``,
``RolloutStrategy.adjust_rewards``, ``Correction.peer`` / ``peer_per_group``, and the reward flags
``is_group_reward``, ``group_size``, ``learning``, ``rollout_fields`` (see each base). Each method kind
(advantage, loss, regularizer, grad, correction, combine, rollout, select) also declares ``activity``,
its figure ``active/<kind>/<name>`` per step: what its no-op is and how the figure is computed is stated
once, in that base (rlpost/core/activity.py has the tolerance).
Every default keeps exactly the behaviour of a component that lacked the member before the
contract: ``prepare`` and ``score_rollouts`` return ``{}`` (nothing added to the batch), ``sampler``
returns ``None`` (TRL's sampler), ``adjust_rewards`` returns the rewards unchanged.

Components never receive the trainer object (DESIGN.md): ``score_rollouts`` reads a ``ScoringInputs``
the trainer builds (rlpost/trainer/scoring.py), with callables for what needs the trainer's models
(log-probs) and its metrics (``log``); a rollout strategy gets a ``RolloutContext`` (rlpost/rollouts/base.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rlpost.core.registry import describe

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Sampler


def _not_given(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("this ScoringInputs was built without that callable (the trainer gives every one)")


@dataclass(frozen=True)
class ScoringInputs:
    """What ``score_rollouts`` reads: one generation batch at scoring time (stage 3), after the pipeline ran.

    Built by the trainer (``RLPostTrainer._scoring_inputs``, rlpost/trainer/scoring.py) for every batch, training
    and evaluation. B = this process's completions, N = all processes' (gathered), T = completion tokens.
    """

    # this process's loss batch so far: TRL's output (prompt_ids, prompt_mask [B, P], completion_ids,
    # completion_mask [B, T], old_per_token_logps [B, T] when TRL kept them, ...) and rlpost's advantages [B] or [B, T]
    output: dict[str, Any]
    rows: list[dict[str, Any]]  # [B] the dataset row of each completion, in generation order
    training: bool  # a training batch (False: an evaluation batch)
    num_generations: int  # G of this batch (train.num_generations, or the evaluation's)
    local: slice  # this process's rows of a gathered [N] tensor
    kinds: list[str] | None = (
        None  # [B] the rollout strategy's kind per row; None on evaluation batches (and plain sampling)
    )
    all_kinds: list[str] | None = None  # [N] the same, gathered over processes
    task_rewards: torch.Tensor | None = None  # [N] gathered: after combine, adjust and whitening, before shaping
    tokenizer: Any = None  # the policy's tokenizer (its token ids are the batch's)
    device: Any = None  # the policy's torch.device
    temperature: float = 1.0  # the sampling temperature (log-probs are taken at it)
    # (prompt_ids [M] lists, completion_ids [M] lists, width=None) -> (logps [M, T], mask [M, T]): one no-grad
    # forward of the policy, completions after their prompt (left-padded), T = max(width, the longest completion)
    policy_logprobs: Callable[..., tuple[torch.Tensor, torch.Tensor]] = _not_given
    # (model, input_ids [M, L], attention_mask [M, L], logits_to_keep T) -> logps [M, T] of the last T tokens under a
    # frozen second model (OPD's teacher), through the trainer's log-prob path (its fused head, its micro-batches)
    logprobs: Callable[[Any, torch.Tensor, torch.Tensor, int], torch.Tensor] = _not_given
    log: Callable[[str, float], None] = _not_given  # (metric name, value): the trainer's metrics, this batch's mode


# what a component may list in ``requires`` (the trainer fills GroupBatch.extras / token_text with them)
# hinted_logps: log-probs of the sampled tokens after x with the component's ``hint(row)`` text appended to its
# user turn (NaN on rows whose hint is None); one component at most may provide it
ROLLOUT_STATISTICS = frozenset({"entropies", "logps", "ref_logps", "token_text", "hinted_logps"})


class Component:
    """Base of every component; subclass it through its kind's base (``Advantage``, ``PolicyLoss``, ...)."""

    @dataclass(frozen=True)
    class Config:
        """No settings (a component with settings declares its own nested ``Config``)."""

    registry_name: ClassVar[str] = ""  # its name in its registry (set by Registry.register)
    seed: ClassVar[str] = ""  # the seed paragraph it implements ("seed 000 #29"); "" = cited in the module docstring
    # rollout statistics the trainer computes for this component (a subset of ROLLOUT_STATISTICS):
    # a no-grad forward fills GroupBatch.extras["entropies" | "logps" | "ref_logps"], or GroupBatch.token_text
    requires: frozenset[str] = frozenset()
    # saved with every checkpoint and restored on resume (rlpost/runs/state.py); True exactly when state_dict is overridden
    stateful: ClassVar[bool] = False

    # the component's own nested Config (each subclass's Config is its own dataclass, so the base types the
    # attribute as Any: build_config validated it against that dataclass before the component was made)
    cfg: Any

    def __init__(self, cfg: Any) -> None:  # cfg: the subclass's own Config
        self.cfg = cfg

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        overrides = cls.state_dict is not Component.state_dict
        if overrides != cls.stateful:
            raise TypeError(
                f"{cls.__name__}: set `stateful = True` exactly when the class overrides state_dict/load_state_dict "
                f"(stateful={cls.stateful}, overrides state_dict={overrides})"
            )

    def check_run(self, run: Any) -> None:
        """Cross-group checks against the built run (reward terms it names, a reference model it needs, G);
        raise ``ConfigError``. Called by ``build.check_run`` for every component before any model loads.
        ``run`` is an ``rlpost.run.BuiltRun`` (not imported here: run.py imports the component kinds)."""

    def hint(self, row: dict[str, Any]) -> str | None:
        """With ``requires`` naming ``hinted_logps``: the text appended to the user turn of this row's prompt for the
        trainer's hinted forward (None: no hint for this row, its hinted log-probs stay NaN)."""
        return None

    def training_columns(self) -> dict[str, str]:
        """The training data's columns this component reads, ``{its config key: column}``; checked against the
        loaded data before any model loads (rlpost/train.py). Default: none."""
        return {}

    def config_warnings(self, run: Any) -> list[str]:
        """Settings visible from the config alone under which this component cannot act (its activity figure would
        stay 0 for the whole run): one line each, which ``rlpost show`` prints before any model loads. ``run`` is
        the ``BuiltRun``. Default: none."""
        return []

    def inert_reason(self, rows: list[dict[str, Any]], run: Any) -> str | None:
        """Why this component's activity figure stayed 0 for a whole run, read from the run's logged training
        metrics ``rows`` (one per step, metrics.jsonl) and the ``BuiltRun``; None: no reason of its own
        (rlpost/analysis/inert.py adds the generic ones: all-equal groups, one varying reward column)."""
        return None

    def describe(self) -> str:
        """One line for ``rlpost show``: the formula this component computes (default: its docstring's first line)."""
        return describe(type(self))

    def sampler(
        self,
        dataset: Any,
        *,
        generation_batch_prompts: int,
        num_generations: int,
        seed: int,
        repeat_count: int = 1,
        shuffle: bool = True,
    ) -> Sampler[int] | None:
        """A sampler replacing TRL's RepeatSampler (each prompt index G times in a row, each generation
        batch ``repeat_count`` times), or None to keep TRL's. The first component returning one wins."""
        return None

    def score_rollouts(self, x: ScoringInputs) -> dict[str, torch.Tensor]:
        """Tensors ``[B, ...]`` of this process's rollouts computed at scoring time (OPD's teacher log-probs), added
        to the loss batch under their keys (each declared in ``LOSS_BATCH_KEYS``, rlpost/losses/base.py); ``{}``
        adds nothing."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The state to checkpoint (tensors, numbers, strings, lists); stateless components have none."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
