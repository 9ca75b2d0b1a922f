"""rlpost/dev/test_durations.py: a hand-written JUnit XML -> the totals, folders and slowest tests of the doc."""

from __future__ import annotations

from rlpost.dev.test_durations import folder, read_cases, render

XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4" time="150.0">
<testcase classname="tests.unit.core.test_a" name="test_one" time="30.0"/>
<testcase classname="tests.unit.core.test_a" name="test_two" time="6.0"><skipped message="gpu"/></testcase>
<testcase classname="tests.trainer.test_b" name="test_three[x]" time="90.0"><failure message="boom"/></testcase>
<testcase classname="tests.config.test_c" name="test_four" time="24.0"/>
</testsuite></testsuites>"""


def test_cases_folders_and_the_rendered_table(tmp_path):
    (tmp_path / "run.xml").write_text(XML)
    cases, wall = read_cases(tmp_path / "run.xml")
    assert wall == 150.0
    assert [(c.test, c.seconds, c.outcome) for c in cases] == [
        ("tests/unit/core/test_a.py::test_one", 30.0, "passed"),
        ("tests/unit/core/test_a.py::test_two", 6.0, "skipped"),
        ("tests/trainer/test_b.py::test_three[x]", 90.0, "failed"),
        ("tests/config/test_c.py::test_four", 24.0, "passed"),
    ]
    assert folder("tests/unit/core/test_a.py::x") == "tests/unit/core"
    assert folder("tests/trainer/test_b.py::y") == "tests/trainer"
    text = render(cases, wall, "a test machine", "abc123", slowest=2)
    # 150 s wall = 2.5 min; the cases sum to 150 s too; trainer 90 / 150 = 60%, unit/core 36 / 150 = 24%
    assert "**Total**: 2.5 min wall for 4 tests (1 failed, 2 passed, 1 skipped)" in text
    assert "| `tests/trainer` | 1 | 1.5 | 60% |" in text and "| `tests/unit/core` | 2 | 0.6 | 24% |" in text
    assert text.index("`tests/trainer`") < text.index("`tests/unit/core`") < text.index("`tests/config`")
    slow = text.split("## The 2 slowest tests")[1]
    assert "| 90.0 | `tests/trainer/test_b.py::test_three[x]` |" in slow and "test_four" not in slow
