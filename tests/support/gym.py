"""Gymnasium text environments the tests register and load (data/env=gym), as a user's own module would.

Importing this module registers ``rlpost-test/GuessDigit-v0`` (a TimeLimit of 2 steps) and
``rlpost-test/Numbers-v0`` (numeric spaces: not a text environment).
"""

from __future__ import annotations

import string

import gymnasium
from gymnasium import spaces

TEXT = string.printable  # what a policy's turn may hold (Text's default charset is letters and digits only)


class GuessDigit(gymnasium.Env):
    """Guess a secret digit drawn from ``np_random`` at reset: reward 1 and terminated on a hit, else a hint."""

    metadata = {"render_modes": []}
    closed = 0  # close() calls over every instance (the runner closes each episode's environment)

    def __init__(self, high: int = 9):
        self.high = high
        self.observation_space = spaces.Text(max_length=200, charset=TEXT)
        self.action_space = spaces.Text(max_length=4096, min_length=0, charset=TEXT)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)  # Gymnasium's seeding: self.np_random
        self.secret = int(self.np_random.integers(0, self.high + 1))
        return f"Guess my digit from 0 to {self.high}.", {}

    def step(self, action):
        digits = [c for c in action if c.isdigit()]
        guess = int(digits[0]) if digits else None
        if guess == self.secret:
            return "correct", 1.0, True, False, {"guess": guess}
        hint = "no digit" if guess is None else ("higher" if guess < self.secret else "lower")
        return hint, 0.0, False, False, {"guess": guess}

    def close(self):
        GuessDigit.closed += 1


class RowGuess(GuessDigit):
    """Its secret is the data row's answer (options['row']): Gymnasium's checker, which resets without options, fails."""

    def reset(self, seed=None, options=None):
        gymnasium.Env.reset(self, seed=seed)
        self.secret = int(options["row"]["answer"]) % 10
        return f"Guess my digit from 0 to {self.high}.", {}


class Unseeded(GuessDigit):
    """Draws its secret from the global ``random``, never seeding ``np_random``: the env checker refuses it."""

    def reset(self, seed=None, options=None):
        import random

        self.secret = random.randint(0, self.high)
        return f"Guess my digit from 0 to {self.high}.", {}


class Numbers(gymnasium.Env):
    """A numeric environment (Discrete spaces): not a text environment."""

    def __init__(self):
        self.observation_space = spaces.Discrete(3)
        self.action_space = spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, True, False, {}


if "rlpost-test/GuessDigit-v0" not in gymnasium.registry:
    gymnasium.register(id="rlpost-test/GuessDigit-v0", entry_point="support.gym:GuessDigit", max_episode_steps=2)
    gymnasium.register(id="rlpost-test/Numbers-v0", entry_point="support.gym:Numbers")
