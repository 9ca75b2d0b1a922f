"""The search environment and its bundled task: BM25 retrieval (bm25s), a two-hop episode, the data's guarantees."""

from __future__ import annotations

import json
import re

import pytest

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.envs.base import build_env
from rlpost.envs.runner import ChatRenderer, run_episodes
from rlpost.envs.search import contains_answer, search
from rlpost.envs.search_data import DATA, build
from rlpost.models.loading import ModelConfig, load_tokenizer

CORPUS = "recipes/data/search_corpus.jsonl"


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines()]


def test_the_bundled_files_are_what_the_generator_writes():
    corpus, train, held_out = build()
    assert (rows("search_corpus"), rows("search_qa"), rows("search_qa_eval")) == (corpus, train, held_out)
    assert (len(corpus), len(train), len(held_out)) == (138, 300, 60)


def test_every_answer_is_in_the_corpus_and_held_out_people_are_new():
    texts = [d["text"] for d in rows("search_corpus")]
    person_doc = {re.match(r"(.+?) was a ", t).group(1): t for t in texts if " was a " in t}
    city_doc = {t.split(" is a city in ")[0]: t for t in texts if " is a city in " in t}
    people = {}
    for split in ("search_qa", "search_qa_eval"):
        for row in rows(split):
            person = re.search(r"(?:was |What was )([A-Z]\w+ [A-Z]\w+)", row["question"]).group(1)
            people.setdefault(split, set()).add(person)
            doc = person_doc[person]
            if row["hops"] == 1:
                assert row["answer"] in doc
            else:  # the person's city, then that city's country
                city = re.search(r"born in (.+?) in \d{4}", doc).group(1)
                assert city_doc[city].startswith(f"{city} is a city in {row['answer']},")
    assert not people["search_qa"] & people["search_qa_eval"]


def test_bm25_finds_the_persons_document_first():
    for row in rows("search_qa_eval")[:10]:
        person = re.search(r"(?:was |What was )([A-Z]\w+ [A-Z]\w+)", row["question"]).group(1)
        assert search(CORPUS, person, 2)[0].startswith(f"{person} was a ")
    assert search(CORPUS, "the of and", 2) == []  # only stopwords: nothing to match


def test_a_two_hop_search_episode_by_hand():
    tok = load_tokenizer(ModelConfig(name="tiny-random"))
    row = next(r for r in rows("search_qa_eval") if r["hops"] == 2)
    person = re.search(r"was ([A-Z]\w+ [A-Z]\w+) born", row["question"]).group(1)
    city = re.search(r"born in (.+?) in \d{4}", search(CORPUS, person, 1)[0]).group(1)
    turns = [f"<search>{person}</search>", f"<search>{city} city</search>", f"It is {row['answer']}."]
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)

    def policy(prompt_ids, rows):  # scripted: turn t is the t-th line above
        taken = [sum(ids[i : i + len(header)] == header for i in range(len(ids))) - 1 for ids in prompt_ids]
        return [tok.encode(turns[t], add_special_tokens=False) + [tok.eos_token_id] for t in taken], None

    env = build_env({"name": "search", "max_turns": 3})
    prompt = {"prompt": [{"role": "user", "content": row["question"]}], "answer": row["answer"]}
    (result,) = run_episodes(env, [prompt], [0], ChatRenderer(tok), policy, {tok.eos_token_id})
    docs = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert docs[0].startswith(f"<docs>[1] {person} was a ")
    assert f"{city} is a city in {row['answer']}" in docs[1]
    assert (result.reward, result.tool_calls, result.tool_errors, result.episode.turns) == (1.0, 2, 0, 3)


@pytest.mark.parametrize(
    ("text", "answer", "hit"),
    [("It is Kelvoria.", "Kelvoria", True), ("kelvoria", "Kelvoria", True), ("Kelvorian", "Kelvoria", False),
     ("a ferry pilot", "ferry pilot", True), ("", "x", False), ("anything", "", False)],
)  # fmt: skip
def test_contains_answer(text, answer, hit):
    assert contains_answer(text, answer) is hit
