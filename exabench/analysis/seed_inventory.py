"""The seed documents' results as data (studies/seeds/inventory.yaml) and the check that a cited line
prints its number (docs/studies.md, 'The inventory of the seeds').

A result's `printed` text is on its seed line as written; a published figure of a study that cites a
seed line has its value on that line in one of its printed forms (72 for 0.72 as 72%, 1,024 for 1024,
1.13 exaflops for 1130 PF/s, "two" for 2).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path

from exabench.config import load_and_validate
from exabench.errors import ConfigError

SEEDS = Path(__file__).resolve().parents[2] / "studies" / "seeds"
INVENTORY = SEEDS / "inventory.yaml"
# A printed number is the value times one of these: itself, a percentage, a unit step (exa/peta,
# peta/tera), hours or seconds of a value in minutes.
SCALES = (1.0, 100.0, 1e-3, 1e3, 1 / 60, 60.0)
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "eight": 8, "ten": 10}
NUMBER = re.compile(r"\d+(?:\.\d+)?")


@lru_cache(maxsize=None)
def seed_lines(seed: str, directory: str = str(SEEDS)) -> tuple[str, ...]:
    path = Path(directory) / f"{seed}.txt"
    if not path.is_file():
        raise ConfigError(str(path), "seed", seed, f"a seed document of {directory} (<seed>.txt)", "does not exist")
    return tuple(path.read_text(encoding="utf-8").splitlines())


def seed_line(seed: str, line: int, directory: str | Path = SEEDS) -> str:
    lines = seed_lines(seed, str(directory))
    if not 1 <= line <= len(lines):
        raise ConfigError(f"{directory}/{seed}.txt", "line", line, f"a line from 1 to {len(lines)}", "is outside the file")
    return lines[line - 1]


def numbers_in(text: str) -> list[float]:
    """The numbers a text prints: digits (thousands separators dropped) and small number words."""
    plain = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    found = [float(n) for n in NUMBER.findall(plain)]
    found += [float(v) for w, v in WORDS.items() if re.search(rf"\b{w}\b", text, re.IGNORECASE)]
    return found


def prints(text: str, value: float) -> bool:
    """Whether `text` prints `value` in one of its forms (see SCALES), to the digits it prints."""
    for n in numbers_in(text):
        digits = len(str(n).split(".")[1].rstrip("0")) if "." in str(n) else 0
        for scale in SCALES:
            if math.isclose(round(value * scale, digits), n, rel_tol=1e-9, abs_tol=1e-12):
                return True
    return False


def load_inventory(path: str | Path = INVENTORY) -> list[dict]:
    """The inventory's results, validated (schema, one id each), or ConfigError naming file and key."""
    data = load_and_validate(path, "seed_inventory")
    seen: set[str] = set()
    for i, entry in enumerate(data["results"]):
        if entry["id"] in seen:
            raise ConfigError(str(path), f"results[{i}].id", entry["id"], "an id given once", "is given twice")
        seen.add(entry["id"])
        if not entry["runs"] and "not_runnable" not in entry:
            raise ConfigError(str(path), f"results[{i}].not_runnable", None,
                              "why exabench cannot run it, where `runs` is empty", "is missing")
    return data["results"]


def figure_of(entry: dict, catalogue: dict) -> dict | None:
    """The published figure of the catalogue that carries an inventory result, or None."""
    if not entry["carried_by"]:
        return None
    study, figure = entry["carried_by"].split("/")
    if study not in catalogue:
        return None
    return next((f for f in catalogue[study].figures if f["id"] == figure), None)


def judged(fig: dict | None) -> bool:
    """Whether a figure gets a verdict on its own machine: a value, a checkable source, no reason not to."""
    return bool(fig) and fig["value"] is not None and fig["verified"] and not fig.get("not_judged")


def counts(inventory: list[dict], catalogue: dict) -> dict[str, int]:
    """The inventory's counts (docs/studies.md): results in the seeds (those with a printed number and the
    plots without), carried by a study figure, runnable by exabench, judged on their machine."""
    figs = [figure_of(e, catalogue) for e in inventory]
    return {
        "results": len(inventory),
        "printed": sum(e["printed"] is not None for e in inventory),
        "plots_without_numbers": sum(e["printed"] is None for e in inventory),
        "in_catalogue": sum(f is not None for f in figs),
        "runnable": sum(bool(e["runs"]) and "not_runnable" not in e for e in inventory),
        "judged": sum(judged(f) for f in figs),
    }
