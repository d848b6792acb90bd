"""The record check's fast path (fastjsonschema, draft 7) gives the verdicts of the authority
(jsonschema, 2020-12) on every record: a valid instance of every part of the schema, made from the
schema itself, and each of its keys removed or given each of a set of wrong values."""

from __future__ import annotations

import copy
import re

import pytest

from exabench.records import record as rec_mod

# Strings tried, in order, for a `pattern` (the first that matches is used).
PATTERN_CANDIDATES = ["run.1", "0123456789abcdef", "a"]
WRONG_VALUES = [None, True, 0, -1, 1.0, 2.5, float("nan"), "", "x y", "1", [], [1], [None], {}, {"k": 1}]


def example(schema: dict):
    """A valid instance of `schema` with every property it names."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    types = schema.get("type", "object")
    kind = next((t for t in ([types] if isinstance(types, str) else types) if t != "null"), "null")
    if kind == "object":
        out = {k: example(sub) for k, sub in schema.get("properties", {}).items()}
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            out["extra_key"] = example(extra)
        return out
    if kind == "array":
        return [example(schema["items"])] if "items" in schema else []
    if kind == "string":
        if "pattern" in schema:
            return next(s for s in PATTERN_CANDIDATES if re.search(schema["pattern"], s))
        return "text"
    return {"integer": 3, "number": 2.5, "boolean": False, "null": None}[kind]


def paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, prefix + (i,))


def replaced(value, path, new, delete=False):
    out = copy.deepcopy(value)
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return out


@pytest.fixture(scope="module")
def checks():
    fast = rec_mod._fast_check()
    assert fast is not None, "fastjsonschema is pinned in requirements.txt: the fast path must be there"
    return fast, rec_mod._validator().is_valid


def test_the_fast_check_and_jsonschema_agree_on_every_mutation_of_a_full_record(checks):
    fast, authority = checks
    full = example(rec_mod._schema())
    assert authority(full) and fast(full), "the example record must be valid to both"
    cases = [full]
    for path in paths(full):
        if not path:
            continue
        cases.append(replaced(full, path, None, delete=True))
        cases += [replaced(full, path, wrong) for wrong in WRONG_VALUES]
    disagree = [c for c in cases if fast(c) != authority(c)]
    invalid = sum(not authority(c) for c in cases)
    assert not disagree, f"{len(disagree)} of {len(cases)} records judged differently, e.g. {disagree[0]!r:.600}"
    assert len(cases) > 1000 and invalid > len(cases) // 3, (len(cases), invalid)  # the cases do test something


def test_check_record_explains_what_the_fast_path_refuses(tmp_path):
    bad = example(rec_mod._schema())
    bad["layout"]["nodes"] = 0
    with pytest.raises(rec_mod.RecordError, match=r"key 'layout.nodes' = 0 is not a valid record field"):
        rec_mod.check_record(bad, tmp_path / "r.json")
