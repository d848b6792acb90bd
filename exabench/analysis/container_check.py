"""The containers the records of a reproduced campaign ran in, checked against the archived site
file (its container.runtime and pinned container.digest) and, when given, the image the user has
now: a record that ran another runtime or another image than those is a difference `exabench
reproduce` refuses (NOT REPRODUCED); records of one stack that ran different images with no pin,
or whose digest was not verified when they started, are warned about."""

from __future__ import annotations

from collections import defaultdict


def _short(digest: str | None) -> str:
    return digest[:19] if digest else "none"


def container_findings(records: list[dict], site_container: dict | None,
                       image: tuple[str, str] | None = None) -> tuple[list[str], list[str], list[str]]:
    """(differences, warnings, summary lines) of the records' `provenance.container` against the
    site file's `container` section (None: no site file to compare with; {}: a native site) and
    `image` ((path, digest) of the image the user has)."""
    site_runtime = None if site_container is None else (site_container.get("runtime") or "none")
    pin = (site_container or {}).get("digest") or None
    differences, warnings = [], []
    by_stack: dict[tuple, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for rec in sorted(records, key=lambda r: r.get("run_id", "")):
        run = rec.get("run_id", "?")
        ran = (rec.get("provenance") or {}).get("container")
        runtime = (ran or {}).get("runtime") or "none"
        digest = (ran or {}).get("digest")
        if site_runtime is not None and runtime != site_runtime:
            differences.append(f"{run}: ran with container runtime {runtime}; the archived site file says "
                               f"container.runtime {site_runtime}")
        if ran is None:
            continue
        by_stack[(runtime, ran.get("stack"))][digest or "none"].append(run)
        if pin and digest != pin:
            differences.append(f"{run}: ran image {ran.get('image')} with digest {digest or 'none'}; the archived "
                               f"site file pins container.digest {pin}")
        if image and digest != image[1]:
            differences.append(f"{run}: ran image digest {digest or 'none'}; the image {image[0]} given to "
                               f"reproduce has {image[1]}")
        if digest and not ran.get("digest_verified"):
            warnings.append(f"{run}: image digest {_short(digest)} was not checked against the image when the "
                            "run started (the image was not on the machine that rendered it)")
    summary = []
    for (runtime, stack), digests in sorted(by_stack.items(), key=lambda kv: str(kv[0])):
        for digest, runs in sorted(digests.items()):
            summary.append(f"{runtime} {stack or ''} image {digest}: {len(runs)} run(s)".replace("  ", " "))
        if len(digests) > 1:
            warnings.append(f"runs of stack {stack} ran {len(digests)} different images ("
                            + "; ".join(f"{_short(d)}: {', '.join(r)}" for d, r in sorted(digests.items()))
                            + "): the image changed during the campaign; their results may not compare")
    return differences, warnings, summary
