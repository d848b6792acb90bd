"""What the real-container tests need from the host, said as the reason to skip when it is missing."""

from __future__ import annotations

import shutil
import subprocess


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
