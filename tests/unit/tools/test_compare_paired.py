"""rlpost compare against a baseline arm (issue 50, M2): every statistic by hand on small made-up numbers,
the reductions, the equal-compute reading, and the seed-paired differences, spreads and verdicts of hand-written
run folders (written here as ``rlpost train`` writes them) through write_comparison and the CLI."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
import yaml

from rlpost.analysis.compare import difference, find_baseline, find_runs, group_methods, write_comparison
from rlpost.analysis.reductions import parse_metric, read_at, reduce
from rlpost.analysis.stats import (
    bootstrap_ci,
    paired_bootstrap_ci,
    sd,
    sd_difference,
    two_level_bootstrap_ci,
    verdict,
)
from rlpost.cli import main as cli

from support.config import assert_clean_failure


def exact_two_level(groups: list[list[int]]) -> dict[Fraction, Fraction]:
    """The exact distribution of the two-level bootstrap statistic, by enumerating every draw: n seeds
    drawn with replacement, then each drawn seed's m prompts with replacement (every outcome equally likely)."""
    per_seed = []  # for each seed: {mean of m drawn prompts: probability}
    for g in groups:
        means = Counter(Fraction(sum(draw), len(g)) for draw in itertools.product(g, repeat=len(g)))
        per_seed.append({v: Fraction(c, len(g) ** len(g)) for v, c in means.items()})
    n = len(groups)
    out: Counter = Counter()
    for seeds in itertools.product(range(n), repeat=n):
        for combo in itertools.product(*(per_seed[s].items() for s in seeds)):
            p = Fraction(1, n**n)
            for _, q in combo:
                p *= q
            out[sum(v for v, _ in combo) / n] += p
    return dict(out)


def quantile_atoms(dist: dict[Fraction, Fraction], level: float = 0.95) -> tuple[Fraction, Fraction]:
    """The atoms holding the (1 - level)/2 and (1 + level)/2 quantiles of a discrete distribution."""
    cdf, low, high = Fraction(0), None, None
    for v in sorted(dist):
        cdf += dist[v]
        if low is None and cdf > (1 - level) / 2:
            low = v
        if high is None and cdf > (1 + level) / 2:
            high = v
    assert low is not None and high is not None
    return low, high


def test_two_level_bootstrap_by_hand():
    # seed 0's prompts differ by [0, 1], seed 1's by [1, 1]: effect (0.5 + 1) / 2 = 0.75.
    # Exact law: seeds (1, 1) w.p. 1/4 -> 1; one of each w.p. 1/2 -> (d0 + 1) / 2 with d0 in {0, .5, 1} w.p.
    # 1/4, 1/2, 1/4; seeds (0, 0) w.p. 1/4 -> (d0 + d0') / 2 in {0, .25, .5, .75, 1} w.p. (1, 4, 6, 4, 1) / 16.
    # P(0) = 1/64 < 2.5% < P(<= .25) = 5/64 -> low .25; P(1) = 1/4 + 1/8 + 1/64 > 2.5% -> high 1
    groups = [[0, 1], [1, 1]]
    dist = exact_two_level(groups)
    assert dist[Fraction(0)] == Fraction(1, 64) and dist[Fraction(1, 4)] == Fraction(4, 64)
    assert quantile_atoms(dist) == (Fraction(1, 4), Fraction(1))
    assert two_level_bootstrap_ci(groups) == (0.25, 1.0)
    # the seeds alone (d = 0.5, 1) give the narrower (0.5, 1): the prompts' spread widens the interval
    assert bootstrap_ci([0.5, 1.0]) == (0.5, 1.0)
    # prompts all equal within each seed: the seed-level interval of {0, 1} (0 and 1, as in test_compare)
    assert two_level_bootstrap_ci([[0, 0], [1, 1]]) == (0.0, 1.0)
    # degenerate: every prompt of every seed differs by the same amount -> a zero-width interval
    assert two_level_bootstrap_ci([[0.2, 0.2], [0.2], [0.2, 0.2, 0.2]]) == pytest.approx((0.2, 0.2))
    # a fixed seed gives the same interval
    spread = [[0.1, 0.5, -0.2], [0.3, 0.0], [0.4, 0.4, 0.1, 0.2]]
    assert two_level_bootstrap_ci(spread, seed=3) == two_level_bootstrap_ci(spread, seed=3)
    with pytest.raises(ValueError, match="no values"):
        two_level_bootstrap_ci([[0.1], []])


def test_standard_deviation_and_its_intervals_by_hand():
    assert sd([0.0, 1.0]) == pytest.approx(math.sqrt(0.5))  # ((0 - .5)^2 + (1 - .5)^2) / (2 - 1)
    with pytest.raises(ValueError, match="two values"):
        sd([1.0])

    def std(x):
        return float(np.std(x, ddof=1))

    # {0, 1, 2}: a resample's SD is 0 (one value thrice, 3 of 27 draws), 1 (0, 1, 2 in any order: 6 of 27),
    # sqrt(1/3) (two equal neighbours: 12 of 27) or sqrt(4/3) (two equal ends apart: 6 of 27): P(0) = 1/9 > 2.5%
    # -> low 0; P(sqrt(4/3)) = 2/9 > 2.5% -> high sqrt(4/3) = 1.1547
    low, high = bootstrap_ci([0.0, 1.0, 2.0], statistic=std)
    assert (low, high) == (0.0, pytest.approx(math.sqrt(4 / 3)))
    assert bootstrap_ci([0.3, 0.3, 0.3], statistic=std) == (0.0, 0.0)  # all seeds equal: zero width
    # paired SDs: b = 2a on every seed, so each resample's SD(a) - SD(b) = -SD(a*): the interval of -SD above
    low, high = paired_bootstrap_ci([0, 1, 2], [0, 2, 4], sd_difference)
    assert (low, high) == (pytest.approx(-math.sqrt(4 / 3)), 0.0)
    # b = a + 0.25 on every seed: the two SDs are equal in every resample -> zero width at 0
    assert paired_bootstrap_ci([0.1, 0.4, 0.2], [0.35, 0.65, 0.45], sd_difference) == pytest.approx((0.0, 0.0))


def test_verdict_rule_of_the_evidence_table():
    assert verdict(0.01, 0.2, "higher") == "reproduced"  # excludes 0, expected side
    assert verdict(-0.2, -0.01, "higher") == "opposite"
    assert verdict(0.0, 0.2, "higher") == "null"  # contains 0 (at its end)
    assert verdict(-0.2, -0.01, "lower") == "reproduced" and verdict(0.01, 0.2, "lower") == "opposite"
    assert verdict(-0.1, 0.1, "lower") == "null"
    # equality within m = 0.05: inside [-m, m] / wholly outside / anything else
    assert verdict(-0.05, 0.04, "equal", 0.05) == "reproduced"
    assert verdict(0.06, 0.2, "equal", 0.05) == "opposite" and verdict(-0.3, -0.051, "equal", 0.05) == "opposite"
    assert verdict(-0.02, 0.08, "equal", 0.05) == "null"
    # "not higher": upper end below +m / lower end above +m
    assert verdict(-0.3, 0.049, "not_higher", 0.05) == "reproduced"
    assert verdict(0.051, 0.3, "not_higher", 0.05) == "opposite" and verdict(0.0, 0.06, "not_higher", 0.05) == "null"
    assert (
        verdict(-0.049, 0.3, "not_lower", 0.05) == "reproduced"
        and verdict(-0.3, -0.06, "not_lower", 0.05) == "opposite"
    )
    assert verdict(0.0, 0.0, "higher") == "null" and verdict(0.25, 0.25, "higher") == "reproduced"  # zero width
    with pytest.raises(ValueError, match="margin"):
        verdict(0.0, 0.1, "equal")
    with pytest.raises(ValueError, match="expect"):
        verdict(0.0, 0.1, "bigger")


def test_reductions_by_hand():
    points = [(1, 0.1), (2, 0.4), (3, 0.2), (4, 0.6), (5, 0.5)]

    def value(text):
        found = reduce(points, parse_metric(f"reward:{text}") if text else parse_metric("reward"))
        return found.value if found else None

    assert value("") == value("final") == 0.5
    assert value("last:2") == pytest.approx(0.55)  # (0.6 + 0.5) / 2
    assert value("last:10") == value("mean") == pytest.approx(0.36)  # 1.8 / 5: all of them when fewer
    assert (value("max"), value("min")) == (0.6, 0.1)
    assert value("gain") == pytest.approx(0.4)  # 0.5 - 0.1, last minus first
    assert value("first_above:0.4") == 2
    # trailing means of 2: (.1, .4) .25 @2, (.4, .2) .3 @3, (.2, .6) .4 @4 -> first >= 0.4 at step 4
    assert value("first_above:0.4:2") == 4
    assert value("first_below:0.3:2") == 2  # .25 at step 2
    never = reduce(points, parse_metric("reward:first_above:0.7"))
    assert never is not None and (never.value, never.censored) == (6, True)  # censored: the step after the last
    assert reduce([(0, 0.3)], parse_metric("eval/accuracy:gain")) is None  # no before
    assert reduce([], parse_metric("reward")) is None
    spec = parse_metric("eval/sampled/reward_best@4:gain")
    assert (spec.key, spec.reduction, spec.per_prompt) == ("eval/sampled/reward_best@4", "gain", True)
    assert parse_metric("rewards/format/mean:first_above:0.3:3").window == 3
    for bad, message in (
        ("reward:maks", "unknown reduction 'maks'. Valid: final, last:<k>"),
        ("reward:last:0", "last:<k> takes a whole number"),
        ("reward:last", "last:<k> takes a whole number"),
        ("reward:first_above:x", "first_above:<value>[:<window>]"),
        ("reward:first_above:0.5:0", "first_above:<value>[:<window>]"),
        ("reward:gain:3", "unknown reduction 'gain:3'"),
        (":gain", "names no metric"),
    ):
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            parse_metric(bad)


def test_reading_at_a_budget_interpolates_linearly():
    points = [(0, 0.0, 0.2), (1, 100.0, 0.3), (2, 220.0, 0.5)]  # (step, cumulative x, value)
    # budget 160: between x 100 and 220, t = 60 / 120 = 0.5 -> step 1.5, value 0.3 + 0.5 * (0.5 - 0.3) = 0.4
    series, whole = read_at(points, 160.0)
    assert series == [(0, 0.2), (1, 0.3), (1.5, pytest.approx(0.4))] and not whole
    assert read_at(points, 220.0) == ([(0, 0.2), (1, 0.3), (2, 0.5)], True)  # the whole run
    assert read_at(points, 100.0) == ([(0, 0.2), (1, 0.3)], False)  # on a logged point: nothing to interpolate
    assert read_at(points, 300.0) is None  # never reached
    assert read_at([(1, 50.0, 0.1), (2, 90.0, 0.2)], 20.0) is None  # before the first logged point


# Hand-made runs: arms grpo (the baseline), gepo and dapo, seeds 0, 1, 2.
#  reward per step 1..4: grpo 0.1k + 0.1s, gepo (.1, .3, .5, .7) + 0.1s; dapo 6 steps of 0.1k + 0.1s
#  num_tokens: 100 per step (grpo, dapo), 150 per step (gepo)
#  held-out correctness of 4 prompts, before and after (step 0 and the last step):
BEFORE = {("grpo", 2): [1, 1, 0, 0]}  # every other run starts at [1, 0, 0, 0]
AFTER = {
    ("grpo", 0): [1, 0, 0, 0],
    ("grpo", 1): [1, 0, 0, 0],
    ("grpo", 2): [1, 1, 0, 0],
    ("gepo", 0): [1, 1, 0, 0],
    ("gepo", 1): [1, 1, 0, 0],
    ("gepo", 2): [1, 1, 1, 0],
}


def write_run(folder, arm: str, seed: int) -> None:
    """A finished run folder as ``rlpost train`` leaves it (the files compare reads)."""
    folder.mkdir(parents=True)
    (folder / "overrides.yaml").write_text(yaml.safe_dump([f"algorithm={arm}", f"seed={seed}"]))
    (folder / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "algorithm": {"name": arm}}))
    steps = 6 if arm == "dapo" else 4
    base = {"gepo": [0.1, 0.3, 0.5, 0.7]}.get(arm, [0.1 * k for k in range(1, steps + 1)])
    tokens = 150 if arm == "gepo" else 100
    rows = []
    before, after = BEFORE.get((arm, seed), [1, 0, 0, 0]), AFTER.get((arm, seed))
    if after is not None:
        rows.append({"step": 0, "eval/accuracy": sum(before) / 4})
    rows += [
        {"step": k, "reward": base[k - 1] + 0.1 * seed, "num_tokens": float(tokens * k), "step_time": 1.0}
        for k in range(1, steps + 1)
    ]
    summary: dict = {"steps": steps}
    if after is not None:
        rows.append({"step": steps, "eval/accuracy": sum(after) / 4})
        summary.update(before={"eval/accuracy": sum(before) / 4}, after={"eval/accuracy": sum(after) / 4})
        for name, scores in (("eval_items_before.json", before), ("eval_items.json", after)):
            items = [
                {"index": i, "reward": float(c), "score": float(c), "correct": bool(c)} for i, c in enumerate(scores)
            ]
            (folder / name).write_text(json.dumps(items))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def arms(tmp_path):
    """{arm: its multirun folder} (job folders 0, 1, 2 = seeds)."""
    out = {}
    for arm in ("grpo", "gepo", "dapo"):
        for seed in range(3):
            write_run(tmp_path / arm / str(seed), arm, seed)
        out[arm] = tmp_path / arm
    return out


METRICS = ["eval/accuracy", "eval/accuracy:gain", "reward:first_above:0.5", "reward:last:2"]


def test_paired_differences_against_a_baseline_by_hand(arms, tmp_path):
    paths = [arms["gepo"], arms["grpo"], arms["dapo"]]
    methods = group_methods(find_runs(paths))
    assert find_baseline(methods, "algorithm=grpo", paths).label == "algorithm=grpo"
    assert find_baseline(methods, str(arms["grpo"]), paths).label == "algorithm=grpo"  # its runs entry
    with pytest.raises(ValueError, match="baseline='algorithm=ppo' is no arm. Arms: 'algorithm=gepo'"):
        find_baseline(methods, "algorithm=ppo", paths)
    result = write_comparison(
        paths,
        METRICS,
        ["reward"],
        "tokens",
        tmp_path / "out",
        baseline=str(arms["grpo"]),
        expect=["higher", "higher", "lower", "higher"],
        expect_sd="lower",
    )
    paired = result["paired"]
    diff = {(d.arm.split("=")[1], d.metric, d.at): d for d in paired.differences}

    # eval/accuracy at the end: per-prompt differences arm - baseline (both scored every prompt)
    #   seed 0: [1,1,0,0] - [1,0,0,0] = [0,1,0,0]; seed 1 the same; seed 2: [1,1,1,0] - [1,1,0,0] = [0,0,1,0]
    #   -> 0.25 per seed, effect 0.25. Two-level: P(statistic 0) = P(every drawn prompt is a 0) = (3/4)^12 =
    #   3.2% > 2.5%, so the interval starts at 0: null, though every seed's difference is positive.
    d = diff[("gepo", "eval/accuracy", "run")]
    groups = [[0, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
    assert (d.seeds, d.differences, d.mean) == ([0, 1, 2], [0.25, 0.25, 0.25], pytest.approx(0.25))
    assert quantile_atoms(exact_two_level(groups))[0] == 0
    assert (d.low, d.high) == two_level_bootstrap_ci(groups) and d.low == 0.0
    assert (d.scheme, d.prompts, d.verdict) == ("seeds+prompts", 12, "null")
    # McNemar against the baseline on the pooled prompts: 3 discordant, all for gepo: p = 2 / 2^3
    assert (d.test.name, d.test.a_better, d.test.b_better, d.test.p_value) == ("mcnemar", 3, 0, 0.25)

    # the gain (after minus before, per prompt): seed 2's baseline started higher ([1,1,0,0]) and did not move,
    #   gepo's seed 2 went [1,0,0,0] -> [1,1,1,0]: per-prompt gains minus the baseline's: [0,1,1,0]
    #   -> per seed 0.25, 0.25, 0.5: effect 1/3
    g = diff[("gepo", "eval/accuracy:gain", "run")]
    gain_groups = [[0, 1, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0]]
    assert g.differences == [0.25, 0.25, 0.5] and g.mean == pytest.approx(1 / 3)
    assert (g.low, g.high) == two_level_bootstrap_ci(gain_groups)
    assert g.verdict == verdict(g.low, g.high, "higher") and g.test.p_value == pytest.approx(2 / 16)  # 4 to 0

    # reward:last:2, a training metric, seeds only: grpo 0.35 + 0.1s, gepo 0.6 + 0.1s -> 0.25 on every seed:
    #   all seeds equal, a zero-width interval, reproduced
    r = diff[("gepo", "reward:last:2", "run")]
    assert r.differences == pytest.approx([0.25] * 3) and (r.low, r.high) == pytest.approx((0.25, 0.25))
    assert (r.scheme, r.verdict, r.test) == ("seeds", "reproduced", None)

    # reward:first_above:0.5: grpo reaches 0.5 at step - (seed 0 never: censored at 5), 4, 3; gepo at 3, 3, 2
    #   -> differences -2, -1, -1, effect -4/3; seeds only: all -1 w.p. 8/27 -> high -1, all -2 w.p. 1/27 = 3.7%
    #   -> low -2: (-2, -1) excludes 0 below: reproduced (expect lower)
    f = diff[("gepo", "reward:first_above:0.5", "run")]
    assert (f.baseline_values, f.arm_values, f.censored) == ([5, 4, 3], [3, 3, 2], 1)
    assert f.mean == pytest.approx(-4 / 3) and (f.low, f.high) == (-2.0, -1.0) == bootstrap_ci([-2, -1, -1])
    assert f.verdict == "reproduced"

    # equal steps: gepo and grpo both ran 4 steps, so the reading is the run's own
    assert diff[("gepo", "reward:last:2", "step")].same_as_run
    # equal tokens: the baseline's total is 400; gepo (150 per step) reaches it between steps 2 (300) and 3 (450),
    #   t = 100 / 150 = 2/3: reward 0.3 + 0.2 * 2/3 + 0.1s, so last:2 = (0.3 + 0.4333) / 2 + 0.1s = 0.36667 + 0.1s;
    #   minus grpo's 0.35 + 0.1s -> 1/60 on every seed
    t = diff[("gepo", "reward:last:2", "tokens")]
    assert t.differences == pytest.approx([1 / 60] * 3) and not t.same_as_run and t.scheme == "seeds"
    assert t.budgets == [400.0] * 3
    #   eval/accuracy at 400 of gepo's 600 tokens: before + (after - before) * 2/3 (steps 0 and 4):
    #   seeds 0, 1: 0.25 + 0.25 * 2/3 = 0.41667 vs 0.25; seed 2: 0.25 + 0.5 * 2/3 = 0.58333 vs 0.5
    e = diff[("gepo", "eval/accuracy", "tokens")]
    assert e.differences == pytest.approx([1 / 6, 1 / 6, 1 / 12]) and e.scheme == "seeds"  # not the end: no items
    # a threshold counts steps: no reading at equal tokens
    assert ("gepo", "reward:first_above:0.5", "tokens") not in diff

    # dapo ran 6 steps: at the end its last 2 are 0.55 + 0.1s (difference 0.2); at the baseline's last step (4)
    #   and at its 400 tokens (step 4 too) it equals the baseline's 0.35 + 0.1s
    assert diff[("dapo", "reward:last:2", "run")].differences == pytest.approx([0.2] * 3)
    for at in ("step", "tokens"):
        assert diff[("dapo", "reward:last:2", at)].differences == pytest.approx([0.0] * 3)
        assert diff[("dapo", "reward:last:2", at)].verdict == "null"  # (0, 0) contains 0
    # the other way round, the baseline is the longer run: both are read at the smaller total, the arm's
    (grpo, dapo) = (m for m in methods if m.label in ("algorithm=grpo", "algorithm=dapo"))
    back = difference(grpo, dapo, parse_metric("reward:last:2"), "step")
    assert back.budgets == [4.0] * 3 and back.differences == pytest.approx([0.0] * 3) and not back.same_as_run
    # dapo logged no held-out metric: no pair, no interval
    no_eval = diff[("dapo", "eval/accuracy", "run")]
    assert (no_eval.seeds, no_eval.unpaired, no_eval.mean, no_eval.verdict) == ([], [0, 1, 2], None, None)

    # the SD across seeds: grpo's last:2 values 0.35, 0.45, 0.55: SD 0.1, seed-bootstrap interval (0, sqrt(4/3) / 10)
    grpo = result["cells"]["algorithm=grpo"]["reward:last:2"]
    assert grpo.sd == pytest.approx(0.1) and (grpo.sd_low, grpo.sd_high) == (0.0, pytest.approx(math.sqrt(4 / 3) / 10))
    # gepo = grpo + 0.25 on every seed: equal SDs in every paired resample -> difference 0 with a (0, 0) interval,
    #   ratio 1; expect_sd=lower: null
    (s,) = [s for s in paired.spreads if s.arm == "algorithm=gepo" and s.metric == "reward:last:2"]
    assert s.difference == pytest.approx(0.0) and (s.low, s.high) == pytest.approx((0.0, 0.0))
    assert s.ratio == pytest.approx(1.0) and s.verdict == "null"

    # the pairwise tests now compare each arm with the baseline
    assert [(a, b) for a, b, _ in result["tests"]] == [
        ("algorithm=gepo", "algorithm=grpo"),
        ("algorithm=dapo", "algorithm=grpo"),
    ]

    # compare.json holds every number; compare.md and compare.tex the paired columns
    document = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert document["baseline"] == "algorithm=grpo" and document["x_axis"] == "tokens"
    (row,) = [
        x
        for x in document["differences"]
        if x["arm"] == "algorithm=gepo" and x["metric"] == "eval/accuracy:gain" and x["at"] == "run"
    ]
    assert (
        row["mean"] == pytest.approx(1 / 3)
        and row["differences"] == [0.25, 0.25, 0.5]
        and row["test"]["name"] == "mcnemar"
    )
    assert document["cells"]["algorithm=grpo"]["reward:last:2"]["values"] == pytest.approx(
        {"0": 0.35, "1": 0.45, "2": 0.55}
    )
    markdown = (tmp_path / "out" / "compare.md").read_text()
    assert (
        "| algorithm=gepo | reward:last:2 | end of run | 3 | 0.700 | 0.450 | 0.250 | [0.250, 0.250] | seeds | - | - | higher | reproduced |"
        in markdown
    )
    assert "| algorithm=gepo | eval/accuracy | end of run | 3 | 0.583 | 0.333 | 0.250 | [0.000, " in markdown
    assert "seeds+prompts (12) | mcnemar | 0.25 | higher | null |" in markdown
    assert "equal tokens" in markdown and "equal steps" in markdown  # dapo's equal-steps reading differs from its own
    assert (
        "| algorithm=gepo | reward:last:2 | 3 | 0.100 | 0.100 | 0.000 | [0.000, 0.000] | 1.000 | lower | null |"
        in markdown
    )
    latex = (tmp_path / "out" / "compare.tex").read_text()
    assert "difference [95\\% CI] & $p$ & verdict" in latex and "reproduced" in latex


def test_cli_with_a_baseline_and_its_config_errors(arms, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = f"runs=[{arms['gepo']},{arms['grpo']}]"
    out = tmp_path / "cli"
    args = ["compare", runs, f"out={out}", "baseline='algorithm=grpo'", "metrics=[eval/accuracy,reward:max]"]
    assert cli([*args, "expect=higher"]) == 0
    printed = capsys.readouterr().out
    assert "Against the baseline `algorithm=grpo`" in printed and (out / "compare.json").is_file()
    # an arm that is not there, a reduction that does not exist, an expectation without its margin: exit 2
    for argv, expected in (
        (
            [runs, "baseline='algorithm=ppo'"],
            ["baseline='algorithm=ppo' is no arm. Arms: 'algorithm=gepo', 'algorithm=grpo'"],
        ),
        (
            [runs, "baseline='algorithm=grpo'", "metrics=[reward:maks]"],
            ["metrics[0]='reward:maks': unknown reduction 'maks'"],
        ),
        (
            [runs, "baseline='algorithm=grpo'", "expect=equal"],
            ["'eval/accuracy': a claim of equal needs an equality margin"],
        ),
        ([runs, "baseline='algorithm=grpo'", "expect=[higher]"], ["expect has 1 entries for 2 metrics"]),
        (  # seed 0's baseline run given twice: nothing to pair it by
            [f"runs=[{arms['gepo']},{arms['grpo']},{arms['grpo'] / '0'}]", "baseline='algorithm=grpo'"],
            ["arm 'algorithm=grpo' has more than one run with seed 0"],
        ),
    ):
        code = cli(["compare", *argv])
        assert_clean_failure(code, capsys.readouterr().err, expected, tmp_path)
