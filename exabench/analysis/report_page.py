"""One self-contained HTML page per campaign (results/<site>/report/index.html): the summary first
(runs, failures, the verdict with how many runs it judged), then every picture the records
supported, embedded as PNG data URIs, and one line for each picture not drawn and why, then the
tables. It loads nothing: the file opens from a disk, a mail or an archive with no network."""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path

from exabench import markdown

STYLE = ("figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}figcaption{font-weight:bold}"
         ".verdict{font-size:120%;font-weight:bold}.failed{color:#b00}")


def _table_rows(text: str) -> list[dict]:
    """The first `|` table of a Markdown page, as dicts by header."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|") and not set(ln) <= set("|-: ")]
    if not lines:
        return []
    header = markdown.split_row(lines[0])
    return [dict(zip(header, markdown.split_row(ln))) for ln in lines[1:]]


def summary_html(summary_md: str, verdicts_md: str | None) -> str:
    """Runs and their outcome (the summary table's last line), each run that did not end ok with
    its error, and the acceptance verdict's counts and headline."""
    lines = [ln for ln in summary_md.strip().splitlines() if ln.strip()]
    out = ["<h2>Summary</h2>", f"<p>{escape(lines[-1] if lines else 'no runs')}</p>"]
    failed = [r for r in _table_rows(summary_md) if r.get("status", "ok") != "ok"]
    if failed:
        out.append('<p class="failed">Runs that did not end ok:</p><ul class="failed">')
        out += [f"<li>{escape(r.get('run', '?'))}: {escape(r['status'])} {escape(r.get('error', ''))}</li>"
                for r in failed]
        out.append("</ul>")
    if verdicts_md is None:
        out.append('<p class="verdict">Verdict: not judged (this site has no references file; '
                   "docs/acceptance.md)</p>")
    else:
        tail = [ln for ln in verdicts_md.strip().splitlines() if ln.strip()][-2:]
        out += [f"<p>{escape(tail[0])}</p>" if len(tail) == 2 else "",
                f'<p class="verdict">Verdict: {escape(tail[-1])}</p>']
    return "\n".join(out)


def pictures_html(indexes: list[Path]) -> str:
    """Each drawn picture of the indexes (plots/index.json, history/pictures.json) as a figure with its
    PNG inline, then what was not drawn and why."""
    entries = [{**e, "dir": index.parent} for index in indexes for e in json.loads(index.read_text())]
    out = ["<h2>Pictures</h2>"]
    for e in (e for e in entries if e["file"]):
        data = base64.b64encode((e["dir"] / e["file"]).read_bytes()).decode()
        out.append(f'<figure id="{escape(e["name"])}"><figcaption>{escape(e["title"])}</figcaption>'
                   f'<img alt="{escape(e["title"])}" src="data:image/png;base64,{data}"></figure>')
    skipped = [e for e in entries if not e["file"]]
    if skipped:
        out.append("<p>Not drawn:</p><ul>")
        out += [f"<li>{escape(e['title'])}: {escape(e['why'])}</li>" for e in skipped]
        out.append("</ul>")
    return "\n".join(out)


def campaign_page(site: str, summary_md: Path, indexes: list[Path], tables: list[Path],
                  verdicts_md: Path | None = None) -> str:
    verdicts = verdicts_md.read_text() if verdicts_md else None
    parts = [f"<h1>exabench campaign: site {escape(site)}</h1>", summary_html(summary_md.read_text(), verdicts),
             pictures_html(indexes), "<h2>Tables</h2>"]
    for table in [summary_md, *tables, *([verdicts_md] if verdicts_md else [])]:
        parts.append(f'<section id="table-{escape(table.stem)}">{markdown.body_html(table.read_text(), 2)}</section>')
    return markdown.page(f"exabench campaign: {site}", "\n".join(parts), STYLE)


def write_campaign_page(site: str, summary_md: str, indexes: list[str], tables: list[str], verdicts_md: str | None,
                        out: str) -> str:
    """Write the page (`indexes`: the pictures' index files); returns a one-line summary for the log."""
    from exabench.io import atomic_write_text

    html = campaign_page(site, Path(summary_md), [Path(i) for i in indexes], [Path(t) for t in tables],
                         Path(verdicts_md) if verdicts_md else None)
    atomic_write_text(out, html)
    return f"campaign page -> {out} ({len(html) // 1024} KiB, opens without network)"
