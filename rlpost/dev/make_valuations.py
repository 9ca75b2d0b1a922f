"""Generate the bundled valuation data of ``train-rm objective=regression`` (KARMA, seed 004 #3).

    python -m rlpost.dev.make_valuations     # writes recipes/data/karma_valuations*.jsonl

The data is **synthetic**: no Reddit data can be downloaded here. Each row is a forum post (the
context), one reply, the reply's karma and three thread features. The karma follows a fixed model,
so that both kinds of reward model have something to learn:

    log(1 + karma) = 1.0 + 3.0 q  - 0.5 (depth - 1)  - 0.002 minutes  + N(0, 0.35^2)
    karma          = round(exp(.) - 1), and a rude reply (q = 0) is downvoted to -karma half the time

``q`` is the reply's pragmatic quality, set by its style: supportive 1.0, informative 0.8, witty
0.6, curt 0.3, off-topic 0.1, rude 0.0. ``depth`` (1-4, the reply's depth in the thread) and
``minutes`` (0-720, how long after the post it came) are features a context-only model cannot see;
``subreddit`` is a feature with no effect. Styles and features are drawn independently, so the
features explain part of the variance and the conversation the rest. Train rows come from ``seed``,
held-out rows from ``seed + 1`` over different posts.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

from rlpost.data.sources import RESOURCES

OUT = RESOURCES / "recipes" / "data" / "karma_valuations.jsonl"
SUBREDDITS = ("AskReddit", "CasualConversation", "NoStupidQuestions", "LifeProTips")
# (post, topic): the topic fills the replies
POSTS = [
    ("I failed my driving test for the second time today.", "the driving test"),
    ("What's a good first programming language to learn?", "learning to program"),
    ("My cat keeps knocking things off the table at night.", "your cat"),
    ("I finally finished my first marathon!", "the marathon"),
    ("How do you stay motivated when working from home?", "working from home"),
    ("I got rejected from my dream job after the final interview.", "the job search"),
    ("Is it normal to feel nervous before every presentation?", "presentations"),
    ("My sourdough starter smells like nail polish. Is it dead?", "your sourdough starter"),
    ("I'm moving to a new city where I don't know anyone.", "the move"),
    ("What's the best way to learn to cook on a budget?", "cooking on a budget"),
    ("My neighbour practices the drums at 6 am every day.", "the noise"),
    ("I just adopted a senior dog from the shelter.", "your new dog"),
    ("How do I tell my friend I can't lend them money again?", "the money talk"),
    ("I keep forgetting people's names right after I meet them.", "remembering names"),
    ("Our team lost the championship by one point.", "the championship"),
    ("What's a small habit that improved your life?", "small habits"),
    ("I started learning the piano at 40.", "the piano"),
    ("My houseplants keep dying no matter what I do.", "your plants"),
    ("How do you deal with a coworker who takes credit for your work?", "the coworker"),
    ("I passed my exams after failing them last year!", "the exams"),
    ("Is it worth repairing a ten-year-old laptop?", "the old laptop"),
    ("I can't sleep before big trips.", "sleeping before trips"),
    ("What should I bring on my first camping trip?", "the camping trip"),
    ("My kid asked me why the sky is blue and I didn't know.", "the sky question"),
    ("I quit sugar for a month. Ask me anything.", "quitting sugar"),
    ("How do I start running if I've never exercised?", "starting to run"),
    ("I accidentally sent a message to my boss meant for my partner.", "the message mix-up"),
    ("What's the most useful thing you learned in school?", "school lessons"),
    ("My grandmother turned 100 today.", "your grandmother"),
    ("I get anxious making phone calls.", "phone calls"),
    ("Should I learn to play chess online or with a book?", "learning chess"),
    ("I finally fixed the leaking tap myself.", "the tap repair"),
    ("My flight got cancelled and I'm stuck at the airport overnight.", "the cancelled flight"),
    ("What's a good way to remember what I read?", "remembering what you read"),
    ("I lost 20 pounds this year by walking every day.", "the walking"),
    ("How do I politely leave a conversation at a party?", "leaving conversations"),
    ("My bike got stolen from outside my flat.", "the stolen bike"),
    ("I started a vegetable garden on my balcony.", "the balcony garden"),
    ("What do you say when someone gives you a gift you don't like?", "awkward gifts"),
    ("I built my first PC this weekend.", "the new PC"),
]
STYLES = {  # style: (quality q, reply templates)
    "supportive": (
        1.0,
        [
            "That sounds really tough. Take it one step at a time with {topic}, and be proud you kept trying.",
            "Congrats, or hugs, whichever fits! Many people go through {topic}; you're doing better than you think.",
            "Thanks for sharing this. With {topic}, small steps add up, and it's fine to ask for help.",
        ],
    ),
    "informative": (
        0.8,
        [
            "With {topic}, what worked for me was making a short plan and checking it weekly.",
            "A practical tip for {topic}: start small, write things down, and review after a few days.",
            "For {topic}, the usual advice is to change one thing at a time so you can tell what helps.",
        ],
    ),
    "witty": (
        0.6,
        [
            "Plot twist: {topic} was the final boss all along. You've got this.",
            "Somewhere, {topic} is telling its friends about you. Good luck!",
            "If {topic} had a customer service line, I'd call it for you.",
        ],
    ),
    "curt": (0.3, ["ok.", "Happens.", "Google {topic}.", "Sure."]),
    "off_topic": (
        0.1,
        [
            "Anyone know a good pizza place downtown?",
            "This reminds me, my phone battery is terrible lately.",
            "Unrelated, but what's everyone's favourite colour?",
        ],
    ),
    "rude": (
        0.0,
        [
            "Who cares about {topic}. Nobody asked.",
            "Skill issue. Stop whining about {topic}.",
            "This is the dumbest post about {topic} I've read today.",
        ],
    ),
}


def karma(q: float, depth: int, minutes: int, rng: random.Random) -> int:
    """The generating model of the module docstring."""
    log_karma = 1.0 + 3.0 * q - 0.5 * (depth - 1) - 0.002 * minutes + rng.gauss(0.0, 0.35)
    value = round(math.exp(log_karma) - 1)
    return -value if q == 0.0 and rng.random() < 0.5 else value


def rows(posts: list[tuple[str, str]], per_post: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for post, topic in posts:
        for _ in range(per_post):
            style = rng.choice(sorted(STYLES))
            q, templates = STYLES[style]
            depth, minutes = rng.randint(1, 4), rng.randint(0, 720)
            features = {"subreddit": rng.choice(SUBREDDITS), "depth": depth, "minutes_after_post": minutes}
            reply = rng.choice(templates).format(topic=topic)
            out.append(
                {"prompt": post, "response": reply, "value": karma(q, depth, minutes, rng), "features": features}
            )
    rng.shuffle(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-post", type=int, default=12, help="replies per training post")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    train_posts, heldout_posts = POSTS[:32], POSTS[32:]  # held-out rows are replies to unseen posts
    splits = {
        args.out: rows(train_posts, args.per_post, args.seed),
        args.out.with_name(args.out.stem + "_heldout.jsonl"): rows(heldout_posts, args.per_post, args.seed + 1),
    }
    for path, data in splits.items():
        path.write_text("".join(json.dumps(row) + "\n" for row in data))
        print(f"{path}: {len(data)} rows")


if __name__ == "__main__":
    main()
