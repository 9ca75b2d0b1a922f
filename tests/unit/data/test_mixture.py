"""data=mixture (rlpost/data/mixture.py): the per-batch counts by hand, the rounding bound, the sampler's contract
(groups never mix sources, each batch a function of seed and batch index, resumed from the batches counted), the
component's state and metrics, the union of the sources' columns, and the composition of each source's options."""

from __future__ import annotations

import random

import pytest
import torch

from rlpost.core.component import ScoringInputs
from rlpost.core.errors import ConfigError
from rlpost.data.mixture import (
    SOURCE_COLUMN,
    Allocation,
    Mixture,
    MixtureSampler,
    Source,
    source_nodes,
    union_dataset,
)
from rlpost.data.sources import DataConfig


def counts(fractions, prompts, batches):
    allocation = Allocation(fractions, prompts)
    return [allocation.counts(b) for b in range(batches)]


def test_counts_per_batch_by_hand():
    assert counts([0.5, 0.5], 2, 4) == [[1, 1]] * 4  # the recipe: one prompt of each source per step
    assert counts([0.75, 0.25], 4, 3) == [[3, 1]] * 3  # a whole share: exact in every batch
    assert counts([0.2, 0.3, 0.5], 10, 2) == [[2, 3, 5]] * 2
    # 1.5 prompts each: the extra prompt goes to the source furthest behind its share (ties: the first listed)
    assert counts([0.5, 0.5], 3, 4) == [[2, 1], [1, 2], [2, 1], [1, 2]]
    # a third each of 2 prompts: 2/3 behind each -> the first two; then the third is 4/3 behind, the first 1/3 ...
    assert counts([1 / 3, 1 / 3, 1 / 3], 2, 3) == [[1, 1, 0], [1, 0, 1], [0, 1, 1]]
    # fractions written to 7 digits still give whole shares (within 1e-6)
    assert counts([0.3333333, 0.3333333, 0.3333334], 3, 2) == [[1, 1, 1]] * 2


def test_running_count_stays_within_one_prompt_of_its_share():
    rng = random.Random(0)
    for _ in range(500):
        weights = [rng.random() + 0.01 for _ in range(rng.randint(2, 6))]
        fractions = [w / sum(weights) for w in weights]
        allocation = Allocation(fractions, rng.randint(1, 12))
        for b in range(40):
            assert sum(allocation.counts(b)) == allocation.prompts and min(allocation.counts(b)) >= 0
            drawn = allocation.drawn_before(b + 1)
            assert all(abs(d - q * (b + 1)) < 1 for d, q in zip(drawn, allocation.quota)), (fractions, b)


def sampler(rows, fractions, prompts, *, g=3, repeat=2, seed=0, start=0):
    return MixtureSampler(
        rows, Allocation(fractions, prompts), mini_repeat_count=g, repeat_count=repeat, seed=seed, start=lambda: start
    )


ROWS = [list(range(10)), list(range(10, 15))]  # source a: rows 0-9, source b: rows 10-14


def batches_of(indices, prompts, g, repeat):
    """The sampler's index stream -> its generation batches (prompts each), checking TRL's contract on the way."""
    width = prompts * g
    out = []
    for start in range(0, len(indices), width * repeat):
        copies = [indices[start + k * width : start + (k + 1) * width] for k in range(repeat)]
        assert all(c == copies[0] for c in copies)  # each batch repeat_count times (num_iterations x steps)
        chunk = copies[0]
        groups = [chunk[i : i + g] for i in range(0, width, g)]
        assert all(len(set(group)) == 1 for group in groups)  # G completions of one prompt: one source
        out.append([group[0] for group in groups])
    return out


def test_sampler_contract_groups_never_mix_sources():
    s = sampler(ROWS, [0.75, 0.25], 4)
    indices = list(s)
    assert len(indices) == len(s) == 4 * 4 * 3 * 2  # ceil(15 / 4) batches of 4 prompts x G x repeat
    for batch in batches_of(indices, 4, 3, 2):
        assert sum(i < 10 for i in batch) == 3 and sum(i >= 10 for i in batch) == 1
        assert len(set(batch)) == 4


def test_each_source_is_drawn_without_replacement_through_each_pass():
    s = sampler(ROWS, [0.5, 0.5], 2, g=1, repeat=1)
    drawn = [i for b in range(10) for i in s.batch(b)]
    a, b = [i for i in drawn if i < 10], [i for i in drawn if i >= 10]
    assert sorted(a) == ROWS[0] and sorted(b[:5]) == sorted(b[5:]) == ROWS[1]  # b's second pass: a new order
    assert b[:5] != b[5:]


def test_batches_are_a_function_of_seed_and_batch_index_and_the_sampler_resumes_at_its_start():
    whole = sampler(ROWS, [0.5, 0.5], 2, g=2, repeat=1)
    first, second = list(whole), list(whole)  # two epochs of transformers' loop continue each other
    stream = batches_of(first + second, 2, 2, 1)
    assert len(stream) == 2 * whole.batches_per_epoch
    resumed = sampler(ROWS, [0.5, 0.5], 2, g=2, repeat=1, start=5)  # a checkpoint after 5 batches
    assert batches_of(list(resumed), 2, 2, 1) == stream[5 : 5 + whole.batches_per_epoch]
    assert batches_of(list(sampler(ROWS, [0.5, 0.5], 2, g=2, repeat=1, seed=1)), 2, 2, 1) != stream[:8]


def source(name, fraction=0.5):
    return Source(name, fraction, DataConfig(task="basic_arithmetic"))


def test_component_counts_trained_batches_logs_each_source_and_restores_its_position():
    mixture = Mixture([source("a"), source("b")])
    dataset = {SOURCE_COLUMN: ["a"] * 6 + ["b"] * 4}
    s = mixture.sampler(dataset, generation_batch_prompts=2, num_generations=2, seed=0)
    logged: dict[str, float] = {}
    rows = [{SOURCE_COLUMN: x} for x in ("b", "b", "a", "a")]
    x = ScoringInputs(output={}, rows=rows, training=True, num_generations=2, local=slice(0, 4),
                      task_rewards=torch.tensor([1.0, 0.0, float("nan"), 0.5]), log=logged.__setitem__)  # fmt: skip
    mixture.score_rollouts(x)
    assert logged == {
        "mixture/a/prompts": 1.0,
        "mixture/b/prompts": 1.0,
        "mixture/a/reward": 0.5,
        "mixture/b/reward": 0.5,
    }
    mixture.score_rollouts(ScoringInputs(output={}, rows=rows, training=False, num_generations=2, local=slice(0, 4)))
    assert mixture.state_dict() == {"batches": 1}  # an evaluation batch is not a trained one
    resumed = Mixture([source("a"), source("b")])
    resumed.load_state_dict(mixture.state_dict())
    again = resumed.sampler(dataset, generation_batch_prompts=2, num_generations=2, seed=0)
    first = list(again)[:4]
    assert first == [i for i in s.batch(1) for _ in range(2)]  # the second batch: where the run goes on
    assert list(s)[:4] == first  # the first sampler too starts at the batches counted when it is first iterated


def test_union_of_the_sources_columns():
    rows = [
        {"prompt": "p", "answer": "1", "x": 1, "id": 3, SOURCE_COLUMN: "a"},
        {"prompt": "q", "answer": "2", "y": "t", "id": "c7", SOURCE_COLUMN: "b"},
    ]
    data = union_dataset(rows)
    assert data.column_names == ["prompt", "answer", "x", SOURCE_COLUMN, "y"]  # id: int and str, dropped
    assert data[0]["y"] is None and data[1]["x"] is None
    with pytest.raises(ConfigError, match="column 'id' holds values of different types"):
        union_dataset(rows, {"id"})
    with pytest.raises(ConfigError, match="same data.conversational"):
        union_dataset([{"prompt": "p"}, {"prompt": [{"role": "user", "content": "p"}]}])


def nodes(*sources, **data):
    return source_nodes({"sources": list(sources), **data}, seed=7)


def test_each_source_composes_its_options():
    a, b = nodes(
        {
            "data": "basic_arithmetic",
            "fraction": 0.25,
            "data_params": {"train_size": 8, "task_params": {"max_digits": 1}},
        },
        {"name": "calc", "data": "basic_arithmetic", "fraction": 0.75, "reward": "env", "env": "calculator"},
    )
    assert (a.name, a.fraction, a.reward, a.where) == ("basic_arithmetic", 0.25, None, "data.sources[0]")
    assert a.data["seed"] == 7 and a.data["train_size"] == 8  # ${seed} resolved; data_params set on the option
    assert a.data["task_params"]["max_digits"] == 1 and a.data["task_params"]["operators"] == ["+", "-", "*"]  # merged
    assert a.data["env"] == {"name": "none"} and a.data["transform"] == {"name": "none"}
    assert b.data["env"]["name"] == "calculator" and b.data["env"]["max_turns"] == 3  # conf/data/env/calculator.yaml
    assert [t["name"] for t in b.reward["terms"]] == ["env"] and "combine" not in b.reward  # the run's combine acts
    (c,) = nodes({"data": "chain_sum", "fraction": 1, "reward": {"terms": [{"name": "math_answer"}]}, "env": {"name": "calculator", "max_turns": 2}})  # fmt: skip
    assert c.reward == {"terms": [{"name": "math_answer"}]} and c.data["env"] == {"name": "calculator", "max_turns": 2}


@pytest.mark.parametrize(
    ("sources", "data", "expected"),
    [
        ([{"data": "basic_arithmetic", "fraction": 0.5}, {"data": "chain_sum", "fraction": 0.3}], {},
         "fractions sum to 0.8, not 1 (basic_arithmetic=0.5, chain_sum=0.3)"),
        ([{"data": "basic_arithmetc", "fraction": 1}], {}, "data.sources[0].data='basic_arithmetc' is no data option. Did you mean 'basic_arithmetic'?"),
        ([{"data": "mixture", "fraction": 1}], {}, "data.sources[0].data='mixture' is no data option"),
        ([{"data": "chain_sum", "fraction": 0.5}, {"data": "chain_sum", "fraction": 0.5}], {}, "the name 'chain_sum' is taken"),
        ([{"name": "reward", "data": "chain_sum", "fraction": 1}], {}, "none of accuracy, reward"),
        ([{"data": "chain_sum", "fraction": 1, "reward": "math_answr"}], {}, "Did you mean 'math_answer'?"),
        ([{"data": "chain_sum", "fraction": 1, "env": "calculater"}], {}, "data.sources[0].env='calculater' is no data/env option"),
        ([{"data": "chain_sum", "fraction": 1, "reward": {"terms": [], "combine": {"name": "focal"}}}], {},
         "Unknown key data.sources[0].reward.combine"),
        ([{"data": "chain_sum", "fraction": 1.5}], {}, "data.sources[0].fraction=1.5 must be"),
        ([{"data": "chain_sum", "fraction": 1, "taks": 1}], {}, "Unknown key data.sources[0].taks"),
        ([{"data": "chain_sum", "fraction": 1}], {"env": {"name": "calculator"}}, "data/env=calculator is set for the whole run"),
        ([], {}, "data.sources must be a non-empty list"),
    ],
)  # fmt: skip
def test_mixture_config_errors(sources, data, expected):
    with pytest.raises(ConfigError) as err:
        nodes(*sources, **data)
    assert expected in str(err.value)
