"""Load YAML files and validate them against the JSON Schemas in workflow/schemas/.

Defaults from the schema are filled in, so the rest of the code sees every key.
The first error is turned into a ConfigError that names the file, the key path,
the value and what the schema accepts.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from exabench.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = REPO_ROOT / "workflow" / "schemas"


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(str(path), "(file)", str(path), "an existing YAML file", "does not exist") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), "(syntax)", getattr(exc, "problem_mark", ""), "YAML syntax",
                          f"cannot be parsed ({getattr(exc, 'problem', exc)})") from None


def load_schema(name: str) -> dict:
    return yaml.safe_load((SCHEMA_DIR / f"{name}.schema.yaml").read_text())


def _with_defaults(validator_class):
    """A validator that also fills in `default` values (the jsonschema FAQ recipe)."""
    import jsonschema

    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})



def key_path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _describe_valid(error) -> str:
    s = error.schema if isinstance(error.schema, dict) else {}
    v = error.validator
    if v == "enum":
        return "one of " + ", ".join(map(repr, error.validator_value))
    if v == "const":
        return repr(error.validator_value)
    if v == "additionalProperties":
        return "known keys: " + ", ".join(sorted(s.get("properties", {}))) if s.get("properties") else "no extra keys"
    if v == "required":
        return "the key must be present"
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{v} {error.validator_value}"
    if v == "pattern":
        return f"a string matching {error.validator_value}"
    if v == "type":  # an object's description says its shape (e.g. {value, source})
        shape = s.get("description") if error.validator_value == "object" and s.get("description") else ""
        return f"type {error.validator_value}" + (f": {shape}" if shape else "")
    if v == "oneOf":
        return " or ".join(_describe_branch(b) for b in error.validator_value)
    if v in ("minLength", "maxLength"):
        return f"a string of {v} {error.validator_value}" + (f": {s['description']}" if s.get("description") else "")
    if v in ("minItems", "maxItems"):
        return f"{v} {error.validator_value}"
    return s.get("description", v)


def _describe_branch(branch: dict) -> str:
    if "const" in branch:
        return repr(branch["const"])
    text = branch.get("type", "value")
    if "minimum" in branch:
        text += f" >= {branch['minimum']}"
    return text


def validate(data: Any, schema_name: str, file: str) -> dict:
    """Validate `data` (filled with defaults in place) or raise ConfigError."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(file, "(top level)", data, "a mapping of keys to values", "is not a mapping")
    import jsonschema  # imported here: job scripts on compute nodes never validate, so need not have it

    schema = load_schema(schema_name)
    validator = _with_defaults(jsonschema.Draft202012Validator)
    errors = sorted(validator(schema).iter_errors(data), key=lambda e: (len(e.absolute_path), e.path))
    if errors:
        # Report the deepest-first relevant error: best_match picks the most specific one.
        err = jsonschema.exceptions.best_match(errors)
        while err.parent is not None and err.parent.validator in ("oneOf", "anyOf"):
            err = err.parent  # "integer >= 1 or 'auto'" says more than one branch's complaint
        path = list(err.absolute_path)
        value = err.instance
        if err.validator == "additionalProperties":
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            path.append(extra[0] if extra else "?")
            value = err.instance.get(extra[0]) if extra else None
            raise ConfigError(file, key_path(path), value, _describe_valid(err), "is not a known key")
        if err.validator == "required":
            missing = [k for k in err.validator_value if k not in err.instance]
            path.append(missing[0] if missing else "?")
            what = err.schema.get("properties", {}).get(missing[0], {}).get("description") if missing else None
            valid = _describe_valid(err) + (f" ({what})" if what else "")
            raise ConfigError(file, key_path(path), None, valid, "is missing")
        raise ConfigError(file, key_path(path), value, _describe_valid(err))
    return data


def load_and_validate(path: str | Path, schema_name: str) -> dict:
    return validate(load_yaml(path), schema_name, str(path))
