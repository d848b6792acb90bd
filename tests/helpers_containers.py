"""What the real-container tests need from the host, said as the reason to skip when it is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def missing_tools_or_userns(tools: dict[str, str]) -> str | None:
    """The first of `tools` (command: Debian package) not installed, or user namespaces being
    unavailable (ch-run needs them), as a skip reason; None when the host has all of it."""
    for tool, pkg in tools.items():
        if not shutil.which(tool):
            return f"{tool} not installed (apt-get install -y {pkg})"
    try:
        subprocess.run(["unshare", "-U", "-r", "true"], check=True, timeout=30, capture_output=True)
    except (subprocess.SubprocessError, OSError) as exc:
        return f"user namespaces unavailable (unshare -U -r true: {exc})"
    return None


def shell_rootfs(root: Path) -> Path:
    """A root file system holding the host's /bin/sh and its libraries, the files ch-run binds
    over (/etc/passwd, /etc/group, hosts, resolv.conf) and /ch/environment (bare --set-env reads it)."""
    sh = Path(os.path.realpath(shutil.which("sh")))
    for d in ("ch", "bin", "dev", "proc", "sys", "tmp", "etc", "home", "root", "var/tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(sh, root / "bin" / "sh")
    ldd = subprocess.run(["ldd", str(sh)], capture_output=True, text=True, timeout=30).stdout
    for lib in {w for line in ldd.splitlines() for w in line.split() if w.startswith("/")}:
        dest = root / lib.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(lib), dest)
    for name in ("passwd", "group", "hosts", "resolv.conf"):
        (root / "etc" / name).write_text("")
    (root / "ch" / "environment").write_text("PATH=/bin\n")
    return root
