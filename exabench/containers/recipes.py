"""Apptainer recipes (containers/*.def): parsed with spython, linted, and converted to the
Dockerfiles that Docker, Podman and Charliecloud users build."""

from __future__ import annotations

import functools
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from exabench.errors import ConfigError
from exabench.config import REPO_ROOT

CONTAINERS_DIR = REPO_ROOT / "containers"
STACKS = ("cpu", "pytorch-cuda", "pytorch-rocm", "tensorflow-cuda", "pytorch-cuda11", "pytorch-cuda11-ppc64le")
# Stacks that keep an older framework for GPUs the current CUDA no longer supports (Kepler, Pascal,
# Volta) or for ppc64le, where no current wheels exist: their pins follow their own release, not
# requirements.lock (label org.exabench.legacy says which and why).
# Labels every recipe carries ("none" where a component is absent), checked by lint_recipe.
REQUIRED_LABELS = ("org.exabench.version", "org.exabench.stack", "org.exabench.python", "org.exabench.torch",
                   "org.exabench.cuda", "org.exabench.rocm", "org.exabench.mpi", "org.exabench.mpi4py",
                   "org.exabench.horovod", "org.exabench.arch", "org.exabench.gpu_arch")
LAYER_MARK = re.compile(r"#\s*exabench-layer:\s*([a-z0-9-]+)\s*$")
PIN = re.compile(r"(?<![\w.-])([A-Za-z0-9_.-]+)(\[[A-Za-z0-9_,-]+\])?==([A-Za-z0-9_.+-]+)")
DOCKER_INSTRUCTIONS = {"FROM", "ADD", "COPY", "LABEL", "ENV", "RUN", "CMD", "ENTRYPOINT", "WORKDIR", "ARG", "USER",
                       "EXPOSE", "VOLUME", "SHELL", "STOPSIGNAL", "ONBUILD"}  # no HEALTHCHECK: spython's is invalid


@dataclass(frozen=True)
class Recipe:
    path: Path
    base: str
    labels: dict
    environment: dict
    files: list               # [(source relative to the repo, destination in the image)]
    post: list                # %post lines, comments included (layer marks)
    runscript: str = ""
    layers: dict = field(default_factory=dict)   # layer name -> its %post commands

    @property
    def stack(self) -> str:
        return self.labels.get("org.exabench.stack", self.path.stem)

    def commands(self, layers: tuple[str, ...] | None = None) -> list[str]:
        """The %post commands of the named layers (all when None), in recipe order."""
        names = list(self.layers) if layers is None else layers
        unknown = [n for n in names if n not in self.layers]
        if unknown:
            raise ConfigError(str(self.path), "%post layers", unknown, f"some of {', '.join(self.layers)}")
        return [cmd for name, cmds in self.layers.items() if name in names for cmd in cmds]

    def section(self, name: str) -> str:
        """A section's text as written (dedented), e.g. %environment or %runscript."""
        return textwrap.dedent("\n".join(_raw_section(self.path, name))).strip("\n")

    def header(self) -> dict[str, str]:
        """The definition's header (Bootstrap, From, ...), keys lower-cased as Apptainer reads them."""
        out = {}
        for line in self.path.read_text().splitlines():
            if line.startswith("%"):
                break
            key, colon, value = line.split("#", 1)[0].partition(":")
            if colon and key.strip():
                out[key.strip().lower()] = value.strip()
        return out

    def definition(self, layers: tuple[str, ...] | None = None) -> str:
        """The definition file as built: the recipe itself, or for a partial build the recipe
        without the %post commands of the layers left out (and a comment naming them)."""
        text = self.path.read_text()
        if layers is None:
            return text
        self.commands(layers)  # unknown layer names: the recipe's error
        left_out = [name for name in self.layers if name not in layers]
        out, inside, current = [], False, "main"
        for line in text.splitlines():
            if line.startswith("%"):
                inside = line.split()[0] == "%post"
                current = "main"
            elif inside:
                mark = LAYER_MARK.fullmatch(line.strip())
                current = mark.group(1) if mark else current
                if current not in layers and line.strip():
                    continue
            out.append(line)
        note = f"# exabench: built with %post layers {', '.join(layers)}; left out: {', '.join(left_out) or 'none'}"
        return note + "\n" + "\n".join(out) + "\n"

    def pins(self) -> dict[str, str]:
        """Every `name==version` in %post (extras stripped, names normalised)."""
        return {normalise(m.group(1)): m.group(3) for line in self.post for m in PIN.finditer(line)
                if not line.lstrip().startswith("#")}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def recipe_path(stack: str) -> Path:
    if stack not in STACKS:
        raise ConfigError("containers/", "stack", stack, ", ".join(STACKS))
    return CONTAINERS_DIR / f"{stack}.def"


def gpu_arch_supported(declared: list[str], target: str) -> bool:
    """Whether a build shipping kernels for `declared` runs on a GPU of generation `target`.
    NVIDIA: a cubin for X.Y runs on X.Z for Z >= Y (same major); "X.Y+" (PTX) runs on anything
    from X.Y on. AMD gfx targets must match exactly."""
    if target.startswith("gfx"):
        return target in declared
    major, minor = (int(x) for x in target.split("."))
    for item in declared:
        if not re.fullmatch(r"\d+\.\d+\+?", item):
            continue
        d_major, d_minor = (int(x) for x in item.rstrip("+").split("."))
        if item.endswith("+") and (major, minor) >= (d_major, d_minor):
            return True
        if major == d_major and minor >= d_minor:
            return True
    return False


VERIFY_GPU_ARCH = re.compile(r"-m exabench\.containers verify-gpu-arch ([0-9. +]+)$")


def recipe_labels(stack: str) -> dict[str, str]:
    """A recipe's %labels, read without spython (planning reads them for every campaign)."""
    return _labels(recipe_path(stack))


@functools.lru_cache(maxsize=None)
def _labels(path: Path) -> dict[str, str]:
    pairs = (line.strip().split(None, 1) for line in _raw_section(path, "labels") if line.strip())
    return {p[0]: (p[1] if len(p) > 1 else "") for p in pairs}


def _env_line(line: str) -> tuple[str, str]:
    key, _, value = line.removeprefix("export ").partition("=")
    return key.strip(), value.strip()


def _raw_section(path: Path, name: str) -> list[str]:
    lines, inside = [], False
    for line in path.read_text().splitlines():
        if line.startswith("%"):
            inside = line.split()[0] == f"%{name}"
        elif inside:
            lines.append(line)
    return lines


def parse_recipe(path: str | Path) -> Recipe:
    from spython.main.parse.parsers import SingularityParser
    path = Path(path)
    recipes = SingularityParser(str(path)).recipe
    if len(recipes) != 1:
        raise ConfigError(str(path), "stages", list(recipes), "one stage (multi-stage recipes are not used)")
    r = next(iter(recipes.values()))
    labels = dict(line.split(None, 1) if " " in line else (line, "") for line in r.labels)
    environment = dict(_env_line(line) for line in r.environ if "=" in line)
    files = [tuple(f.split(None, 1)) for f in r.files]
    layers, current = {}, "main"
    for line in _raw_section(path, "post"):  # spython drops a section's first comment: read marks here
        mark = LAYER_MARK.fullmatch(line.strip())
        if mark:
            current = mark.group(1)
            layers.setdefault(current, [])
        elif line.strip() and not line.lstrip().startswith("#"):
            layers.setdefault(current, []).append(line.strip())
    return Recipe(path=path, base=r.fromHeader or "", labels=labels, environment=environment, files=files,
                  post=list(r.install), runscript=r.cmd or "", layers=layers)


def lint_recipe(path: str | Path) -> list[str]:
    """Problems that would make the recipe irreproducible or its Dockerfile not equivalent."""
    rec = parse_recipe(path)
    problems = [f"{rec.path.name}: label {k} missing" for k in REQUIRED_LABELS if k not in rec.labels]
    if rec.labels.get("org.exabench.stack") != rec.path.stem:
        problems.append(f"{rec.path.name}: label org.exabench.stack = {rec.labels.get('org.exabench.stack')!r}, "
                        f"want {rec.path.stem!r}")
    if ":" not in rec.base or rec.base.endswith(":latest"):
        problems.append(f"{rec.path.name}: base image {rec.base!r} is not pinned to a tag")
    for line in (c for cmds in rec.layers.values() for c in cmds):
        # spython writes one RUN per %post line: each must stand alone.
        if line.endswith("\\") or line.startswith(("cd ", "export ")) or re.match(r"^[A-Za-z_]+=\S+$", line):
            problems.append(f"{rec.path.name}: %post line {line!r} does not stand alone (one RUN per line)")
        if re.search(r"\bpip3? install\b", line):
            for word in line.split()[line.split().index("install") + 1:]:
                if not word.startswith(("-", "/", "http")) and "==" not in word:
                    problems.append(f"{rec.path.name}: pip package {word!r} is not pinned (name==version)")
    for key, pkg in (("org.exabench.torch", "torch"), ("org.exabench.torchvision", "torchvision"),
                     ("org.exabench.mpi4py", "mpi4py"), ("org.exabench.horovod", "horovod"),
                     ("org.exabench.tensorflow", "tensorflow")):
        # conda spells torch "pytorch"; the CPU wheel of TensorFlow is "tensorflow-cpu"
        label, pin = rec.labels.get(key), (rec.pins().get(pkg) or rec.pins().get("py" + pkg)
                                           or (rec.pins().get("tensorflow-cpu") if pkg == "tensorflow" else None))
        if label is not None and label != "none" and pin != label:
            problems.append(f"{rec.path.name}: label {key} = {label} but %post installs {pkg}=={pin}")
    gpu_arch = rec.labels.get("org.exabench.gpu_arch", "none")
    if gpu_arch != "none" and rec.labels.get("org.exabench.torch", "none") != "none" and not gpu_arch.startswith("gfx"):
        verified = [m.group(1).split() for c in rec.layers.get("check", []) if (m := VERIFY_GPU_ARCH.search(c))]
        if verified != [[a.rstrip("+") for a in gpu_arch.split()]]:
            problems.append(f"{rec.path.name}: the check layer must verify the label org.exabench.gpu_arch "
                            f"({gpu_arch}) with `python -m exabench.containers verify-gpu-arch "
                            f"{' '.join(a.rstrip('+') for a in gpu_arch.split())}`")
    spython_cmds = [line.strip() for line in rec.post if line.strip() and not line.lstrip().startswith("#")]
    if spython_cmds != rec.commands():
        problems.append(f"{rec.path.name}: %post as spython reads it differs from its layers")
    for line in dockerfile(rec.path).splitlines():
        if line and not line.startswith("#") and line.split()[0] not in DOCKER_INSTRUCTIONS:
            problems.append(f"{rec.path.name}: generated Dockerfile line {line!r} is not an instruction")
    return problems


def dockerfile(path: str | Path) -> str:
    """The Dockerfile equivalent of a recipe (spython's DockerWriter), with a header saying so."""
    from spython.main.parse.parsers import SingularityParser
    from spython.main.parse.writers import DockerWriter
    path = Path(path)
    body = DockerWriter(SingularityParser(str(path)).recipe).convert()
    header = (f"# Generated from containers/{path.name} by `python -m exabench.containers dockerfiles`"
              " (spython); do not edit.\n# Build from the repository root: "
              f"docker build -f containers/{path.stem}.Dockerfile -t exabench/{path.stem}:"
              f"{parse_recipe(path).labels.get('org.exabench.version', 'dev')} .\n")
    return header + body.rstrip("\n") + "\n"


def dockerfile_path(stack: str) -> Path:
    return CONTAINERS_DIR / f"{stack}.Dockerfile"
