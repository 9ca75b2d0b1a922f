"""Reward terms, their building from config, and weighted_sum: hand-computed cases."""

import math
import sys
import textwrap
import threading

import pytest
import torch
import yaml

import rlpost.combine.weighted_sum  # noqa: F401  (registers)
import rlpost.components  # noqa: F401  (every reward, so the conf files build in any test order)
import rlpost.rewards.callable  # noqa: F401
import rlpost.rewards.exact_match  # noqa: F401
import rlpost.rewards.format  # noqa: F401
import rlpost.rewards.length  # noqa: F401
import rlpost.rewards.math_answer  # noqa: F401
from rlpost.combine.base import COMBINERS
from rlpost.core.chat import strip_think
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.rewards.math_answer import gold_number, last_number
from rlpost.scoring.terms import build_reward_terms

from support.paths import REPO

CONF = REPO / "conf" / "reward"


def make(name, **params):
    cls = REWARDS.get(name)
    return cls(build_config(cls.Config, params, "test"))


def conv(text):
    return [{"role": "assistant", "content": text}]


# ---- math_answer ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, number",
    [
        ("The answer is 42.", 42.0),
        ("41, no wait: 42", 42.0),  # the *last* number
        ("x = -3", -3.0),  # sign after '=' and a space
        ("3-1", 1.0),  # '-' after a digit is an operator: the last number is 1, not -1
        ("so 1,200 - 7 = -5.5", -5.5),
        ("1,234,567 apples", 1234567.0),  # thousands commas
        ("1,2,3", 3.0),  # commas that are not thousands separators split numbers
        ("", None),
        ("no idea", None),
    ],
)
def test_last_number(text, number):
    assert last_number(text) == number


@pytest.mark.parametrize(
    "gold, number", [(" 1,234 ", 1234.0), ("1 234", 1234.0), (7, 7.0), ("-12", -12.0), ("n/a", None)]
)
def test_gold_number(gold, number):
    assert gold_number(gold) == number


def test_math_answer_last_number():
    r = make("math_answer")
    completions = ["It is 42", "It is 41", "", "The total is 1234", "-3", "3", "<think>42?</think> 40", "<think>42"]
    golds = ["42", "42", "42", "1,234", "-3", "-3", "42", "42"]
    # 42 ok, 41 wrong, empty wrong, commas in the gold, negative ok, sign matters, trace dropped, unclosed trace
    assert r(None, completions, answer=golds) == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_math_answer_conversational_equals_string():
    r = make("math_answer")
    texts, golds = ["so 12", "so 13"], ["12", 12]  # the gold may be a number
    assert r(None, [conv(t) for t in texts], answer=golds) == r(None, texts, answer=golds) == [1.0, 0.0]


def test_math_answer_unscorable_gold_and_custom_column():
    r = make("math_answer", column="solution")
    assert r(None, ["5", "5"], solution=[None, "no number"]) == [None, None]
    with pytest.raises(KeyError, match="solution"):
        r(None, ["5"], answer=["5"])


def test_math_answer_math_verify_mode():
    r = make("math_answer", mode="math_verify")
    completions = [r"so $\frac{1}{2}$", r"\boxed{0.5}", "1/3", "2*3", "It is 7 apples", ""]
    golds = ["0.5", r"\frac{1}{2}", "0.5", "6", "7", "7"]
    # symbolic equality; 1/3 != 1/2; math-verify *evaluates* "2*3" = 6 (why last_number is the default)
    assert r(None, completions, answer=golds) == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    # the same echo under last_number: the last number of "2*3" is 3
    assert make("math_answer")(None, ["2*3"], answer=["6"]) == [0.0]


def test_math_answer_math_verify_off_main_thread():
    """signal-based timeouts raise off the main thread; the reward must disable them there."""
    r = make("math_answer", mode="math_verify")
    out = []
    t = threading.Thread(target=lambda: out.append(r(None, [r"$\frac{2}{4}$"], answer=["1/2"])))
    t.start()
    t.join()
    assert out == [[1.0]]


def test_strip_think():
    assert strip_think("<think>a</think> b") == " b"
    assert strip_think("reasoning</think>b") == "b"  # <think> opened by the chat template
    assert strip_think("x <think>cut off") == "x "
    assert strip_think("plain") == "plain"


# ---- exact_match ------------------------------------------------------------------------------


def test_exact_match():
    r = make("exact_match")
    completions = ["  Paris ", "paris\n", "New   York", "Pari", "", conv("<think>hm</think>Paris")]
    golds = ["paris", "Paris", "new york", "Paris", "Paris", "Paris"]
    assert r(None, completions, answer=golds) == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    strict = make("exact_match", lowercase=False, collapse_whitespace=False)
    assert strict(None, ["Paris", "paris", "New  York"], answer=["Paris", "Paris", "New York"]) == [1.0, 0.0, 0.0]
    assert r(None, ["x"], answer=[None]) == [None]


# ---- format -----------------------------------------------------------------------------------


def test_format_tags_order_and_match():
    r = make("format", tags=["think", "answer"])
    completions = [
        "<think>a\nb</think>\n<answer>4</answer>",  # ok; '.' spans newlines
        "<answer>4</answer><think>a</think>",  # wrong order
        "<think>a</think>",  # missing answer
        "Sure! <think>a</think><answer>4</answer>",  # text outside blocks: not a fullmatch
        "",
        conv("<think></think> <answer></answer>"),  # empty blocks are still the format
    ]
    assert r(None, completions) == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    loose = make("format", tags=["think", "answer"], match="search")
    assert loose(None, completions) == [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    # partial: the whole shape 1.0, else k complete blocks of T = 2 tags score k / (T + 1) = k / 3:
    # wrong order (both blocks) 2/3, below the shape; a lone think 1/3; text around both blocks 2/3; empty 0
    partial = make("format", tags=["think", "answer"], partial=True)
    assert partial(None, completions) == [1.0, 2 / 3, 1 / 3, 2 / 3, 0.0, 1.0]
    three = make("format", tags=["intent", "think", "answer"], partial=True)  # k / 4
    assert three(None, ["<answer>x</answer>", "<intent>a</intent> <think>b", "no tags"]) == [0.25, 0.25, 0.0]


def test_format_pattern():
    r = make("format", pattern=r"-?\d+")
    assert r(None, ["42", "-7", "42.", "is 42"]) == [1.0, 1.0, 0.0, 0.0]
    assert make("format", pattern=r"\d+", match="search")(None, ["is 42", "none"]) == [1.0, 0.0]


@pytest.mark.parametrize(
    "params",
    [{}, {"pattern": "x", "tags": ["a"]}, {"pattern": "("}, {"tags": ["a b"]}, {"pattern": "x", "partial": True}],
)
def test_format_bad_config(params):
    with pytest.raises(ConfigError):
        make("format", **params)


# ---- length -----------------------------------------------------------------------------------


def test_length_tokens_hand_computed():
    r = make("length", target=10)
    ids = [[0] * n for n in (10, 4, 15, 25, 0)]
    # r = -min(1, |L - 10| / 10):
    #   L=10 -> 0;  L=4 -> -6/10 = -0.6;  L=15 -> -5/10 = -0.5;  L=25 -> -15/10 -> clipped -1;  L=0 -> -1
    assert r(None, [""] * 5, completion_ids=ids) == pytest.approx([0.0, -0.6, -0.5, -1.0, -1.0])
    over = make("length", target=10, mode="over_only")
    # over_only: r = -min(1, max(0, L - 10) / 10): 0, 0 (short is free), -0.5, -1, 0
    assert over(None, [""] * 5, completion_ids=ids) == pytest.approx([0.0, 0.0, -0.5, -1.0, 0.0])


def test_length_words_and_chars():
    words = make("length", target=4, unit="words")
    # "a b c" = 3 words -> -|3-4|/4 = -0.25; 6 words -> -2/4 = -0.5; "" = 0 words -> -1
    assert words(None, ["a b  c", conv("a b c d e f"), ""]) == pytest.approx([-0.25, -0.5, -1.0])
    chars = make("length", target=40, unit="chars", mode="over_only")
    # 50 chars -> -(50-40)/40 = -0.25 (seed 000 #14's 40-character answers); 12 chars -> 0
    assert chars(None, ["x" * 50, "short answer"]) == pytest.approx([-0.25, 0.0])
    with pytest.raises(ValueError, match="completion_ids"):
        make("length", target=4)(None, ["a"])
    with pytest.raises(ConfigError, match="target"):
        make("length", target=0)


# ---- callable ---------------------------------------------------------------------------------


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    pkg = tmp_path / "userpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "rewards.py").write_text(
        textwrap.dedent(
            """
            def contains_answer(prompts, completions, answer, bonus=1.0, **kwargs):
                return [bonus if a in (c if isinstance(c, str) else c[0]["content"]) else 0.0
                        for c, a in zip(completions, answer)]

            async def async_len(completions, **kwargs):
                return [float(len(c)) for c in completions]

            class Scaled:
                def __init__(self, scale):
                    self.scale = scale

                def __call__(self, completions, **kwargs):
                    return [self.scale] * len(completions)

            not_callable = 3
            """
        )
    )
    (pkg / "broken.py").write_text("import definitely_not_a_module_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "userpkg"
    for name in [m for m in sys.modules if m.startswith("userpkg")]:
        del sys.modules[name]


@pytest.mark.parametrize("path", ["userpkg.rewards:contains_answer", "userpkg.rewards.contains_answer"])
def test_callable_by_path(user_module, path):
    r = make("callable", path=path, kwargs={"bonus": 2.0})
    assert r(None, ["it is 42", conv("nope")], answer=["42", "42"]) == [2.0, 0.0]


def test_callable_factory_async_and_trl_reward(user_module):
    scaled = make("callable", path="userpkg.rewards:Scaled", factory=True, kwargs={"scale": 0.5})
    assert scaled(None, ["a", "b"]) == [0.5, 0.5]
    assert make("callable", path="userpkg.rewards:async_len")(None, ["ab", "abc"]) == [2.0, 3.0]
    think = make("callable", path="trl.rewards:think_format_reward")  # an existing TRL reward, unchanged
    assert think(None, [conv("<think>\nx\n</think>\n4"), conv("4")]) == [1.0, 0.0]
    overlong = make(
        "callable",
        path="trl.rewards.get_soft_overlong_punishment",
        factory=True,
        kwargs={"max_completion_len": 10, "soft_punish_cache": 4},
    )
    # DAPO soft punishment: L=6 -> 0; L=8 -> (6 - 8) / 4 = -0.5; L=11 -> -1
    assert overlong(None, ["", "", ""], completion_ids=[[0] * 6, [0] * 8, [0] * 11]) == [0.0, -0.5, -1.0]


@pytest.mark.parametrize(
    "path, match",
    [
        ("userpkg.nope:f", "No module named 'userpkg.nope'"),
        ("userpkg.rewards:missing", "has no attribute 'missing'"),
        ("userpkg.rewards.missing", "has no attribute 'missing'"),
        ("userpkg.broken:f", "definitely_not_a_module_xyz"),  # the module's own failing import is reported
        ("userpkg.rewards:not_callable", "not a callable"),
        ("userpkg.rewards:Scaled", "factory: true"),
    ],
)
def test_callable_errors_name_the_key(user_module, path, match):
    with pytest.raises(ConfigError, match=r"reward\.terms\[1\]\.params\.path") as err:
        build_reward_terms(
            [{"name": "format", "params": {"pattern": "x"}}, {"name": "callable", "params": {"path": path}}]
        )
    assert match in str(err.value)


# ---- build_reward_terms -----------------------------------------------------------------------


def test_build_reward_terms_names_and_weights():
    funcs, names, weights = build_reward_terms(
        [
            {"name": "math_answer"},
            {"name": "format", "weight": 0.1, "params": {"tags": ["answer"]}},
            {"name": "format", "weight": 0.2, "params": {"pattern": "x"}},
            {"name": "length", "weight": 1, "params": None},
        ]
    )
    assert names == ["math_answer", "format", "format_2", "length"]
    assert [f.__name__ for f in funcs] == names
    assert torch.equal(weights, torch.tensor([1.0, 0.1, 0.2, 1.0]))
    from trl.trainer.utils import get_callable_name, is_async_callable

    assert [get_callable_name(f) for f in funcs] == names  # what TRL logs
    assert not any(is_async_callable(f) or isinstance(f, torch.nn.Module) for f in funcs)  # TRL's sync path


def test_build_reward_terms_errors():
    with pytest.raises(ConfigError) as err:
        build_reward_terms([{"name": "math_anwser"}])
    msg = str(err.value)
    assert "reward.terms[0].name" in msg and "Did you mean 'math_answer'?" in msg
    assert all(n in msg for n in ["callable", "exact_match", "format", "length", "math_answer"])
    with pytest.raises(ConfigError, match=r"Unknown key reward\.terms\[0\]\.params\.colum\b"):
        build_reward_terms([{"name": "math_answer", "params": {"colum": "x"}}])
    with pytest.raises(ConfigError, match=r"Unknown key reward\.terms\[0\]\.wieght"):
        build_reward_terms([{"name": "math_answer", "wieght": 2}])
    with pytest.raises(ConfigError, match=r"reward\.terms\[0\]\.params\.mode"):
        build_reward_terms([{"name": "math_answer", "params": {"mode": "guess"}}])
    with pytest.raises(ConfigError, match="non-empty"):
        build_reward_terms([])


@pytest.mark.parametrize("path", sorted(CONF.glob("*.yaml")), ids=lambda p: p.stem)
def test_conf_files_build(path, tmp_path):
    node = yaml.safe_load(path.read_text())
    assert set(node) == {
        "defaults",
        "terms",
        "on_failure",
        "timeout_s",
        "breaker",
    }  # combiner: the sub-group reward/combine
    for term in node["terms"]:  # ??? is given on the command line; reward_model's is a trained folder
        for key, value in term.get("params", {}).items():
            if value == "???":
                assert (term["name"], key) == ("reward_model", "path"), f"{path.name}: fill {term['name']}.{key} here"
                (tmp_path / "config.json").write_text(
                    '{"architectures": ["LlamaForSequenceClassification"], "id2label": {"0": "x"}}'
                )
                term["params"][key] = str(tmp_path)
    funcs, names, weights = build_reward_terms(node["terms"])
    assert len(funcs) == len(names) == weights.numel() >= 1
    (combine,) = [d["combine"] for d in node["defaults"] if isinstance(d, dict) and "combine" in d]
    assert combine in COMBINERS


def test_trl_calling_convention():
    """Call the terms exactly as trl.GRPOTrainer._calculate_rewards (trl 1.16) does."""
    node = yaml.safe_load((CONF / "math_answer_format.yaml").read_text())
    funcs, _, weights = build_reward_terms(node["terms"])
    inputs = [  # TRL's per-completion rows: prompt, completion, completion_ids plus dataset columns
        {"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4", "question": "2+2?"},
        {"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4", "question": "2+2?"},
    ]
    prompts = [x["prompt"] for x in inputs]
    completions = [conv("<think>2+2</think>\n<answer>4</answer>"), conv("5")]
    completion_ids_list = [[1, 2, 3], [4]]
    keys = [key for key in inputs[0] if key not in ["prompt", "completion", "completion_ids"]]
    reward_kwargs = {key: [example[key] for example in inputs] for key in keys}
    extra, metrics = {}, {}
    reward_kwargs["trainer_state"] = None
    reward_kwargs["log_extra"] = lambda column, values: extra.setdefault(column, []).extend(values)
    reward_kwargs["log_metric"] = lambda name, value: metrics.setdefault(name, []).append(value)
    rewards_per_func = torch.zeros(len(prompts), len(funcs))
    for i, reward_func in enumerate(funcs):
        out = reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids_list, **reward_kwargs)
        out = [r if r is not None else torch.nan for r in out]
        rewards_per_func[:, i] = torch.tensor(out, dtype=torch.float32)
    assert rewards_per_func.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert extra == {"math_answer_gold": ["4", "4"]}
    rewards, _ = COMBINERS.get("weighted_sum")(COMBINERS.get("weighted_sum").Config())(rewards_per_func, weights, 2)
    assert rewards.tolist() == pytest.approx([1.1, 0.0])


# ---- weighted_sum -----------------------------------------------------------------------------


def test_weighted_sum_nans():
    combine = COMBINERS.get("weighted_sum")(COMBINERS.get("weighted_sum").Config())
    nan = math.nan
    terms = torch.tensor([[1.0, 0.5], [nan, 0.5], [1.0, nan], [nan, nan], [0.0, -1.0]])
    weights = torch.tensor([1.0, 0.1])
    rewards, metrics = combine(terms, weights, num_generations=5)
    # 1 + 0.05 = 1.05; NaN term skipped -> 0.05; -> 1.0; all NaN stays NaN; 0 - 0.1 = -0.1
    assert rewards[[0, 1, 2, 4]].tolist() == pytest.approx([1.05, 0.05, 1.0, -0.1])
    assert math.isnan(rewards[3].item())
    assert metrics == {"unscorable_frac": pytest.approx(0.2)}
    zero = COMBINERS.get("weighted_sum")(COMBINERS.get("weighted_sum").Config(nan_as_zero=True))
    assert zero(terms, weights, 5)[0][3].item() == 0.0
    with pytest.raises(ValueError, match="weights"):
        combine(terms, torch.ones(3), 5)


def test_terms_pickle(user_module):
    """TRL's async rollout worker pickles reward functions into a child process."""
    import pickle

    funcs, names, _ = build_reward_terms(
        [{"name": "math_answer"}, {"name": "format", "params": {"tags": ["answer"]}}, {"name": "length"}]
        + [{"name": "callable", "params": {"path": "userpkg.rewards:contains_answer"}}]
    )
    clones = pickle.loads(pickle.dumps(funcs))
    assert [f.__name__ for f in clones] == names
    assert clones[0](None, ["4"], answer=["4"]) == [1.0] and clones[3](None, ["4"], answer=["4"]) == [1.0]


# ---- noisy_rater (a simulated 1-10 rater for ODRPO, seed 004 #25) ----------------------------------------
def test_noisy_rater_true_tiers_by_hand():
    # gold 19: "19" e = 0 -> 10; "20" e = 1/19 = .053 -> band (.05, .1] -> 7; "25" e = 6/19 = .32 -> (.25, .5] -> 5;
    # "40" e = 21/19 = 1.1 -> (1, 2] -> 3; "100" e = 81/19 = 4.3 -> above every band -> 2; no number -> 1.
    rater = make("noisy_rater")
    assert [rater.quality(t, "19") for t in ["19", "20", "25", "40", "100", "no idea"]] == [10, 7, 5, 3, 2, 1]
    assert rater.quality("19", "None") is None and rater.score_range() == (1.0, 10.0)
    # without noise the rating is the tier; a None gold is unscorable
    exact = make("noisy_rater", noise_sd=0.0, outlier=0.0)
    assert exact([""] * 4, [conv("19"), conv("<think>4</think> 20"), conv("x"), conv("19")], answer=["19", "19", "19", None]) == [
        10.0, 7.0, 1.0, None,
    ]  # fmt: skip


def test_noisy_rater_noise_votes_and_resumable_stream():
    # sd 0.7: a rating moves a tier when |0.7 z| > 0.5, P = 2 (1 - Phi(0.714)) = 0.475; two tiers when |0.7 z| > 1.5,
    # P = 2 (1 - Phi(2.14)) = 0.032; outliers (5%) are uniform. At tier 5 (room both ways), over 4000 draws:
    rater = make("noisy_rater", seed=3)
    ratings = torch.tensor(rater([""] * 4000, [conv("25")] * 4000, answer=["19"] * 4000))
    moved = (ratings != 5).float().mean().item()
    assert 0.95 * 0.475 + 0.05 * 0.9 - 0.03 < moved < 0.95 * 0.475 + 0.05 * 0.9 + 0.03
    assert set(ratings.tolist()) <= set(map(float, range(1, 11))) and len(set(ratings.tolist())) >= 8
    # the median of 5 ratings moves far less often (the costly majority-vote remedy)
    voted = torch.tensor(make("noisy_rater", seed=3, votes=5)([""] * 4000, [conv("25")] * 4000, answer=["19"] * 4000))
    assert (voted != 5).float().mean().item() < moved / 2
    # the generator's state is what a checkpoint saves: restoring it replays the same ratings
    state = rater.state_dict()
    first = rater([""] * 8, [conv("25")] * 8, answer=["19"] * 8)
    rater.load_state_dict(state)
    assert rater([""] * 8, [conv("25")] * 8, answer=["19"] * 8) == first
    with pytest.raises(ConfigError, match="increasing"):
        build_config(REWARDS.get("noisy_rater").Config, {"bands": [0.5, 0.1]}, "test")


def test_word_recall_by_hand():
    # profile words of 4+ letters: {pirate, captain, loves, puns, about (a function word: dropped), numbers}
    # -> W = {pirate, captain, loves, puns, numbers}, 5 words. "Arr, this captain loves NUMBERS: 12" uses
    # captain, loves, numbers -> 3 / 5; a bare "12" -> 0; a profile without such words -> 0; None -> unscorable
    recall = make("word_recall")
    profile = "a pirate captain who loves puns about numbers"
    texts = [conv("Arr, this captain loves NUMBERS: 12"), conv("12"), conv("the sea"), conv("x")]
    got = recall([""] * 4, texts, profile=[profile, profile, "a b c", None])
    assert got == [pytest.approx(0.6), 0.0, 0.0, None] and recall.score_range() == (0.0, 1.0)
