"""The study catalogue as campaigns (docs/studies.md): the study files in studies/, validated, and the
campaign each study runs on a site.

A study file holds a campaign per site (`tiny` for local and slurm-local, a site's own variant, or
`default`) and its published figures. Planning a study is planning its campaign: the base config's
settings with the study's benchmarks, expanded into runs as any campaign; a run two studies share is
planned once. Comparing the reproduced figures with the published ones is analysis.studies' work.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from exabench.campaign.plan import Run
from exabench.campaign.plan import expand as expand_runs
from exabench.campaign.site import Site
from exabench.config import REPO_ROOT, load_and_validate, validate
from exabench.errors import ConfigError

CATALOGUE = REPO_ROOT / "studies"

TINY_SITES = ("local", "slurm-local")
ALL = "all"

# Figures over another published figure: the other one's id is `of`.
OF_KINDS = ("over_figure", "figure_over")


@dataclass(frozen=True)
class Study:
    name: str
    path: str
    data: dict

    @property
    def figures(self) -> list[dict]:
        return self.data["published"]

    def machines(self) -> list[str]:
        return list(dict.fromkeys(f["machine"] for f in self.figures))


def load_study(path: str | Path) -> Study:
    """One study file, validated (schema, then the checks a schema cannot say), or ConfigError."""
    path = Path(path)
    where = str(path)
    data = load_and_validate(path, "study")
    if data["name"] != path.stem:
        raise ConfigError(where, "name", data["name"], f"the file's name, {path.stem!r}", "differs from the file name")
    # Every campaign, tiny included, measures the study's own workloads: another model's runs
    # reproduce none of its figures.
    reproduced = {f["reproduce"]["benchmark"] for f in data["published"]}
    for variant, camp in data["campaigns"].items():
        names = [b["name"] for b in camp["benchmarks"]]
        if not reproduced & set(names):
            raise ConfigError(
                where,
                f"campaigns.{variant}.benchmarks",
                names,
                f"at least one benchmark the study's figures reproduce ({', '.join(sorted(reproduced))})",
                "runs none of them",
            )
    ids = [f["id"] for f in data["published"]]
    for i, fig in enumerate(data["published"]):
        key = f"published[{i}]"
        if ids.count(fig["id"]) > 1:
            raise ConfigError(where, f"{key}.id", fig["id"], "an id given once per study", "is given twice")
        if fig["value"] is not None and "tolerance" not in fig:
            raise ConfigError(
                where, f"{key}.tolerance", None, "{relative: x} or {absolute: x} for a published value", "is missing"
            )
        rep = fig["reproduce"]
        if rep["kind"] in OF_KINDS:
            other = next((f for f in data["published"] if f["id"] == rep.get("of")), None)
            if other is None or other["value"] is None:
                raise ConfigError(
                    where,
                    f"{key}.reproduce.of",
                    rep.get("of"),
                    "the id of another figure of this study with a published value",
                    "names no such figure",
                )
        if rep["kind"] == "ratio" and "baseline" not in rep:
            raise ConfigError(where, f"{key}.reproduce.baseline", None, "the point divided by (a ratio)", "is missing")
        for part in ("at", "baseline"):
            for k in ("benchmark", "metric"):
                if part == "at" and k in rep.get(part, {}):
                    raise ConfigError(
                        where,
                        f"{key}.reproduce.at.{k}",
                        rep["at"][k],
                        f"reproduce.{k}, not inside `at`",
                        "is misplaced",
                    )
    return Study(data["name"], where, data)


def load_catalogue(directory: str | Path = CATALOGUE) -> dict[str, Study]:
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(
            str(directory), "(directory)", str(directory), "the study catalogue (studies/*.yaml)", "does not exist"
        )
    studies = [load_study(p) for p in sorted(directory.glob("*.yaml"))]
    return {s.name: s for s in studies}


def select(
    catalogue: dict[str, Study], wanted: str, where: str = "--config study", site: str | None = None
) -> list[Study]:
    """The studies `wanted` names: one name, several separated by commas, or `all` (those with a campaign
    for `site`)."""
    if wanted == ALL:  # every study that has a campaign for the site, when a site is given
        return [s for s in catalogue.values() if site is None or runs_on(s, site)]
    names = [w.strip() for w in str(wanted).split(",") if w.strip()]
    for name in names:
        if name not in catalogue:
            raise ConfigError(
                where,
                "study",
                name,
                f"{ALL!r} or one of {', '.join(sorted(catalogue))} (studies/*.yaml; docs/studies.md)",
                "is not a study of the catalogue",
            )
    return [catalogue[n] for n in dict.fromkeys(names)]


def runs_on(study: Study, site: str) -> bool:
    """Whether the study has a campaign for `site` (its own, `tiny` on local sites, or `default`)."""
    camps = study.data["campaigns"]
    return site in camps or site in TINY_SITES or "default" in camps


def variant_of(study: Study, site: str) -> str:
    """The campaign a study runs on `site`: the site's own, `tiny` on local and slurm-local, else `default`."""
    camps = study.data["campaigns"]
    if site in camps:
        return site
    if site in TINY_SITES:
        return "tiny"
    if "default" in camps:
        return "default"
    raise ConfigError(
        study.path,
        "campaigns",
        sorted(camps),
        f"a campaign named {site!r} or 'default' to run on site {site!r}",
        "has none for this site",
    )


def campaign_config(study: Study, variant: str, base: dict) -> dict:
    """The experiment config of one study on one site: the base config's settings with the study's
    campaign; validated as any config, errors naming the study file and variant."""
    camp = study.data["campaigns"][variant]
    # The study's campaign is exact: the base config's benchmarks and node scale do not apply.
    config = {k: v for k, v in base.items() if k not in ("benchmarks", "study", "scale")}
    config.update(
        campaign=f"study-{study.name}",
        benchmarks=[dict(b) for b in camp["benchmarks"]],
        preset=camp.get("preset", "tiny" if variant == "tiny" else "full"),
    )
    for key in ("repeats", "timeout_s"):
        if key in camp:
            config[key] = camp[key]
    return validate(config, "config", f"{study.path} (campaigns.{variant})")


def plan_studies(studies: list[Study], base: dict, site: Site) -> dict[str, list[Run]]:
    """Each study's runs on `site`. A run two studies share (same id) is planned once: both tables read
    it; two studies planning different runs under one id are refused."""
    out: dict[str, list[Run]] = {}
    seen: dict[str, tuple[str, dict]] = {}
    for study in studies:
        variant = variant_of(study, site.name)
        where = f"{study.path} (campaigns.{variant})"
        runs = expand_runs(campaign_config(study, variant, base), site, where)
        for run in runs:
            facts = {k: v for k, v in run.to_dict().items() if k != "campaign"}
            if run.run_id in seen and seen[run.run_id][1] != facts:
                raise ConfigError(
                    where,
                    "benchmarks",
                    run.benchmark,
                    f"the same run as {seen[run.run_id][0]} plans under that id, or a 'label' that tells them apart",
                    f"plans run '{run.run_id}' differently",
                )
            seen.setdefault(run.run_id, (study.path, facts))
        out[study.name] = runs
    return out


def horovod_runs(plans: dict[str, list[Run]]) -> list[str]:
    """The planned runs that train over Horovod (`backend: horovod`), each once."""
    return sorted({r.run_id for runs in plans.values() for r in runs if r.params.get("backend") == "horovod"})


def horovod_missing_message(plans: dict[str, list[Run]], site: str) -> str:
    """Where the studies run on this machine (local, slurm-local) and train over Horovod that this Python
    cannot import, the line to stop with before the campaign starts; "" otherwise. `make setup` does not
    build Horovod (a source build of several minutes); `make setup-horovod` does."""
    import importlib.util

    needing = horovod_runs(plans)
    if site not in TINY_SITES or not needing or importlib.util.find_spec("horovod") is not None:
        return ""
    studies = sorted(name for name, runs in plans.items() if any(r.run_id in needing for r in runs))
    return (f"{len(needing)} run(s) of {', '.join(studies)} train over Horovod, which this Python cannot import: "
            "needs `make setup-horovod` (builds it into .venv, several minutes; docs/studies.md), or name the "
            "other studies in --config study=")


def merged_runs(plans: dict[str, list[Run]], campaign: str) -> list[Run]:
    """One list of every study's runs, each id once, recorded under one campaign name."""
    import dataclasses

    runs: dict[str, Run] = {}
    for study_runs in plans.values():
        for run in study_runs:
            runs.setdefault(run.run_id, dataclasses.replace(run, campaign=campaign))
    return list(runs.values())
