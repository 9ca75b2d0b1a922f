"""Reward failures never kill a run: a per-term policy for a reward that raises or hangs.

The trainer hands TRL each reward term wrapped in a ``GuardedReward``. The policy reuses the
judges' vocabulary (``rlpost/judges/base.py``), set for every term with ``reward.on_failure`` /
``reward.timeout_s`` and per term with ``reward.terms[i].on_failure`` / ``.timeout_s`` (null:
inherit):

- ``skip`` (default): the failed sample scores ``None`` -> NaN in the reward matrix ``[N, R]``,
  which the combiners treat as "term not applicable" (unscorable when no term applies);
- ``zero``: the failed sample scores 0.0;
- ``abort``: ``RewardFailure`` naming the term, the sample and the error stops the run.

Choices where the brief was silent: when the batch call raises, the term is called again one
sample at a time (columns that hold one value per completion sliced to that sample) so that only
the samples that fail take the policy (a group reward, ``rewards/group.py``, is not retried: one
sample is not a group, and its cross-process gather must stay in step); a timeout (``timeout_s``, measured on the whole batch call,
which then runs in a daemon thread) fails every sample of the batch and is not retried (that would
cost N timeouts); a thread that hangs is left behind, as Python cannot kill it. With ``timeout_s:
null`` the term runs on the calling thread (rewards using signal-based timeouts need that). A
``JudgeError`` (a judge with its own ``on_failure: abort``) passes through: that judge asked to stop. Every
failure is counted: the trainer logs ``rlpost/reward_failures/<term>`` per step, and each batch
with failures logs one warning with the first error.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from rlpost.core.errors import describe_error
from rlpost.core.schema import Range, build_config, to_container
from rlpost.judges.base import ON_FAILURE, JudgeError
from rlpost.rewards.base import Reward

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FailurePolicy:
    """What a failed reward sample becomes, and how long a batch call may take."""

    on_failure: Literal["skip", "zero", "abort"] = "skip"  # skip -> NaN, zero -> 0.0, abort -> stop
    timeout_s: Annotated[float | None, Range(gt=0)] = None  # per batch call (null: no limit, run on the calling thread)

    def __post_init__(self):
        if self.on_failure not in ON_FAILURE:
            raise ValueError(f"Invalid on_failure {self.on_failure!r}. Valid choices: {', '.join(ON_FAILURE)}.")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 or null, got {self.timeout_s}")


class RewardFailure(RuntimeError):
    """A reward term failed and its ``on_failure`` is ``abort``."""


def reward_policies(node: Mapping[str, Any]) -> list[FailurePolicy]:
    """``reward`` node -> one policy per term: the term's own keys over ``reward.on_failure/timeout_s``."""
    base = {k: node[k] for k in ("on_failure", "timeout_s") if k in node}
    default = build_config(FailurePolicy, base, "reward")
    policies = []
    for i, term in enumerate(to_container(node.get("terms")) or []):
        own = {k: term[k] for k in ("on_failure", "timeout_s") if isinstance(term, Mapping) and term.get(k) is not None}
        merged = {"on_failure": default.on_failure, "timeout_s": default.timeout_s, **own}
        policies.append(build_config(FailurePolicy, merged, f"reward.terms[{i}]"))
    return policies


class GuardedReward:
    """A reward term with its failure policy; TRL's reward-function signature, picklable.

    ``func`` is a built ``Reward`` or any function with TRL's reward signature (tests, plain TRL use).
    """

    def __init__(self, func: Callable, policy: FailurePolicy):
        self.func, self.policy = func, policy
        # what TRL logs it as: a Reward's term name; a plain callable object without a __name__ gets its type's
        self.__name__ = getattr(func, "__name__", type(func).__name__)
        # a group reward scores whole groups (rewards/group.py): never retried one sample at a time
        self.group = isinstance(func, Reward) and func.is_group_reward
        self.mean_weights = getattr(func, "mean_weights", None)  # held-out means weighted by a row column
        self.failures = 0  # failed samples since the last ``take_failures()``
        self.first_failure: str | None = None  # the first of them: the error and, in user code, where it was raised

    def take_failures(self) -> int:
        """The failed samples since the last call (and forget the first failure's message)."""
        count, self.failures, self.first_failure = self.failures, 0, None
        return count

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        n = len(completions)
        try:
            return self._call(prompts, completions, kwargs, n)
        except JudgeError:
            raise  # the judge's own on_failure=abort: its policy already decided the step fails
        except TimeoutError as err:
            return self._failed(list(range(n)), n, err, prompts)
        except Exception as err:  # isolate the failing samples
            if n == 1 or self.group:  # a group reward scores whole groups, never one sample
                return self._failed(list(range(n)), n, err, prompts)
        results: list[float | None] = []
        failed, first = [], None
        for i in range(n):
            sample = {k: v[i : i + 1] if isinstance(v, (list, tuple)) and len(v) == n else v for k, v in kwargs.items()}
            try:
                results += self._call(prompts[i : i + 1], completions[i : i + 1], sample, 1)
            except Exception as err:
                if self.policy.on_failure == "abort":
                    self._abort(err, i, prompts)
                failed.append(i)
                first = first or err
                results.append(None)
        return self._failed(failed, n, first, prompts, results) if failed else results

    def _call(self, prompts: list, completions: list, kwargs: dict, n: int) -> list[float | None]:
        if self.policy.timeout_s is None:
            out = self.func(prompts=prompts, completions=completions, **kwargs)
        else:
            box: dict[str, Any] = {}

            def target():
                try:
                    box["out"] = self.func(prompts=prompts, completions=completions, **kwargs)
                except BaseException as err:  # re-raised on the calling thread
                    box["err"] = err

            thread = threading.Thread(target=target, daemon=True, name=f"reward-{self.__name__}")
            thread.start()
            thread.join(self.policy.timeout_s)
            if thread.is_alive():
                raise TimeoutError(f"no result within timeout_s={self.policy.timeout_s}")
            if "err" in box:
                raise box["err"]
            out = box["out"]
        out = list(out)
        if len(out) != n:
            raise ValueError(f"returned {len(out)} rewards for {n} completions")
        return [None if v is None else float(v) for v in out]

    def _failed(self, failed, n, err, prompts, results=None) -> list[float | None]:
        if self.policy.on_failure == "abort":
            self._abort(err, failed[0], prompts)
        self.failures += len(failed)
        self.first_failure = self.first_failure or describe_error(err)
        fill = None if self.policy.on_failure == "skip" else 0.0
        logger.warning(
            "reward term %s: %d of %d samples failed (first: %s: %s); on_failure=%s",
            self.__name__, len(failed), n, type(err).__name__, err, self.policy.on_failure,
        )  # fmt: skip
        results = results if results is not None else [None] * n
        return [fill if i in failed else r for i, r in enumerate(results)]

    def _abort(self, err: BaseException, index: int, prompts: list):
        prompt = str(prompts[index])[:80] if index < len(prompts) else "?"
        raise RewardFailure(
            f"reward term {self.__name__!r} failed on sample {index} (prompt {prompt!r}): "
            f"{describe_error(err)}; on_failure=abort"
        ) from err


def guard_rewards(funcs: list[Reward], policies: list[FailurePolicy]) -> list[GuardedReward]:
    """Wrap each term with its policy (the default policy where none is given)."""
    policies = list(policies) + [FailurePolicy()] * (len(funcs) - len(policies))
    return [GuardedReward(f, p) for f, p in zip(funcs, policies)]


def take_failure_counts(funcs: list[Callable]) -> dict[str, int]:
    """Failed samples per guarded term since the last call (0 for a term without failures)."""
    return {f.__name__: f.take_failures() for f in funcs if isinstance(f, GuardedReward)}
