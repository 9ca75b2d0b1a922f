"""The bundled search task: a corpus about invented people and places, and questions that need one or two
retrievals (``data=search_qa data/env=search``). Everything is invented, so no model knows the answers.

    python -m rlpost.envs.search_data     # rewrites recipes/data/search_{corpus,qa,qa_eval}.jsonl

Corpus (one document per line, ``{"id", "text"}``): one about each person (profession, birth city, birth
year) and one about each city (country, what it is known for). Questions:
- one retrieval: "In which city was <person> born?", "What is <person>'s profession?";
- two retrievals: "In which country was <person> born?" (the person's city, then the city's country).
Training and held-out questions ask about different people. Deterministic from ``SEED``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from rlpost.core.schema import RESOURCES

SEED = 20261204
FIRST = ["Alia", "Boren", "Cato", "Dessa", "Elio", "Fenna", "Gideon", "Halla", "Ivo", "Jora", "Kester", "Lune",
         "Maren", "Niko", "Orla", "Pim", "Quin", "Rhea", "Soren", "Tamsin"]  # fmt: skip
LAST = ["Marwick", "Osterlin", "Quellan", "Rusk", "Tavener", "Umbry", "Vell", "Wystan", "Yarrow", "Zell"]
CITIES = ["Varnholm", "Teskara", "Lowmere", "Brisca", "Ondrel", "Caldry", "Fennick", "Harrowgate", "Istra",
          "Jovell", "Kestrel Bay", "Lorn", "Mirefield", "Norrow", "Pellham", "Quarry Cross", "Rasmere", "Sable Ford"]  # fmt: skip
COUNTRIES = ["Kelvoria", "Ostmark", "Rhunia", "Dalmeria", "Pellistan", "Varosh"]
PROFESSIONS = ["cartographer", "glassblower", "beekeeper", "clockmaker", "ferry pilot", "botanist", "stonemason",
               "translator", "archivist", "violin maker"]  # fmt: skip
KNOWN_FOR = ["salt marshes", "a copper bridge", "winter markets", "lighthouses", "paper mills", "an old observatory",
             "orchards", "a river festival", "granite quarries"]  # fmt: skip
DATA = RESOURCES / "recipes" / "data"


def build(seed: int = SEED) -> tuple[list[dict], list[dict], list[dict]]:
    """(corpus, training questions, held-out questions)."""
    rng = random.Random(seed)
    city_country = {city: rng.choice(COUNTRIES) for city in CITIES}
    corpus = [
        {"id": f"city-{i}", "text": f"{city} is a city in {city_country[city]}, known for {rng.choice(KNOWN_FOR)}."}
        for i, city in enumerate(CITIES)
    ]
    people = [f"{first} {last}" for first in FIRST for last in LAST]
    rng.shuffle(people)
    people = people[:120]
    facts = {}
    for i, person in enumerate(people):
        city, job, year = rng.choice(CITIES), rng.choice(PROFESSIONS), rng.randint(1890, 1990)
        facts[person] = (city, job)
        corpus.append({"id": f"person-{i}", "text": f"{person} was a {job}, born in {city} in {year}."})
    rng.shuffle(corpus)

    def questions(names: list[str]) -> list[dict]:
        rows = []
        for person in names:
            city, job = facts[person]
            rows += [
                {"question": f"In which city was {person} born?", "answer": city, "hops": 1},
                {"question": f"What was {person}'s profession?", "answer": job, "hops": 1},
                {"question": f"In which country was {person} born?", "answer": city_country[city], "hops": 2},
            ]
        return rows

    train, held_out = questions(people[:100]), questions(people[100:])
    rng.shuffle(train)
    rng.shuffle(held_out)
    return corpus, train, held_out


def write(folder: Path = DATA) -> None:
    corpus, train, held_out = build()
    for name, rows in (("search_corpus", corpus), ("search_qa", train), ("search_qa_eval", held_out)):
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"wrote {path} ({len(rows)} rows)")


if __name__ == "__main__":
    write()
