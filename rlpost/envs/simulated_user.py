"""The simulated-user environment: a frozen model plays a user with a hidden goal; the policy must find it out
over several turns and act on it (issue 18, env 3; the setting of seed 004 #5's calibrated interactive RL).

Bundled task (``data=booking``, rlpost/envs/booking_data.py): a traveller wants a train ticket (an invented
city, a day, a class) and opens with a line that states none of it. The policy, a booking assistant, sees
only that line; each of its turns either asks (the simulator answers as a ``role="user"`` message) or books,
``BOOK: <city>, <day>, <class>``, which ends the episode. Reward: 1.0 when every slot of the booking equals the
hidden goal (case-insensitive), else 0.0 (``reward: fraction`` pays the share of slots right). An episode
that never books earns 0.

The simulator is a frozen model (``user_model``, any ``conf/model`` option; default ``smollm2-135m``, a
frozen copy of the default policy), greedy, prompted with the goal (``user_prompt``, formatted with the
row's columns) and the conversation from its side (its own lines as ``assistant``, the policy's as
``user``). It is loaded once per process and shared by every episode. Choices where the issue is silent:
the goal slots are the row's ``goal_*`` columns (``slots``), compared after stripping spaces and a trailing
"class"; a booking with the wrong number of slots scores 0.

Sim-to-real (seed 004 #5, calibrated interactive RL): ``held_out_user: scripted`` plays held-out episodes against the
scripted traveller (rlpost/envs/scripted_traveller.py), the stand-in for real users that also speaks the bundled
logged dialogues the simulator can be aligned to (``rlpost align-simulator``, rlpost/tools/sim_alignment.py); training
episodes always meet the simulator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from rlpost.core.schema import Range
from rlpost.envs.base import ENVS, Environment, Message, StepResult, row_messages
from rlpost.envs.scripted_traveller import traveller_reply
from rlpost.models.options import frozen_generator, generate_reply, named_model_config
from rlpost.transforms.base import add_note

SYSTEM = (
    "You are a train booking assistant. Find out, by asking the customer, where they want to go, on which day "
    "and in which class (first or second). When you know all three, reply with BOOK: <city>, <day>, <class>."
)
USER = (
    "You are a traveller talking to a train booking assistant. You want a {goal_class} class ticket to "
    "{goal_city} on {goal_day}. Answer the assistant's questions in one short sentence each."
)


@dataclass(frozen=True)
class SimulatedUserConfig(Environment.Config):
    """The episode limits, the simulator and the goal it holds."""

    max_turns: Annotated[int, Range(ge=1)] = 6  # assistant turns (questions, then the booking)
    user_model: str = "smollm2-135m"  # a conf/model option: the frozen simulator
    user_overrides: dict[str, Any] = field(default_factory=dict)  # its ModelConfig fields
    user_max_new_tokens: Annotated[int, Range(ge=1)] = 32  # the simulator's reply length
    user_prompt: str = USER  # the simulator's system message, formatted with the row's columns
    slots: list[str] = field(default_factory=lambda: ["goal_city", "goal_day", "goal_class"])  # the hidden goal
    reward: Literal["all", "fraction"] = "all"  # 1.0 only when every slot is right, or the share right
    # who answers in held-out episodes: the simulator, or the scripted traveller that stands in for real users
    # (rlpost/envs/scripted_traveller.py; seed 004 #5's sim-to-real gap; needs the three default slots)
    held_out_user: Literal["simulator", "scripted"] = "simulator"

    def __post_init__(self):
        if self.held_out_user == "scripted" and list(self.slots) != list(SCRIPTED_SLOTS):
            raise ValueError(f"held_out_user=scripted plays the booking goal: slots must be {list(SCRIPTED_SLOTS)}")


SCRIPTED_SLOTS = ("goal_city", "goal_day", "goal_class")


def normalize(value: str) -> str:
    return re.sub(r"\s+class$", "", value.strip().lower().rstrip(".")).strip()


def booked_slots(text: str) -> list[str] | None:
    """The normalized slots of a ``BOOK: <city>, <day>, <class>`` line, or None for a turn that does not book."""
    found = re.search(r"BOOK:\s*(.+)", text)
    return [normalize(slot) for slot in found.group(1).split(",")] if found else None


@ENVS.register("simulated_user")
class SimulatedUser(Environment):
    """A frozen model plays a user with a hidden goal; the policy asks, then books; reward: the goal was met."""

    verifiable = True  # the episode reward checks against the row's gold

    Config = SimulatedUserConfig
    cfg: SimulatedUserConfig

    def __init__(self, cfg: SimulatedUserConfig):
        super().__init__(cfg)
        self.goal: list[str] = []
        self.persona = ""
        self.dialogue: list[tuple[str, str]] = []  # (speaker, text): "user" is the simulator
        self.given: set[str] = set()  # the slots the scripted traveller has said

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        self.goal = [str(row[s]) for s in self.cfg.slots]
        self.persona = self.cfg.user_prompt.format(**row)
        messages = row_messages(row)
        self.dialogue = [("user", messages[-1]["content"])]
        return add_note(messages, SYSTEM, "system")

    def reply(self) -> str:
        """The simulator's next line: the dialogue from its side (its own lines are the assistant's)."""
        model, tok = frozen_generator(self.cfg.user_model, self.cfg.user_overrides, "data.env.user_model",
                                      "data.env.user_overrides")  # fmt: skip
        turns = [{"role": "assistant" if who == "user" else "user", "content": text} for who, text in self.dialogue]
        return generate_reply(
            model, tok, [{"role": "system", "content": self.persona}, *turns], self.cfg.user_max_new_tokens
        )

    @property
    def scripted(self) -> bool:
        return self.evaluating and self.cfg.held_out_user == "scripted"

    def scripted_reply(self, message: str) -> str:
        goal = dict(zip(("city", "day", "class"), self.goal))
        return traveller_reply(goal, message, self.given, f"{self.dialogue[0][1]}|{len(self.dialogue)}")

    def step(self, message: str) -> StepResult:
        self.dialogue.append(("assistant", message))
        slots = booked_slots(message)
        if slots is not None:
            right = [a == normalize(b) for a, b in zip(slots, self.goal)] if len(slots) == len(self.goal) else []
            share = sum(right) / len(self.goal)
            reward = share if self.cfg.reward == "fraction" else float(share == 1.0)
            return StepResult(reward=reward, done=True, info={"slots_right": sum(right)})
        answer = self.scripted_reply(message) if self.scripted else self.reply()
        self.dialogue.append(("user", answer))
        return StepResult([{"role": "user", "content": answer}])

    def check_run(self, run: Any) -> None:
        super().check_run(run)
        named_model_config(
            self.cfg.user_model, self.cfg.user_overrides, "data.env.user_model", "data.env.user_overrides"
        )  # fmt: skip  (fails before any model loads)

    def describe(self) -> str:
        return (
            f"simulated_user: a frozen {self.cfg.user_model} plays a user with a hidden goal ({', '.join(self.cfg.slots)}); "
            "the policy asks (the user answers) and ends with BOOK: ..., rewarded when the booking meets the goal"
        )
