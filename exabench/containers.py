"""Containers: the Apptainer recipes (containers/*.def), their Dockerfile equivalents, image
digests, and the command that runs one rank inside a site's image.

Recipes are parsed with spython (the Singularity/Apptainer recipe parser) and converted to
Dockerfiles with its DockerWriter, so Docker, Podman and Charliecloud users get the same
stack. A run executes inside its image when the site names a container runtime: the launcher
starts `apptainer exec [--nv|--rocm] --bind ... --env ... IMAGE python3 -m exabench.runner`
on every rank, and the image's digest travels to the record through EXABENCH_CONTAINER_*
variables (exabench.results.provenance reads them). An image whose digest differs from the
site's pin is refused before any script is written.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .config import REPO_ROOT
from .errors import ConfigError

CONTAINERS_DIR = REPO_ROOT / "containers"
STACKS = ("cpu", "pytorch-cuda", "pytorch-rocm", "tensorflow-cuda")
# Labels every recipe carries ("none" where a component is absent), checked by lint_recipe.
REQUIRED_LABELS = ("org.exabench.version", "org.exabench.stack", "org.exabench.python", "org.exabench.torch",
                   "org.exabench.cuda", "org.exabench.rocm", "org.exabench.mpi", "org.exabench.mpi4py",
                   "org.exabench.horovod")
LAYER_MARK = re.compile(r"#\s*exabench-layer:\s*([a-z0-9-]+)\s*$")
PIN = re.compile(r"(?<![\w.-])([A-Za-z0-9_.-]+)(\[[A-Za-z0-9_,-]+\])?==([A-Za-z0-9_.+-]+)")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
DOCKER_INSTRUCTIONS = {"FROM", "ADD", "COPY", "LABEL", "ENV", "RUN", "CMD", "ENTRYPOINT", "WORKDIR", "ARG", "USER",
                       "EXPOSE", "VOLUME", "SHELL", "STOPSIGNAL", "ONBUILD"}  # no HEALTHCHECK: spython's is invalid
URI_SCHEMES = ("oras://", "docker://", "library://", "shub://")
# Environment variables the exec line sets; the runner's provenance() reads them back.
ENV_RUNTIME, ENV_IMAGE, ENV_DIGEST, ENV_STACK = ("EXABENCH_CONTAINER_RUNTIME", "EXABENCH_CONTAINER_IMAGE",
                                                "EXABENCH_CONTAINER_DIGEST", "EXABENCH_CONTAINER_STACK")
ENV_VERIFIED = "EXABENCH_CONTAINER_VERIFIED"  # 1: digest computed from the image at render time
CONTAINER_PYTHON = "python3"  # on PATH through the recipe's %environment (/opt/venv/bin)


class ContainerError(ConfigError):
    """An image that is missing, unbuilt or not the one the site pinned."""


# --- recipes ---------------------------------------------------------------------------------

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
        label, pin = rec.labels.get(key), rec.pins().get(pkg) or (rec.pins().get("tensorflow-cpu")
                                                                  if pkg == "tensorflow" else None)
        if label is not None and label != "none" and pin != label:
            problems.append(f"{rec.path.name}: label {key} = {label} but %post installs {pkg}=={pin}")
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


# --- digests ---------------------------------------------------------------------------------

def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def directory_digest(path: str | Path) -> str:
    """A directory image's digest: sha256 over a canonical listing (path, type, mode, link target
    or content digest), in sorted order; owners and times are left out, so an unpacked copy of
    the same tree has the same digest."""
    root = Path(path)
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                entry = f"L {rel} {os.readlink(p)}"
            elif stat.S_ISREG(st.st_mode):
                entry = f"F {rel} {stat.S_IMODE(st.st_mode):o} {file_digest(p)}"
            elif stat.S_ISDIR(st.st_mode):
                entry = f"D {rel} {stat.S_IMODE(st.st_mode):o}"
            else:  # device nodes, fifos: their kind only
                entry = f"O {rel} {stat.S_IFMT(st.st_mode):o}"
            h.update(entry.encode("utf-8", "surrogateescape") + b"\n")
    return "sha256:" + h.hexdigest()


def image_digest(path: str | Path) -> str:
    path = Path(path)
    return directory_digest(path) if path.is_dir() else file_digest(path)


def digest_file(image: str | Path) -> Path:
    """Where an image's digest is recorded: beside it, `<image>.sha256`."""
    return Path(str(image).rstrip("/") + ".sha256")


def write_digest(image: str | Path) -> str:
    from .results import atomic_write_text
    digest = image_digest(image)
    atomic_write_text(digest_file(image), f"{digest}  {Path(image).name}\n")
    return digest


def recorded_digest(image: str | Path) -> str | None:
    f = digest_file(image)
    if not f.exists():
        return None
    word = f.read_text().split()[0] if f.read_text().split() else ""
    return word if DIGEST.fullmatch(word) else None


# --- a site's image --------------------------------------------------------------------------

def runtime(site) -> str:
    return (site.container or {}).get("runtime", "none") or "none"


def uses_container(site) -> bool:
    return runtime(site) != "none"


def stack_for(site, framework: str | None) -> str:
    """The stack a run needs: the site's `container.stack`, else by GPU vendor and framework."""
    chosen = (site.container or {}).get("stack", "")
    if chosen:
        return chosen
    vendor = site.node.gpu_vendor if site.node.gpus else "none"
    if vendor == "amd":
        return "pytorch-rocm"
    if vendor == "nvidia":
        return "tensorflow-cuda" if framework and "tensorflow" in framework else "pytorch-cuda"
    return "cpu"


def image_dir(site, results_root: str | Path) -> Path:
    configured = (site.container or {}).get("image_dir", "")
    return Path(configured) if configured else Path(results_root) / "images"


def built_image_path(site, stack: str, results_root: str | Path) -> Path:
    suffix = ".d" if runtime(site) == "charliecloud" else ".sif"  # ch-run runs a directory image
    return (image_dir(site, results_root) / f"{stack}{suffix}").resolve()


def site_image(site, stack: str, results_root: str | Path) -> str:
    """The image reference a site runs: its prebuilt `container.image`, else the built one."""
    return (site.container or {}).get("image", "") or str(built_image_path(site, stack, results_root))


def is_uri(image: str) -> bool:
    return image.startswith(URI_SCHEMES) or "://" in image or not image.startswith("/")


def verified_digest(site, image: str) -> str | None:
    """The image's digest, checked against the site's pin; raises ContainerError on a mismatch.

    A file or directory image is hashed when its recorded digest (`<image>.sha256`) is missing
    or older than the image (for a directory, than anything in it); an image not built yet
    gives None (nothing to check). A URI is trusted to resolve to the digest it names
    (`docker://name@sha256:...`) or the site's pin; with neither, the digest is unknown (None).
    """
    where, pinned = site.path or site.name, (site.container or {}).get("digest", "")
    if is_uri(image):
        named = DIGEST.search(image)
        if named and pinned and named.group(0) != pinned:
            raise ContainerError(where, "container.digest", pinned, f"the digest the image names ({named.group(0)})",
                                 f"does not match container.image {image}")
        return (named.group(0) if named else None) or pinned or None
    path = Path(image)
    if not path.exists():
        # Not built yet (a script rendered for another machine, a dry run): the pin, if any,
        # travels unverified; the container rules build the image before a real run renders.
        return None
    side = digest_file(path)
    fresh = side.exists() and side.stat().st_mtime >= _newest_mtime(path)
    actual = recorded_digest(path) if fresh else None
    actual = actual or write_digest(path)
    if pinned and actual != pinned:
        raise ContainerError(where, "container.digest", pinned, f"the image's actual digest {actual}",
                             f"does not match {image}: the image changed since it was pinned; refusing to run "
                             "(rebuild or re-pull the pinned image, or pin the new digest on purpose)")
    return actual


def _newest_mtime(path: Path) -> float:
    """A file's mtime; for a directory image the newest over its tree (stat only, no reading)."""
    newest = path.lstat().st_mtime
    if path.is_dir():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                newest = max(newest, (Path(dirpath) / name).lstat().st_mtime)
    return newest


def _literal_prefix(path: str) -> str:
    """The part of a path before its first $VAR component (a bind must be known at render time)."""
    parts = []
    for part in path.split("/"):
        if "$" in part:
            break
        parts.append(part)
    prefix = "/".join(parts)
    return prefix if prefix.startswith("/") and prefix != "/" else ""


def bind_paths(site, results_root: str | Path) -> list[str]:
    """Host paths the container needs: results (spec in, record out), scratch, node-local storage,
    the data set, and the site's own binds (host MPI libraries among them)."""
    storage, cont = site.storage or {}, site.container or {}
    wanted = [str(Path(results_root).resolve())]
    wanted += [_literal_prefix(storage.get(k, "")) for k in ("pfs", "node_local", "stage_in_from")]
    wanted += list(cont.get("binds", []))
    out = []
    for b in wanted:
        if b and b not in out:
            out.append(b)
    return out


def container_env(site, stack: str, image: str, digest: str | None, env: dict | None = None) -> dict[str, str]:
    out = {k: str(v) for k, v in (env or {}).items()}
    out.update({k: str(v) for k, v in (site.container or {}).get("env", {}).items()})
    out.update({ENV_RUNTIME: runtime(site), ENV_IMAGE: image, ENV_STACK: stack, ENV_DIGEST: digest or ""})
    return out


def exec_prefix(site, image: str, binds: list[str], env: dict[str, str]) -> list[str]:
    """The runtime's command that runs the program after it inside `image`."""
    rt, gpu = runtime(site), (site.container or {}).get("gpu_flag", "")
    env_items = sorted(env.items())
    if rt in ("apptainer", "singularity"):
        argv = [rt, "exec"] + ([gpu] if gpu else [])
        argv += [f"--bind={b}" for b in binds] + [f"--env={k}={v}" for k, v in env_items]
        return argv + [image]
    if rt == "charliecloud":
        argv = ["ch-run", "--set-env"] + [f"--bind={b}" for b in binds]  # bare --set-env: the image's /ch/environment
        return argv + [f"--set-env={k}={v}" for k, v in env_items] + [image, "--"]
    if rt == "podman":  # NERSC's podman-hpc: --gpu and --mpi are its flags
        argv = ["podman-hpc", "run", "--rm"] + ([gpu] if gpu else []) + (["--mpi"] if site.mpi != "none" else [])
        argv += [f"--volume={b}:{b}" if ":" not in b else f"--volume={b}" for b in binds]
        return argv + [f"--env={k}={v}" for k, v in env_items] + [image]
    if rt == "docker":
        argv = ["docker", "run", "--rm"] + (["--gpus=all"] if gpu else [])
        argv += [f"--volume={b}:{b}" if ":" not in b else f"--volume={b}" for b in binds]
        return argv + [f"--env={k}={v}" for k, v in env_items] + [image]
    if rt == "shifter":
        ref = image if re.match(r"^(docker|custom|id):", image) else f"docker:{image}"  # Shifter's type:name
        argv = ["shifter", f"--image={ref}"] + ([f"--module={gpu.lstrip('-')}"] if gpu else [])
        argv += [f"--volume={b}:{b}" if ":" not in b else f"--volume={b}" for b in binds]
        return argv + [f"--env={k}={v}" for k, v in env_items]
    raise ConfigError(site.path or site.name, "container.runtime", rt,
                      "none, apptainer, singularity, charliecloud, podman (podman-hpc), docker or shifter")


def wrap_program(site, spec_path: str | Path, framework: str | None, env: dict | None,
                 results_root: str | Path) -> list[str]:
    """The argv one rank runs: the runner inside the site's image, its digest checked first."""
    stack = stack_for(site, framework)
    image = site_image(site, stack, results_root)
    digest = verified_digest(site, image)
    verified = digest is not None and not is_uri(image)
    digest = digest or (site.container or {}).get("digest", "") or None
    binds = bind_paths(site, results_root)
    program = [CONTAINER_PYTHON, "-m", "exabench.runner", "--spec", str(Path(spec_path).resolve())]
    cenv = container_env(site, stack, image, digest, env)
    cenv[ENV_VERIFIED] = "1" if verified else "0"
    return exec_prefix(site, image, binds, cenv) + program


def pin_for_run(site, framework: str | None, results_root: str | Path) -> dict | None:
    """The image and digest a run was rendered against (kept in its spec), or None when native."""
    if not uses_container(site):
        return None
    image = site_image(site, stack_for(site, framework), results_root)
    digest = verified_digest(site, image) or (site.container or {}).get("digest", "") or None
    return {"image": image, "digest": digest, "site_file": site.path or site.name}


def check_before_start(pin: dict | None) -> None:
    """Refuse to start a run whose local image no longer has the digest it was rendered with
    (the image was rebuilt or replaced between rendering and the job starting)."""
    if not pin or not pin.get("digest") or is_uri(pin["image"]) or not Path(pin["image"]).exists():
        return
    path = Path(pin["image"])
    side = digest_file(path)
    fresh = side.exists() and side.stat().st_mtime >= _newest_mtime(path)
    actual = (recorded_digest(path) if fresh else None) or write_digest(path)
    if actual != pin["digest"]:
        raise ContainerError(pin["site_file"], "container.digest", pin["digest"], f"the image's actual digest {actual}",
                             f"does not match {pin['image']} at job start: the image changed after the job "
                             "script was rendered; refusing to run (re-render, or pin the new digest on purpose)")


def provenance_from_env(environ=None) -> dict | None:
    """The container a rank runs in, as the exec line told it; None when native."""
    environ = os.environ if environ is None else environ
    if not environ.get(ENV_RUNTIME):
        return None
    return {"runtime": environ[ENV_RUNTIME], "image": environ.get(ENV_IMAGE) or None,
            "stack": environ.get(ENV_STACK) or None, "digest": environ.get(ENV_DIGEST) or None,
            "digest_verified": environ.get(ENV_VERIFIED) == "1"}


# --- building --------------------------------------------------------------------------------

def build_argv(site, stack: str, image: str | Path) -> list[str]:
    """`apptainer build [--fakeroot] IMAGE containers/<stack>.def` (or singularity)."""
    rt = runtime(site)
    if rt not in ("apptainer", "singularity"):
        raise ConfigError(site.path or site.name, "container.runtime", rt,
                          "apptainer or singularity to build .sif images (charliecloud: build_directory_image; "
                          "podman/shifter: build the generated Dockerfile and set container.image)",
                          "cannot build from the recipes here")
    fake = ["--fakeroot"] if (site.container or {}).get("fakeroot") else []
    return [rt, "build", *fake, "--force", str(image), str(recipe_path(stack))]


def needed_images(site, frameworks, results_root: str | Path) -> list[str]:
    """The images this site builds from the recipes for runs of these frameworks (none for a
    native site or one that names a prebuilt image)."""
    if runtime(site) not in ("apptainer", "singularity") or (site.container or {}).get("image"):
        return []
    return sorted({str(built_image_path(site, stack_for(site, f), results_root)) for f in frameworks})


def build_image(site, stack: str, image: str | Path, log_path: str | Path) -> str:
    """Build containers/<stack>.def into `image` with the site's runtime, record its digest beside
    it, and check it against the site's pin (a stack-specific pin only makes sense with `stack`)."""
    Path(image).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write("+ " + shlex.join(build_argv(site, stack, image)) + "\n")
        log.flush()
        subprocess.run(build_argv(site, stack, image), check=True, stdout=log, stderr=subprocess.STDOUT,
                       cwd=REPO_ROOT)  # %files sources are relative to the repository
    write_digest(image)
    return verified_digest(site, str(image)) or ""


def build_directory_image(recipe: Recipe, dest: str | Path, layers: tuple[str, ...] | None = None,
                          mirror: str = "http://deb.debian.org/debian", log=None, timeout_s: int = 900) -> str:
    """Build a Debian-based recipe as a Charliecloud directory image, without Apptainer:
    debootstrap the base (bookworm minbase for `debian:bookworm-*`), copy %files, write the
    %environment to /ch/environment, and run each %post command of `layers` with `ch-run -w`.
    Returns the image's digest (also written to `<dest>.sha256`)."""
    dest = Path(dest)
    if not recipe.base.startswith("debian:bookworm"):
        raise ConfigError(str(recipe.path), "From", recipe.base, "a debian:bookworm-* base for a directory build")
    env = {**os.environ, "USER": os.environ.get("USER") or "root", "DEBIAN_FRONTEND": "noninteractive"}

    def run(argv):
        if log is not None:
            log.write("+ " + shlex.join(argv) + "\n")
            log.flush()
        subprocess.run(argv, check=True, env=env, stdout=log, stderr=subprocess.STDOUT if log else None,
                       timeout=timeout_s)

    if not (dest / "etc" / "debian_version").exists():
        run(["debootstrap", "--variant=minbase", "bookworm", str(dest), mirror])
    # %post runs as real root in a private mount+pid namespace (unshare + chroot): `ch-run -w`
    # maps the caller to root in a single-uid namespace, where dpkg's postinst `groupadd`
    # (openssh-client, libibverbs1) fails with code 10. ch-run then runs the image unprivileged.
    import shutil
    shutil.copy("/etc/resolv.conf", dest / "etc" / "resolv.conf")
    for src, target in recipe.files:
        run(["mkdir", "-p", str(dest / Path(target).parent.relative_to("/"))])
        run(["cp", "-r", str(REPO_ROOT / src), str(dest / Path(target).relative_to("/"))])
    (dest / "ch").mkdir(exist_ok=True)
    (dest / "ch" / "environment").write_text(
        "".join(f"{k}={v}\n" for k, v in recipe.environment.items()))
    # A build machine behind a TLS-intercepting proxy trusts its own CA (PIP_CERT, as here): lend
    # that bundle to pip for the build only; it is removed before the digest is taken.
    host_ca = os.environ.get("PIP_CERT") or os.environ.get("REQUESTS_CA_BUNDLE") or ""
    lent_ca = dest / "tmp" / "exabench-build-ca.crt"
    ca_env = []
    if host_ca and Path(host_ca).is_file():
        shutil.copy(host_ca, lent_ca)
        ca_env = ["PIP_CERT=/tmp/exabench-build-ca.crt"]
    try:
        for cmd in recipe.commands(layers):
            run(["unshare", "--mount", "--pid", "--fork", f"--mount-proc={dest / 'proc'}", "chroot", str(dest),
                 "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
                 "DEBIAN_FRONTEND=noninteractive", *ca_env, "/bin/sh", "-ec", cmd])
    finally:
        lent_ca.unlink(missing_ok=True)
    return write_digest(dest)


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m exabench.containers", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("dockerfiles", help="regenerate containers/<stack>.Dockerfile from the recipes")
    sub.add_parser("lint", help="check every recipe (labels, pins, one command per %%post line)")
    d = sub.add_parser("digest", help="compute an image's digest and record it beside the image")
    d.add_argument("image")
    b = sub.add_parser("build-dir", help="build a Debian-based stack as a Charliecloud directory image")
    b.add_argument("stack")
    b.add_argument("dest")
    b.add_argument("--layers", default="", help="comma-separated %%post layers (default: all)")
    args = ap.parse_args(argv)
    if args.cmd == "dockerfiles":
        for stack in STACKS:
            dockerfile_path(stack).write_text(dockerfile(recipe_path(stack)))
            print(dockerfile_path(stack).relative_to(REPO_ROOT))
    elif args.cmd == "lint":
        problems = [p for stack in STACKS for p in lint_recipe(recipe_path(stack))]
        print("\n".join(problems) or f"{len(STACKS)} recipes: no problems")
        return 1 if problems else 0
    elif args.cmd == "digest":
        print(write_digest(args.image))
    elif args.cmd == "build-dir":
        layers = tuple(x for x in args.layers.split(",") if x) or None
        import sys
        print(build_directory_image(parse_recipe(recipe_path(args.stack)), args.dest, layers, log=sys.stdout))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
