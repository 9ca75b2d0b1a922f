"""Generate the bundled personalized questions of IAP (``recipe=iap``, seed 004 #26).

    python -m rlpost.dev.iap_data     # writes recipes/data/personal_questions.jsonl and personal_questions_eval.jsonl

The data is **written for rlpost**, in the spirit of LaMP-QA (which cannot be downloaded here): each
row is one single-turn question whose wording carries a small cue about the asker (a student, a
parent, a retiree, ...). The asker's underlying goal, the ``intent`` column, is never shown to the
policy. What a personalized answer must cover for that asker is the row's ``rubric``: two aspects, as
a LaMP-QA-style per-question rubric of the personalization judge (``reward=rubric`` with
``rubric_column: rubric``). Twelve topics, each asked by three different askers (36 rows); for each
topic one asker is held out (12 eval rows), so evaluation asks familiar questions with an unseen
intent behind them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlpost.data.sources import RESOURCES

OUT = RESOURCES / "recipes" / "data" / "personal_questions.jsonl"

# topic question -> [(cue the asker writes, their intent, two aspects a personalized answer covers)]
TOPICS: list[tuple[str, list[tuple[str, str, tuple[str, str]]]]] = [
    (
        "Which laptop should I buy?",
        [
            (
                "I carry it to lectures every day.",
                "a student who needs a light, affordable laptop",
                ("The answer favours light, portable laptops.", "The answer keeps to a student budget."),
            ),
            (
                "I edit 4K video for clients.",
                "a video professional who needs performance",
                (
                    "The answer recommends a powerful processor and graphics.",
                    "The answer mentions a high-quality screen or plenty of storage.",
                ),
            ),
            (
                "My eyesight is not what it was and I mostly read email.",
                "a retiree who needs simplicity and readability",
                (
                    "The answer recommends a large, readable screen.",
                    "The answer favours a simple, easy-to-use machine.",
                ),
            ),
        ],
    ),
    (
        "How can I get fitter?",
        [
            (
                "I only have 15 minutes a day between shifts.",
                "a busy worker short on time",
                (
                    "The answer suggests short, time-efficient workouts.",
                    "The answer shows how to fit exercise into a busy day.",
                ),
            ),
            (
                "I am recovering from a knee injury.",
                "someone who must protect an injured knee",
                (
                    "The answer suggests low-impact exercise such as swimming or cycling.",
                    "The answer advises checking with a doctor or physiotherapist.",
                ),
            ),
            (
                "I want to run my first marathon next year.",
                "a beginner training for endurance",
                (
                    "The answer describes a gradual running plan.",
                    "The answer mentions rest, recovery or avoiding injury.",
                ),
            ),
        ],
    ),
    (
        "What should I cook for dinner tonight?",
        [
            (
                "My two kids are picky eaters.",
                "a parent feeding picky children",
                (
                    "The answer suggests simple dishes children usually like.",
                    "The answer suggests a way to include vegetables.",
                ),
            ),
            (
                "I have only a microwave in my dorm.",
                "a student without a kitchen",
                ("The answer suggests meals made in a microwave.", "The answer keeps ingredients cheap and few."),
            ),
            (
                "I am hosting my in-laws for the first time.",
                "a host who wants to impress guests",
                (
                    "The answer suggests an impressive but manageable dish.",
                    "The answer gives a tip for preparing ahead or serving guests.",
                ),
            ),
        ],
    ),
    (
        "How should I save money?",
        [
            (
                "I just got my first job out of college.",
                "a young earner starting to save",
                (
                    "The answer suggests building an emergency fund or a budget.",
                    "The answer mentions starting retirement savings early.",
                ),
            ),
            (
                "I retire in three years.",
                "someone close to retirement",
                ("The answer suggests lower-risk savings.", "The answer mentions planning income for retirement."),
            ),
            (
                "I have a lot of credit card debt.",
                "someone paying off debt",
                (
                    "The answer puts paying off high-interest debt first.",
                    "The answer suggests cutting spending or a repayment plan.",
                ),
            ),
        ],
    ),
    (
        "Where should I go on holiday?",
        [
            (
                "I am travelling with a toddler.",
                "a parent travelling with a small child",
                (
                    "The answer suggests family-friendly destinations.",
                    "The answer mentions short travel times or child-friendly facilities.",
                ),
            ),
            (
                "I love hiking and I am on a tight budget.",
                "a budget traveller who loves the outdoors",
                ("The answer suggests destinations with hiking or nature.", "The answer keeps costs low."),
            ),
            (
                "It is our honeymoon.",
                "a couple on their honeymoon",
                (
                    "The answer suggests romantic destinations.",
                    "The answer mentions relaxing or special experiences for two.",
                ),
            ),
        ],
    ),
    (
        "How do I learn a new language?",
        [
            (
                "I move to Spain for work in two months.",
                "a professional relocating soon",
                (
                    "The answer focuses on practical, everyday and work phrases.",
                    "The answer suggests an intensive plan for a short time.",
                ),
            ),
            (
                "I want to read French novels in the original.",
                "a literature lover who wants to read",
                (
                    "The answer emphasises reading and vocabulary.",
                    "The answer suggests graded readers or starting with simple books.",
                ),
            ),
            (
                "I am 70 and want to keep my mind sharp.",
                "a retiree learning for mental exercise",
                (
                    "The answer suggests a relaxed, enjoyable pace.",
                    "The answer mentions social or class-based learning.",
                ),
            ),
        ],
    ),
    (
        "What pet should I get?",
        [
            (
                "I live in a small apartment and work long hours.",
                "a busy apartment dweller",
                (
                    "The answer suggests a low-maintenance pet such as a cat or fish.",
                    "The answer mentions space or time constraints.",
                ),
            ),
            (
                "My daughter has allergies.",
                "a parent with an allergic child",
                (
                    "The answer mentions allergies or hypoallergenic options.",
                    "The answer suggests a pet suitable for a child.",
                ),
            ),
            (
                "I want a companion for long walks.",
                "an active person wanting an outdoor companion",
                ("The answer suggests an energetic dog breed.", "The answer mentions exercise needs."),
            ),
        ],
    ),
    (
        "How can I sleep better?",
        [
            (
                "I work night shifts at a hospital.",
                "a shift worker sleeping during the day",
                (
                    "The answer suggests blackout curtains or a dark, quiet room by day.",
                    "The answer suggests a consistent sleep schedule around shifts.",
                ),
            ),
            (
                "My newborn wakes every two hours.",
                "a new parent with broken sleep",
                (
                    "The answer suggests napping when the baby sleeps.",
                    "The answer suggests sharing night duties or asking for help.",
                ),
            ),
            (
                "I lie awake worrying about exams.",
                "a stressed student",
                (
                    "The answer suggests ways to calm down or manage stress before bed.",
                    "The answer suggests limiting screens or study right before sleep.",
                ),
            ),
        ],
    ),
    (
        "Which phone should I buy?",
        [
            (
                "I mostly take photos of my kids.",
                "a parent who values the camera",
                ("The answer emphasises camera quality.", "The answer mentions durability or storage for photos."),
            ),
            (
                "I want something my grandmother can use.",
                "someone buying for an elderly relative",
                (
                    "The answer suggests a simple phone with a large screen.",
                    "The answer mentions ease of use or accessibility features.",
                ),
            ),
            (
                "I need it to last all day on building sites.",
                "a tradesperson needing a tough phone",
                ("The answer suggests a rugged or durable phone.", "The answer emphasises long battery life."),
            ),
        ],
    ),
    (
        "How do I become a better writer?",
        [
            (
                "I have to write reports for my manager.",
                "a professional writing business reports",
                (
                    "The answer focuses on clear, concise business writing.",
                    "The answer suggests structuring reports with a summary first.",
                ),
            ),
            (
                "I want to publish a fantasy novel.",
                "an aspiring fiction author",
                (
                    "The answer focuses on storytelling, characters or world-building.",
                    "The answer suggests writing regularly and getting feedback.",
                ),
            ),
            (
                "English is my second language.",
                "a non-native speaker improving their English",
                (
                    "The answer suggests reading widely in English or grammar practice.",
                    "The answer recommends tools or feedback for language errors.",
                ),
            ),
        ],
    ),
    (
        "What car should I buy?",
        [
            (
                "We are expecting our third child.",
                "a growing family needing space",
                (
                    "The answer suggests a spacious car such as a minivan or large SUV.",
                    "The answer mentions safety features.",
                ),
            ),
            (
                "I drive 80 km to work every day.",
                "a long-distance commuter",
                (
                    "The answer emphasises fuel efficiency or an electric or hybrid car.",
                    "The answer mentions comfort on long drives.",
                ),
            ),
            (
                "It is my first car and I just passed my test.",
                "a new driver on a budget",
                (
                    "The answer suggests a cheap, reliable used car.",
                    "The answer mentions low insurance costs or easy handling.",
                ),
            ),
        ],
    ),
    (
        "How can I be more productive?",
        [
            (
                "I work from home with two kids around.",
                "a remote worker with children at home",
                (
                    "The answer suggests a dedicated workspace or boundaries at home.",
                    "The answer suggests scheduling work around the children.",
                ),
            ),
            (
                "I have ADHD and lose track of tasks.",
                "someone with attention difficulties",
                (
                    "The answer suggests breaking tasks into small steps or reminders.",
                    "The answer suggests timers or external structure.",
                ),
            ),
            (
                "I manage a team of ten people.",
                "a manager responsible for a team",
                ("The answer suggests delegating tasks.", "The answer suggests fewer or shorter meetings."),
            ),
        ],
    ),
]
HELD_OUT = 2  # the third asker of every topic is an eval row


def rows() -> tuple[list[dict], list[dict]]:
    """(train rows [24], eval rows [12]): question + cue, the hidden intent and the two-aspect rubric."""
    train: list[dict] = []
    evals: list[dict] = []
    for topic, askers in TOPICS:
        for k, (cue, intent, aspects) in enumerate(askers):
            rubric = [{"name": f"aspect_{j + 1}", "text": text} for j, text in enumerate(aspects)]
            row = {"question": f"{cue} {topic}", "intent": intent, "rubric": json.dumps(rubric)}
            (evals if k == HELD_OUT else train).append(row)
    return train, evals


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    train, evals = rows()
    for path, split in ((args.out, train), (args.out.with_name(args.out.stem + "_eval.jsonl"), evals)):
        path.write_text("".join(json.dumps(row) + "\n" for row in split), encoding="utf-8")
        print(f"{path}: {len(split)} rows")


if __name__ == "__main__":
    main()
