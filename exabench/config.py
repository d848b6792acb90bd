"""Load YAML files and validate them against the JSON Schemas in workflow/schemas/.

Defaults from the schema are filled in, so the rest of the code sees every key.
The first error is turned into a ConfigError that names the file, the key path,
the value and what the schema accepts.
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Any

import yaml

from exabench.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = REPO_ROOT / "workflow" / "schemas"


# A config, site or references file is a page of YAML; anything larger is a mistake (a data file
# passed by accident), refused before it is read, not parsed for minutes.
MAX_YAML_BYTES = 4 * 2**20


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last silently:
    a second `benchmarks:` would drop the first)."""


def _mapping_without_duplicates(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        try:
            if key in seen:
                raise ConfigError(loader.name, str(key), f"line {line}",
                                  f"each key once per mapping (first given on line {seen[key]})", "is given twice")
            seen[key] = line
        except TypeError:  # an unhashable key: let PyYAML say so
            continue
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load_yaml(path: str | Path) -> Any:
    """Parse a user's YAML file, or raise ConfigError naming it: missing, a directory, unreadable,
    too large, not UTF-8, not YAML, or a key given twice."""
    path = Path(path)
    where = str(path)
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise ConfigError(where, "(file)", where, "a YAML file", "is a directory")
        if size > MAX_YAML_BYTES:
            raise ConfigError(where, "(file)", f"{size} bytes", f"at most {MAX_YAML_BYTES} bytes", "is too large")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(where, "(file)", where, "an existing YAML file", "does not exist") from None
    except PermissionError:
        raise ConfigError(where, "(file)", where, "a file this user can read", "cannot be read") from None
    except OSError as exc:
        raise ConfigError(where, "(file)", where, "a readable YAML file", f"cannot be read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(where, "(encoding)", f"byte {exc.start}", "UTF-8 text", "is not UTF-8") from None
    loader = _UniqueKeyLoader(text)
    loader.name = where
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        place = f"line {mark.line + 1}" if mark else ""
        raise ConfigError(where, "(syntax)", place, "YAML syntax",
                          f"cannot be parsed ({getattr(exc, 'problem', None) or exc})") from None
    finally:
        loader.dispose()


def reject_control_characters(file: str, value, key: str = "") -> None:
    """JSON Schema patterns are searched with Python's re, where `$` also matches before a final
    newline: refuse control characters (newline, tab, ...) in every value and key that may reach a
    script or a file name. Free text (`description`, `sources`) may have them."""
    if isinstance(value, dict):
        for k, v in value.items():
            where = f"{key}.{k}" if key else str(k)
            reject_control_characters(file, str(k), where)
            if k not in ("description", "sources", "source", "note"):
                reject_control_characters(file, v, where)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            reject_control_characters(file, v, f"{key}[{i}]")
    elif isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ConfigError(file, key or "(top level)", value, "text without control characters (newline, tab, ...)")


def reject_non_finite(file: str, value, key: str = "") -> None:
    """YAML's `.nan` and `.inf` are floats that pass every JSON Schema bound (NaN compares false with
    `minimum`): refuse them in every value, so that `slowdown: .nan` is not a silent no-op."""
    if isinstance(value, dict):
        for k, v in value.items():
            reject_non_finite(file, v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            reject_non_finite(file, v, f"{key}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(file, key or "(top level)", value, "a finite number (not .nan, .inf or -.inf)")


def load_schema(name: str) -> dict:
    # libyaml's loader where PyYAML has it: the schemas are ours (no user's file to point into), and
    # every plan reads them (10x the pure-Python parse)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load((SCHEMA_DIR / f"{name}.schema.yaml").read_text(), Loader=loader)


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
        text = f"a string matching {error.validator_value}"
        types = s.get("type") if isinstance(s.get("type"), list) else []
        numbers = [t for t in types if t in ("integer", "number")]
        if numbers:  # the value may also be a number: say so, and that a quoted one is a string
            low = f" >= {s['minimum']}" if "minimum" in s else ""
            text = f"{' or '.join(numbers)}{low} (unquoted), or {text}"
            if isinstance(error.instance, str) and error.instance.strip().lstrip("-").isdigit():
                text += f"; write the number without quotes: {error.instance.strip()}, not {error.instance!r}"
        return text
    if v == "type":  # an object's description says its shape (e.g. {value, source})
        shape = s.get("description") if error.validator_value == "object" and s.get("description") else ""
        wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        quoted = (isinstance(error.instance, str) and error.instance.strip().lstrip("-").isdigit()
                  and {"integer", "number"} & set(wanted))
        return (f"type {' or '.join(wanted)}" + (f": {shape}" if shape else "")
                + (f"; write the number without quotes: {error.instance.strip()}, not {error.instance!r}"
                   if quoted else _number_read_as_text(error.instance, wanted))
                + _boolean_read_as_text(error.instance, wanted, key_path(error.path)))
    if v == "oneOf":
        return " or ".join(_describe_branch(b) for b in error.validator_value)
    if v in ("minLength", "maxLength"):
        return f"a string of {v} {error.validator_value}" + (f": {s['description']}" if s.get("description") else "")
    if v in ("minItems", "maxItems"):
        return f"{v} {error.validator_value}"
    return s.get("description", v)


def _number_read_as_text(value, wanted: list) -> str:
    """A hint for a number YAML 1.1 reads as text: PyYAML takes an exponent only with a dot and a sign
    (1.0e+9), so `node_hours_budget: 1e9` (or 1.5e3) is the string '1e9'."""
    if not isinstance(value, str) or not {"integer", "number"} & set(wanted):
        return ""
    try:
        number = float(value.strip())
    except ValueError:
        return ""
    if not math.isfinite(number):
        return ""
    plain = int(number) if number.is_integer() and abs(number) < 1e16 else number
    return f"; YAML reads {value!r} as text: write {plain!r} (or with a dot and a signed exponent: {number:.1e})"


def _boolean_read_as_text(value, wanted: list, key: str) -> str:
    """A hint for a boolean given as text: Snakemake's --config reads only True and False as booleans
    (true, yes and on stay text), a YAML file true and false as well."""
    if "boolean" not in wanted or not isinstance(value, str) or value.strip().lower() not in ("true", "false", "yes",
                                                                                            "no", "on", "off"):
        return ""
    word = "True" if value.strip().lower() in ("true", "yes", "on") else "False"
    return f" (true or false in a YAML file; on the command line, --config {key}={word}, capitalised)"


def _describe_branch(branch: dict) -> str:
    if "const" in branch:
        return repr(branch["const"])
    if branch.get("type") == "object" and branch.get("description"):
        return branch["description"]  # its shape ({min, max}), not the word object
    if "enum" in branch:  # the words it takes, not "value"
        return "one of " + ", ".join(map(repr, branch["enum"]))
    items = branch.get("items")
    if branch.get("type") == "array" and isinstance(items, dict):
        inner = " or ".join(_describe_branch(b) for b in items.get("oneOf", [items]))
        return f"a list of ({inner})" + (" with at least one item" if branch.get("minItems") else "")
    text = branch.get("type", "value")
    if "minimum" in branch:
        text += f" >= {branch['minimum']}"
    if "pattern" in branch:
        text += f" matching {branch['pattern']}"
    return text


# A top-level key that says which kind of file a user gave (a campaign passed as the site file, a
# site file as the campaign): (its schema, the words naming it).
FILE_KINDS = {"benchmarks": ("config", "a campaign config (--config, --configfile, profiles/<site>/campaign.yaml)"),
              "scheduler": ("site", "a site file (--site, site=, profiles/<site>/site.yaml)"),
              "references": ("references", "a references file (profiles/<site>/references.yaml)")}


def validate(data: Any, schema_name: str, file: str) -> dict:
    """Validate `data` (filled with defaults in place) or raise ConfigError."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(file, "(top level)", data, "a mapping of keys to values", "is not a mapping")
    reject_non_finite(file, data)  # before the schema: NaN passes its bounds, and `.inf` its types
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
            kinds = [FILE_KINDS[k] for k in extra if k in FILE_KINDS and FILE_KINDS[k][0] != schema_name]
            problem = "is not a known key" + (f" (the file looks like {kinds[0][1]}, not a {schema_name} file)"
                                              if kinds and len(path) == 1 else "")
            raise ConfigError(file, key_path(path), value, _describe_valid(err), problem)
        if err.validator == "required":
            missing = [k for k in err.validator_value if k not in err.instance]
            path.append(missing[0] if missing else "?")
            what = err.schema.get("properties", {}).get(missing[0], {}).get("description") if missing else None
            valid = _describe_valid(err) + (f" ({what})" if what else "")
            raise ConfigError(file, key_path(path), None, valid, "is missing")
        raise ConfigError(file, key_path(path), value, _describe_valid(err))
    reject_control_characters(file, data)
    return data


def load_and_validate(path: str | Path, schema_name: str) -> dict:
    return validate(load_yaml(path), schema_name, str(path))


# --- the files a Snakemake command line reads ----------------------------------------------------

def snakemake_config_files(argv: list[str], cwd: str | Path = ".") -> list[tuple[str, Path]]:
    """(what, path) of every YAML file a `snakemake` command line makes Snakemake parse before the
    Snakefile can say anything: each --configfile, the --profile's config.yaml and the config files
    the profile names. Snakemake's own parser gives a traceback, or a message with no file or line,
    for a directory, a dangling link, a non-UTF-8 byte or a syntax error, and parses a huge file for
    minutes; exabench's loader (load_yaml) names the file, the line and what is valid."""
    cwd = Path(cwd)
    files: list[tuple[str, Path]] = []
    profile = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in ("--configfile", "--configfiles"):
            values = [value] if eq else []
            while not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                i += 1
                values.append(argv[i])
            files += [("--configfile", cwd / v) for v in values]
        elif name == "--profile":
            if eq:
                profile = value
            elif i + 1 < len(argv):
                i += 1
                profile = argv[i]
        i += 1
    profile = profile if profile is not None else os.environ.get("SNAKEMAKE_PROFILE") or None
    if profile is not None:
        # where Snakemake looks: the path itself, then its user and system profile folders
        homes = [cwd, Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "snakemake",
                 Path("/etc/xdg/snakemake")]
        folder = next((h / profile for h in homes if (h / profile).is_dir()), cwd / profile)
        if not folder.is_dir():
            raise ConfigError("--profile", "--profile", profile, "a folder holding a Snakemake profile's config.yaml "
                              "(profiles/<site>), here or under ~/.config/snakemake or /etc/xdg/snakemake",
                              "is not a folder")
        found = [folder / n for n in ("config.v8+.yaml", "config.yaml") if (folder / n).exists()
                 or (folder / n).is_symlink()]
        for path in found[:1]:
            files.append(("--profile", path))
            settings = load_yaml(path)
            if not isinstance(settings, dict):
                raise ConfigError(str(path), "(top level)", settings, "a mapping of Snakemake options",
                                  "is not a mapping")
            named = settings.get("configfile", settings.get("configfiles")) or []
            for v in [named] if isinstance(named, str) else named if isinstance(named, list) else []:
                given = cwd / str(v)
                files.append((f"{path} configfile", given if given.exists() else folder / str(v)))
    return files


def check_snakemake_config_files(argv: list[str], cwd: str | Path = ".") -> list[Path]:
    """Load every file of snakemake_config_files with exabench's loader (size, UTF-8, folder or
    dangling link, duplicate keys, syntax with its line) and require a mapping; raise ConfigError
    naming the first bad one. Returns the files checked."""
    checked = []
    for what, path in snakemake_config_files(argv, cwd):
        if path.is_symlink() and not path.exists():
            raise ConfigError(str(path), "(file)", str(path), "an existing YAML file",
                              f"is a link to {os.readlink(path)!r}, which does not exist (given with {what})")
        data = load_yaml(path)
        if data is not None and not isinstance(data, dict):
            raise ConfigError(str(path), "(top level)", data, "a mapping of keys to values (a YAML document of "
                              "`key: value` lines, not a list)", "is not a mapping")
        checked.append(path)
    return checked
