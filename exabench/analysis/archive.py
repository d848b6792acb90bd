"""Artifact archive of a campaign and its reproduction.

`pack` puts records, rendered scripts and specs, run outputs and logs, the config, the
site (site.yaml, references), the lock files, the plan and the derived tables, plots and
verdicts into one deterministic .tar.gz, with `inventory.sha256` (sha256sum format) listing
every other file. `reproduce` unpacks an archive, checks every hash, rebuilds every table,
plot and verdict from the archived records alone, and compares each with its original byte
for byte.

A results folder may have seen several campaigns (and studies): an archive holds exactly one,
the one of the folder's plan.json: its runs' records, scripts and logs, and the derived files
that campaign's records rebuild (tried at packing time), its studies' tables with the study
files. Another campaign's records and tables stay out.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from exabench.containers.digests import sha256_file
from exabench.errors import ExabenchError

ARCHIVE_SCHEMA = "exabench.archive/1"
INVENTORY = "inventory.sha256"
META = "archive.json"
# What of results/<site>/ is packed, and under which name (derived outputs are the originals
# that `reproduce` compares against).
RESULT_PARTS = {"records": "records/**/*.json", "runs": "runs/*/*", "tables": "tables/*",
                "plots": "plots/*.png", "acceptance": "acceptance/*",
                "attempts": "attempts/*/*.json"}  # records `exabench retry` set aside
RESULT_FILES = ("plan.json", "plan.csv")
DERIVED = ("tables", "plots", "acceptance")
STUDIES = "studies.json"  # {study: {"variant": ..., "runs": [run ids]}} of a study campaign


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def planned_ids(results: Path) -> set[str] | None:
    """The run ids of the folder's campaign (plan.json), or None where there is no plan."""
    plan = results / "plan.json"
    if not plan.is_file():
        return None
    try:
        return {run["run_id"] for run in json.loads(plan.read_text())}
    except (ValueError, KeyError, TypeError) as exc:
        raise ExabenchError(f"{plan}: not a plan written by the workflow ({exc})") from None


def of_campaign(part: str, relative: str, ids: set[str] | None) -> bool:
    """Whether a file of results/<part>/ belongs to the campaign's runs (records, node records, run folders,
    set-aside attempts); derived files are chosen after a trial rebuild."""
    if ids is None or part not in ("records", "runs", "attempts"):
        return True
    first = relative.split("/", 1)[0]
    if part == "records":
        name = relative[len("nodes/"):] if first == "nodes" else relative
        run_id = name[: -len(".json")]
        return run_id in ids or (first == "nodes" and run_id.split(".node-", 1)[0] in ids)
    return first in ids


def collect(results: Path, logs: Path | None, configs: list[Path], site: Path | None, references: Path | None,
            locks: list[Path], baseline_records: list[Path], rule_logs: list[Path] | None = None) -> dict[str, Path]:
    """Archive name -> file on disk: the campaign of the folder's plan.json only. `rule_logs`: the logs
    (under `logs`) of the rules that made what is packed; None (a folder packed by hand after its
    campaign): every log in it."""
    files: dict[str, Path] = {}
    ids = planned_ids(results)
    for part, pattern in RESULT_PARTS.items():
        for p in sorted(results.glob(pattern)):
            relative = p.relative_to(results / part).as_posix()
            if p.is_file() and not p.name.startswith(".") and of_campaign(part, relative, ids):
                files[f"{part}/{relative}"] = p
    for name in RESULT_FILES:
        if (results / name).is_file():
            files[name] = results / name
    if logs and logs.is_dir():
        # Named, not listed, in a Snakemake run: the jobs running beside the archive job (the ingestion,
        # the report's pages) are not what it packs, and Snakemake deletes each one's log as it starts.
        found = logs.rglob("*") if rule_logs is None else [*logs.glob("runs/*"), *rule_logs]
        for p in sorted(found):
            relative = p.relative_to(logs).as_posix()
            # A run's log (logs/<site>/runs/<run_id>.log) only for the campaign's runs.
            is_run_log = relative.startswith("runs/") and relative.count("/") == 1
            if p.is_file() and (not is_run_log or ids is None or p.stem in ids):
                files[f"logs/{relative}"] = p
    for i, c in enumerate(configs):
        files[f"config/{i}-{c.name}"] = c
    if site:
        files["site/site.yaml"] = site
        profile = site.parent / "config.yaml"
        if profile.is_file():
            files["site/profile.yaml"] = profile
    if references and references.is_file():
        files["site/references.yaml"] = references
    for lock in locks:
        if lock.is_file():
            files[f"lock/{lock.name}"] = lock
    for p in baseline_records:
        files[f"baseline/{p.name}"] = p
    return files


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uid, info.gid = len(data), mode, 0, 0, 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def pack(out: str | Path, files: dict[str, Path], meta: dict, extra: dict[str, bytes] | None = None) -> Path:
    """Write the archive: deterministic (sorted names, zero times and owners), so packing the
    same campaign twice gives the same bytes. `extra`: archive name -> bytes written by exabench."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    contents = {name: path.read_bytes() for name, path in sorted(files.items())}
    contents.update(extra or {})
    contents[META] = (json.dumps({"schema": ARCHIVE_SCHEMA, **meta}, indent=1, sort_keys=True) + "\n").encode()
    inventory = "".join(f"{sha256_bytes(data)}  {name}\n" for name, data in sorted(contents.items()))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(contents.items()):
            _add(tar, name, data, 0o755 if name.endswith(".sh") else 0o644)
        _add(tar, INVENTORY, inventory.encode())
    tmp = out.with_name(f".{out.name}.tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(buf.getvalue())
    tmp.replace(out)
    return out


def unpack(archive: str | Path, dest: str | Path) -> Path:
    """Extract regular files (and folders) only, refusing names that leave the destination and an
    archive that is not one exabench wrote (re-packed with plain tar: fine while it keeps the files)."""
    dest = Path(dest)
    if not Path(archive).is_file():
        raise ExabenchError(f"{archive}: no such archive file")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            for m in tar.getmembers():
                target = (dest / m.name).resolve()
                inside = target == dest.resolve() or dest.resolve() in target.parents
                if m.isdir() and inside:
                    continue
                if not m.isfile() or not inside:
                    raise ExabenchError(f"{archive}: member {m.name!r} is not a plain file inside the archive; "
                                        "refused")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(m).read())
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ExabenchError(f"{archive}: not a readable tar archive ({exc})") from None
    for name in (META, INVENTORY):
        if not (dest / name).is_file():
            raise ExabenchError(f"{archive}: no {name} inside: not an archive written by `exabench archive` "
                                "(or re-packed without it)")
    return dest


@dataclass
class Check:
    """What reproduce found: hash problems and how every rebuilt file compares."""

    mismatched: list[str] = field(default_factory=list)   # hash differs from the inventory
    missing: list[str] = field(default_factory=list)      # listed, absent
    unlisted: list[str] = field(default_factory=list)     # present, not listed
    identical: list[str] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)    # rebuilt, not byte-identical to the original
    not_rebuilt: list[str] = field(default_factory=list)  # an original that reproduce does not rebuild
    new: list[str] = field(default_factory=list)          # rebuilt, no original in the archive
    # The containers the records ran in (exabench.analysis.container_check): a runtime or image other
    # than the site file's (or the image given) fails the check; the others are warnings.
    container_differs: list[str] = field(default_factory=list)
    container_warnings: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.missing or self.unlisted or self.differing or self.container_differs)


def verify_inventory(root: Path, check: Check) -> None:
    listed = {}
    for line in (root / INVENTORY).read_text().splitlines():
        digest, name = line.split("  ", 1)
        listed[name] = digest
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - {INVENTORY}
    for name, digest in sorted(listed.items()):
        if name not in present:
            check.missing.append(name)
        elif sha256_file(root / name) != digest:
            check.mismatched.append(name)
    check.unlisted += sorted(present - set(listed) - {"reproduced"} - {n for n in present
                                                                         if n.startswith("reproduced/")})


def rebuild(root: Path, out: Path) -> list[Path]:
    """Every table, plot and verdict of the campaign from the archived records alone."""
    from exabench.analysis.acceptance import references_label, verdicts_against, write_verdict_files
    from exabench.records.tidy import load_records, markdown_summary, tidy_table
    from exabench.analysis.compare import all_tables, write_tables
    from exabench.analysis.runs import load_plan, run_table
    from exabench.analysis.plots import all_plots
    from exabench.io import atomic_write_text

    meta = json.loads((root / META).read_text())
    site, baseline = meta["site"], meta.get("baseline") or None
    own = sorted(p for p in (root / "records").glob("*.json"))
    nodes = sorted((root / "records" / "nodes").glob("*.json"))
    base = sorted((root / "baseline").glob("*.json"))
    records, node_records = load_records(own), load_records(nodes)
    plan = load_plan(root / "plan.json")
    written: list[Path] = []
    tables = out / "tables"
    df = tidy_table(records)
    atomic_write_text(tables / "results.csv", df.to_csv(index=False))
    atomic_write_text(tables / "summary.md", markdown_summary(df, site))
    written += [tables / "results.csv", tables / "summary.md"]
    both = records + load_records(base)
    runs = run_table(both, plan, site)
    written += write_tables(all_tables(runs, baseline), tables, baseline)
    written += [out / "plots" / e["file"] for e in all_plots(runs, both, node_records, out / "plots") if e["file"]]
    written += rebuild_studies(root, meta, records, tables)
    refs_file = root / "site" / "references.yaml"
    if (root / "acceptance").is_dir() and refs_file.is_file():
        acc = out / "acceptance"
        files = [acc / "verdicts.md", acc / "verdicts.csv", acc / "junit.xml"]
        write_verdict_files(verdicts_against(records, refs_file, plan, site), site,
                            references_label(refs_file, meta.get("references_name") or None), *files)
        written += files
    return written


def rebuild_studies(root: Path, meta: dict, records: list[dict], tables: Path) -> list[Path]:
    """Each study's table (tables/study-<name>.md and .csv) from the archived study file and records."""
    from exabench.analysis import studies
    from exabench.campaign.studies import Study, load_study

    chosen = json.loads((root / STUDIES).read_text()) if (root / STUDIES).is_file() else {}
    by_id = {r["run_id"]: r for r in records}
    written = []
    for name, entry in sorted(chosen.items()):
        loaded = load_study(root / "studies" / f"{name}.yaml")
        # The path the table names is the catalogue's, as when the campaign wrote it.
        study = Study(loaded.name, entry["path"], loaded.data)
        mine = [by_id[i] for i in entry["runs"] if i in by_id]
        df = studies.study_table(study, mine, meta["site"], entry["variant"])
        n_ok = sum(r.get("status") == "ok" for r in mine)
        md = studies.study_markdown(study, df, meta["site"], entry["variant"], len(mine), n_ok)
        from exabench.io import atomic_write_text

        atomic_write_text(tables / f"study-{name}.md", md)
        atomic_write_text(tables / f"study-{name}.csv", df.to_csv(index=False))
        written += [tables / f"study-{name}.md", tables / f"study-{name}.csv"]
    return written


def derived_of_campaign(files: dict[str, Path], meta: dict, studies_json: bytes | None) -> dict[str, Path]:
    """The files with the derived ones (tables, plots, verdicts) cut to those the campaign's own records
    rebuild: a trial rebuild in a scratch folder, so another campaign's tables in the folder stay out.
    That a kept one is the campaign's own and up to date is the caller's: the Snakemake `archive` target
    brings every derived file it packs up to date first."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="exabench-archive-") as tmp:
        stage = Path(tmp) / "stage"
        for name, path in files.items():
            top = name.split("/", 1)[0]
            if top in ("records", "baseline", "site", "studies") or name in RESULT_FILES:
                (stage / name).parent.mkdir(parents=True, exist_ok=True)
                (stage / name).write_bytes(path.read_bytes())
            elif top in DERIVED:  # rebuild writes acceptance verdicts only where the campaign has some
                (stage / top).mkdir(parents=True, exist_ok=True)
        (stage / META).write_text(json.dumps(meta))
        if studies_json is not None:
            (stage / STUDIES).write_bytes(studies_json)
        out = Path(tmp) / "out"
        rebuilt = {p.relative_to(out).as_posix() for p in rebuild(stage, out)}
    return {n: p for n, p in files.items() if n.split("/", 1)[0] not in DERIVED or n in rebuilt}


def logs_of_kept_outputs(before: dict[str, Path], kept: dict[str, Path]) -> dict[str, Path]:
    """`kept` without the rule logs of derived files cut from it: a study's log (logs/study-<name>.log)
    goes with its table (tables/study-<name>.*), so re-archiving a campaign after a study in the same
    folder packs neither the study's table nor its log."""
    cut = {Path(name).stem for name in before if name.split("/", 1)[0] in DERIVED and name not in kept}
    return {name: path for name, path in kept.items()
            if not (name.startswith("logs/") and name.count("/") == 1 and Path(name).stem in cut)}


def check_containers(root: Path, check: Check, image: str | None = None) -> None:
    """The records' runtime and image digest against the archived site file's container section
    and, with `image`, against that image's digest (exabench.analysis.container_check)."""
    import yaml
    from exabench.analysis.container_check import container_findings
    from exabench.containers.digests import image_digest
    from exabench.records.tidy import load_records

    site_file, site_container = root / "site" / "site.yaml", None  # None: no site file archived
    if site_file.is_file():
        try:
            site = yaml.safe_load(site_file.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ExabenchError(f"{site_file}: the archived site file is not YAML ({exc})") from None
        site_container = (site.get("container") if isinstance(site, dict) else None) or {}
    if image is not None and not Path(image).exists():
        raise ExabenchError(f"--image {image}: no such image (valid: the .sif file, OCI image layout or "
                            "directory image the runs ran)")
    given = (image, image_digest(image)) if image is not None else None
    records = load_records(sorted((root / "records").glob("*.json")))
    check.container_differs, check.container_warnings, check.containers = container_findings(
        records, site_container, given)


def reproduce(archive: str | Path, dest: str | Path, image: str | None = None) -> Check:
    root = unpack(archive, dest)
    check = Check()
    verify_inventory(root, check)
    check_containers(root, check, image)
    out = root / "reproduced"
    rebuilt = {p.relative_to(out).as_posix() for p in rebuild(root, out)}
    originals = {p.relative_to(root).as_posix() for d in DERIVED for p in (root / d).glob("*") if p.is_file()}
    for name in sorted(rebuilt | originals):
        if name not in rebuilt:
            check.not_rebuilt.append(name)
        elif name not in originals:
            check.new.append(name)
        elif (root / name).read_bytes() == (out / name).read_bytes():
            check.identical.append(name)
        else:
            check.differing.append(name)
    return check


def check_report(check: Check, archive: str) -> str:
    lines = [f"reproduce {archive}:"]
    for label, items in (("hash mismatch (edited after packing)", check.mismatched),
                         ("listed in the inventory but missing", check.missing),
                         ("present but not in the inventory", check.unlisted),
                         ("rebuilt, NOT identical to the original", check.differing),
                         ("original not rebuilt by reproduce", check.not_rebuilt),
                         ("rebuilt, no original to compare", check.new),
                         ("container differs", check.container_differs),
                         ("container warning", check.container_warnings)):
        for name in items:
            lines.append(f"  {label}: {name}")
    for line in check.containers:
        lines.append(f"  ran in: {line}")
    lines.append(f"  {len(check.identical)} rebuilt files identical to the originals")
    lines.append("REPRODUCED: every hash matches and every rebuilt file is identical" if check.ok
                 else "NOT REPRODUCED: see above")
    return "\n".join(lines)


def archive_campaign(results: str, out: str, site_name: str | None = None, logs: str | None = None,
                     configs: list[str] = (), site: str | None = None, references: str | None = None,
                     locks: list[str] = ("requirements.lock", "requirements.txt"), baseline: str | None = None,
                     baseline_records: list[str] = (), studies: dict | None = None,
                     rule_logs: list[str] | None = None) -> str:
    """Pack a finished campaign with its inputs into one archive; returns a one-line summary.
    `studies`: {name: (Study, variant, runs)} of a study campaign (exabench.pipeline.study_plans): each
    study's file and runs go in, so reproduce rebuilds its table. `rule_logs`: as for `collect`."""
    from exabench import __version__
    from exabench.records.record import record_paths

    results_dir = Path(results)
    refs = Path(references) if references else None
    files = collect(results_dir, Path(logs) if logs else None, [Path(c) for c in configs],
                    Path(site) if site else None, refs, [Path(x) for x in locks],
                    [Path(p) for p in record_paths(baseline_records)],
                    None if rule_logs is None else [Path(p) for p in rule_logs])
    meta = {"site": site_name or results_dir.name, "baseline": baseline or "", "exabench_version": __version__,
            "references_name": refs.name if refs else ""}
    studies_json = None
    if studies:
        for name, (study, _, _) in studies.items():
            files[f"studies/{name}.yaml"] = Path(study.path)
        studies_json = (json.dumps({name: {"path": study.path, "variant": variant,
                                           "runs": sorted(r.run_id for r in runs)}
                                    for name, (study, variant, runs) in studies.items()},
                                   indent=1, sort_keys=True) + "\n").encode()
    files = logs_of_kept_outputs(files, derived_of_campaign(files, meta, studies_json))
    packed = pack(out, files, meta, {STUDIES: studies_json} if studies_json else None)
    return f"{len(files)} files -> {packed} (inventory: inventory.sha256); reproduce with: exabench reproduce {packed}"


def record_from_archive(archive: str | Path, run_id: str) -> str:
    """The text of the record of `run_id` in a campaign archive (`records/<run_id>.json`; also under a
    top folder when the archive was re-packed with plain tar)."""
    if not Path(archive).is_file():
        raise ExabenchError(f"{archive}: no such archive file")
    want = f"records/{run_id}.json"
    try:
        with tarfile.open(archive, "r:*") as tar:
            for m in tar.getmembers():
                if m.isfile() and (m.name == want or m.name.endswith("/" + want)):
                    return tar.extractfile(m).read().decode("utf-8")
    except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as exc:
        raise ExabenchError(f"{archive}: not a readable tar archive ({exc})") from None
    raise ExabenchError(f"{archive}: holds no record of run {run_id!r} ({want})")
