"""data/env=gym with the real gymnasium package (rlpost/envs/gym.py): ids registered with gymnasium.register and
made by gymnasium.make, classes by import path, Gymnasium's seeding, close, terminated vs truncated, and its
env checker at config time. The policy is scripted on the real tokenizer, as in test_runner.py."""

from __future__ import annotations

import pytest

pytest.importorskip("gymnasium")

import rlpost.components  # noqa: E402, F401  (registers every component)
from rlpost.core.errors import ConfigError  # noqa: E402
from rlpost.envs.base import build_env  # noqa: E402
from rlpost.envs.gym import check_instance  # noqa: E402
from rlpost.envs.runner import ChatRenderer, run_episodes  # noqa: E402
from rlpost.models.loading import ModelConfig, load_tokenizer  # noqa: E402

import support.gym  # noqa: E402  (registers the test ids)

GUESS = "support.gym:rlpost-test/GuessDigit-v0"
ROW = {"prompt": [{"role": "user", "content": "unused"}], "answer": "7"}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(ModelConfig(name="tiny-random"))


def scripted(tok, turns: list[str]):
    """The policy says its scripted turns in order in every episode (test_runner.py's helper)."""
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)

    def generate(prompt_ids, rows):
        taken = [sum(ids[i : i + len(header)] == header for i in range(len(ids))) - 1 for ids in prompt_ids]
        return [tok.encode(turns[t], add_special_tokens=False) + [tok.eos_token_id] for t in taken], None

    return generate


def secret_of(env, seed: int) -> int:
    inner = env.make()
    inner.reset(seed=seed)
    return inner.unwrapped.secret


def gym_env(**node):
    return build_env({"name": "gym", **node})


def play(env, tok, turns, seeds):
    return run_episodes(env, [ROW] * len(seeds), seeds, ChatRenderer(tok), scripted(tok, turns), {tok.eos_token_id})


def test_a_registered_id_is_made_by_gymnasium_and_seeded_through_reset(tok):
    env = gym_env(id=GUESS, kwargs={"high": 3})
    inner = env.make()
    assert inner.spec.id == "rlpost-test/GuessDigit-v0" and inner.spec.max_episode_steps == 2  # gymnasium.make
    secrets = []
    for seed in (0, 0, 1, 2, 3, 4, 5):
        inner.reset(seed=seed)
        secrets.append(inner.unwrapped.secret)
    assert secrets[0] == secrets[1] and len(set(secrets)) > 1  # np_random, seeded by reset(seed=...)
    assert all(0 <= s <= 3 for s in secrets)  # data.env.kwargs reached the class through gymnasium.make
    # in the runner: the episode's seed goes to reset, so the same seed gives the same secret
    secret = {seed: secret_of(env, seed) for seed in (11, 12)}
    results = play(env, tok, [str(secret[11]), str(secret[11])], [11, 11, 12])
    assert [r.reward for r in results[:2]] == [1.0, 1.0]
    assert results[0].start == [{"role": "user", "content": "Guess my digit from 0 to 3."}]


def test_terminated_and_truncated_stay_apart_and_every_episode_is_closed(tok):
    env = gym_env(id=GUESS, kwargs={"high": 9})
    secret = secret_of(env, 5)
    wrong = str((secret + 1) % 10)
    # seed 5: a hit in the first turn (terminated); another seed's episode misses twice: TimeLimit(2) truncates
    other = next(s for s in range(100) if secret_of(env, s) != secret)
    before = support.gym.GuessDigit.closed
    hit, missed = play(env, tok, [str(secret), str(secret), str(secret)], [5, other])
    assert (hit.ended, hit.reward, hit.infos[-1]["terminated"], hit.infos[-1]["truncated"]) == (
        "done",
        1.0,
        True,
        False,
    )
    assert (missed.ended, missed.episode.turns) == ("truncated", 2)
    assert [(i["terminated"], i["truncated"]) for i in missed.infos] == [(False, False), (False, True)]
    assert [m["content"] for m in missed.messages][1] in ("higher", "lower")  # the hint between the two turns
    assert support.gym.GuessDigit.closed - before == 2  # one close per episode
    (cut,) = play(gym_env(id=GUESS, max_turns=1), tok, [wrong], [5])  # ended by max_turns: closed all the same
    assert cut.ended == "max_turns" and support.gym.GuessDigit.closed - before == 3


def test_a_class_by_import_path_runs_unchanged_and_is_closed(tok):
    before = support.gym.GuessDigit.closed
    env = gym_env(path="support.gym:RowGuess", check=False, system_prompt="Play.")  # reads options['row']
    (r,) = play(env, tok, ["5", "7"], [0])
    assert r.start == [
        {"role": "system", "content": "Play."},
        {"role": "user", "content": "Guess my digit from 0 to 9."},
    ]
    assert [m["content"] for m in r.messages] == ["5", "higher", "7"] and r.reward == 1.0 and r.ended == "done"
    assert support.gym.GuessDigit.closed - before == 1


def test_the_env_checker_and_the_spaces_are_checked_at_config_time():
    check_instance(gym_env(id=GUESS))  # a well-behaved text environment passes Gymnasium's check_env
    with pytest.raises(ConfigError, match=r"support.gym:Unseeded' fails Gymnasium's env checker \(check_env\).*"
                       r"super\(\)\.reset\(seed=seed\).*data\.env\.check=false"):  # fmt: skip
        check_instance(gym_env(path="support.gym:Unseeded"))
    with pytest.raises(ConfigError, match=r"RowGuess' fails Gymnasium's env checker.*options\['row'\]"):
        check_instance(gym_env(path="support.gym:RowGuess"))
    check_instance(gym_env(path="support.gym:RowGuess", check=False))  # spaces still checked, checker skipped
    with pytest.raises(ConfigError, match=r"its action_space is Discrete\(3\).*gymnasium\.spaces\.Text"):
        check_instance(gym_env(id="support.gym:rlpost-test/Numbers-v0", check=False))


def test_unknown_ids_and_bad_settings_are_config_errors():
    with pytest.raises(ConfigError) as err:
        gym_env(id="support.gym:rlpost-test/GuesDigit-v0")
    message = str(err.value)
    assert "is not a registered Gymnasium environment. Did you mean 'support.gym:rlpost-test/GuessDigit-v0'?" in message
    texts = message.split("Registered text environments: ")[1].split(". ")[0].split(", ")
    assert "rlpost-test/GuessDigit-v0" in texts and "rlpost-test/Numbers-v0" not in texts and "CartPole-v1" not in texts
    with pytest.raises(ConfigError, match="module 'no_such_module' cannot be imported"):
        gym_env(id="no_such_module:Guess-v0")
    with pytest.raises(ConfigError, match="needs one of data.env.id .* neither is set"):
        gym_env()
    with pytest.raises(ConfigError, match="both are set"):
        gym_env(id=GUESS, path="support.gym:GuessDigit")
    with pytest.raises(ConfigError, match=r"data.env.kwargs \['colour'\] do not fit data.env.id=.*It accepts: high"):
        gym_env(id=GUESS, kwargs={"colour": "red"})
    gym_env(id=GUESS, kwargs={"max_episode_steps": 3})  # gymnasium.make's own argument, not the class's


def test_an_id_without_gymnasium_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "gymnasium", None)  # import gymnasium raises ImportError
    with pytest.raises(ConfigError, match=r"needs the gymnasium package: pip install 'rlpost\[gymnasium\]'"):
        gym_env(id=GUESS)
