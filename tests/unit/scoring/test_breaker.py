"""The failure breaker (rlpost/scoring/breaker.py), by hand: which step stops the run, and what it says
(the first failure with the user's file and line, rlpost/core/errors.py)."""

from __future__ import annotations

import pytest

import rlpost.rewards.env  # noqa: F401  (registers)
from rlpost.rewards.base import REWARDS
from rlpost.scoring.breaker import BreakerSettings, FailureBreaker, RewardsBroken
from rlpost.scoring.guard import FailurePolicy, GuardedReward


def test_every_sample_failing_stops_at_the_first_such_step():
    breaker = FailureBreaker(BreakerSettings())  # all_failed_steps=1
    breaker.update(1, "judge", 3, 8, "TimeoutError: slow")  # 3 of 8: below max_share 0.5, streak 1 of 5
    with pytest.raises(
        RewardsBroken,
        match=r"reward term 'judge' failed on 8 of 8 samples at step 2: every sample "
        r"failed for 1 step\(s\).*First failure: ValueError: x \(at my.py:3 in f\)",
    ):
        breaker.update(2, "judge", 8, 8, "ValueError: x (at my.py:3 in f)")


def test_a_share_above_the_threshold_stops_after_patience_consecutive_steps():
    breaker = FailureBreaker(BreakerSettings(all_failed_steps=None, max_share=0.5, patience=3))
    # 5/8 > 0.5 at steps 1, 2; 4/8 is not above 0.5 (the streak restarts); then 5, 6, 8 of 8 -> stops at step 6
    for step, failed in [(1, 5), (2, 5), (3, 4), (4, 5), (5, 6)]:
        breaker.update(step, "env", failed, 8, "RuntimeError: broke")
    assert breaker.state_dict() == {"env": {"all_failed": 0, "over_share": 2}}
    with pytest.raises(RewardsBroken, match=r"more than 0.5 of its samples failed for 3 steps \(.*patience=3\)"):
        breaker.update(6, "env", 8, 8, None)


def test_terms_have_their_own_streaks_and_no_rule_can_be_turned_off():
    breaker = FailureBreaker(BreakerSettings(all_failed_steps=2, patience=None))
    breaker.update(1, "a", 4, 4, None)
    breaker.update(2, "b", 4, 4, None)  # a's streak is a's: b starts its own
    breaker.update(3, "a", 0, 4, None)  # a recovers
    breaker.update(4, "b", 3, 4, None)  # mostly failing, but the share rule is off
    # b: 4/4 at step 2, then 3/4 > 0.5 at step 4 (a step without b does not break its streak): share streak 2
    assert breaker.state_dict() == {"a": {"all_failed": 0, "over_share": 0}, "b": {"all_failed": 0, "over_share": 2}}
    off = FailureBreaker(BreakerSettings(all_failed_steps=None, patience=None))
    for step in range(1, 20):
        off.update(step, "a", 4, 4, None)  # never stops


def test_the_first_failure_names_the_users_file_and_line_but_not_rlposts(tmp_path, monkeypatch):
    user = tmp_path / "my_rewards.py"
    user.write_text("def score(prompts, completions, **kwargs):\n    return [{}[completions[0]]]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_rewards

    guarded = GuardedReward(my_rewards.score, FailurePolicy())
    assert guarded(["p"], ["gold"]) == [None]
    assert guarded.first_failure == f"KeyError: 'gold' (at {user}:2 in score)"  # the user's own line
    assert guarded.take_failures() == 1 and guarded.first_failure is None
    env = GuardedReward(REWARDS.get("env")(REWARDS.get("env").Config()), FailurePolicy())
    assert env(["p"], ["a"]) == [None]  # raised inside rlpost: the term names it, no file of the user's
    assert (
        env.first_failure
        == "ValueError: reward term env reads the episode reward, but these completions come from no environment"
    )
