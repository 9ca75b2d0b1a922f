"""Environments the tests load by import path (data/env=callable / gym), as a user's own module would be."""

from __future__ import annotations

import time

from rlpost.envs.base import Environment, StepResult


class CountDown:
    """Answers every turn with a user message "n left" and ends after ``turns`` turns, reward 0.5 per turn."""

    def __init__(self, turns: int = 3):
        self.turns, self.taken = turns, 0

    def reset(self, row, seed):
        return [{"role": "user", "content": f"{row['prompt'][-1]['content']} (seed {seed})"}]

    def step(self, text):
        self.taken += 1
        done = self.taken >= self.turns
        return [] if done else [{"role": "user", "content": f"{self.turns - self.taken} left"}], 0.5, done, {}


class Hangs(Environment):
    """Its second step never returns (a tool stuck in a loop)."""

    def reset(self, row, seed=0):
        self.calls = 0
        return [{"role": "user", "content": "go"}]

    def step(self, message):
        self.calls += 1
        while self.calls > 1:
            time.sleep(0.01)
        return StepResult([{"role": "tool", "content": "ok"}])


class Raises:
    """Its first step raises."""

    def reset(self, row, seed):
        return [{"role": "user", "content": "go"}]

    def step(self, text):
        raise RuntimeError("the environment broke")


class GuessNumber:
    """A Gymnasium-style text game: guess the secret (the row's answer); 'higher' / 'lower' hints; reward 1 on a hit."""

    def __init__(self, penalty: float = 0.0):
        self.penalty = penalty

    def reset(self, seed=None, options=None):
        self.secret = int(options["row"]["answer"])
        return "Guess my number.", {}

    def step(self, action):
        digits = "".join(c for c in action if c.isdigit() or c == "-")
        guess = int(digits) if digits.strip("-") else None
        if guess == self.secret:
            return "correct", 1.0, True, False, {}
        hint = "no number" if guess is None else ("higher" if guess < self.secret else "lower")
        return hint, -self.penalty, False, False, {"guess": guess}


class RaisesOnReset:
    """Its reset raises: no episode can start."""

    def reset(self, row, seed):
        raise RuntimeError("the environment could not start")

    def step(self, text):
        return [], 0.0, True, {}


class WrongStepType:
    """Its step returns a string instead of a step result (it reads cut-off turns: the tiny model never stops)."""

    reads_cut_turns = True

    def reset(self, row, seed):
        return [{"role": "user", "content": "go"}]

    def step(self, text):
        return "done"


class SlowStep:
    """Its step always runs past any step_timeout_s below a second (it reads cut-off turns too)."""

    reads_cut_turns = True

    def reset(self, row, seed):
        return [{"role": "user", "content": "go"}]

    def step(self, text):
        time.sleep(1.0)
        return [], 1.0, True, {}
