"""OpenFold's processed data set on disk, in the layout the MLCommons HPC reference's
preprocessing writes and its training reads (openfold/scripts/preprocess_pdb_mmcif.py,
preprocess_open_protein_set.py; openfold/openfold/datasets.py, data/*.py):

    pdb_mmcif/processed/chains.csv        one row per chain: pdb_chain_id ({pdb_id}_{author chain}),
                                          pdb_id, author_chain_id, mmcif_chain_ids, release_date,
                                          resolution, pdb_cluster_id, sequence_length, sequence
    pdb_mmcif/processed/dicts/<pdb_id[1:3]>   a pickled {pdb_id: mmCIF dict}; the dict's "sequences"
                                          and "atoms" are keyed by author chain id, atoms holding
                                          zlib-compressed all_atom_positions (float32 [L, 37, 3])
                                          and all_atom_mask (bool [L, 37]) as (bytes, shape)
    pdb_mmcif/processed/obsolete.dat      obsolete PDB ids and their replacements
    open_protein_set/processed/pdb_alignments/<shard>.db   each chain's alignment files back to back
    open_protein_set/processed/pdb_alignments/super.index  JSON: pdb_chain_id -> {"db": shard,
                                          "files": [[name, start, size], ...]}

A chain's alignment files are uniref90_hits.a3m, bfd_uniclust_hits.a3m, mgnify_hits.a3m (its
MSA) and pdb70_hits.hhr (its template hits, which name template chains of the mmCIF dicts).

This module writes and reads that layout; exabench.data.openfold turns what it reads into the
raw features (aatype, msa, deletion_matrix, template_*, all_atom_*, resolution).
"""

from __future__ import annotations

import csv
import datetime
import functools
import io
import json
import os
import pickle
import re
import tempfile
import zlib
from pathlib import Path

import numpy as np

from exabench.data.tfrecord import CorruptFileError

MMCIF_DIR = Path("pdb_mmcif") / "processed"
ALIGNMENTS_DIR = Path("open_protein_set") / "processed" / "pdb_alignments"
CHAINS_CSV = MMCIF_DIR / "chains.csv"
SUPER_INDEX = ALIGNMENTS_DIR / "super.index"
CHAIN_COLUMNS = (
    "pdb_chain_id",
    "pdb_id",
    "author_chain_id",
    "mmcif_chain_ids",
    "release_date",
    "resolution",
    "pdb_cluster_id",
    "sequence_length",
    "sequence",
)
A3M_FILES = ("uniref90_hits.a3m", "bfd_uniclust_hits.a3m", "mgnify_hits.a3m")  # read in this order
HHR_FILE = "pdb70_hits.hhr"
# training chains: released up to the reference's cutoff; validation chains: released in its
# CAMEO window, at most 700 residues (the reference takes the CAMEO targets of that window, a
# list this set does not carry)
TRAIN_MAX_PDB_RELEASE_DATE = "2021-09-16"
VAL_CAMEO_DATES = ("2021-09-17", "2021-12-11")
VAL_MAX_SEQUENCE_LENGTH = 700
SPLIT_DATES = {"train": ("0000-01-01", TRAIN_MAX_PDB_RELEASE_DATE), "validation": VAL_CAMEO_DATES}
# the reference's template prefilter (templates.py, datasets.py): a template must be released
# TEMPLATE_DAYS_BEFORE_RELEASE before its query; aligned columns over query length must exceed
# MIN_ALIGN_RATIO; a hit that is a subsequence of the query covering more than
# MAX_SUBSEQUENCE_RATIO of it is a duplicate; hits shorter than MIN_TEMPLATE_LENGTH are dropped
TEMPLATE_DAYS_BEFORE_RELEASE = 60
MIN_ALIGN_RATIO, MAX_SUBSEQUENCE_RATIO, MIN_TEMPLATE_LENGTH = 0.1, 0.95, 10
LAYOUT = (
    f"{CHAINS_CSV}, {MMCIF_DIR / 'dicts'}/<pdb_id[1:3]>, {MMCIF_DIR / 'obsolete.dat'}, "
    f"{SUPER_INDEX} and its *.db shards (docs/mlperf-hpc.md, 'Data on disk')"
)

RESTYPES = "ARNDCQEGHILKMFPSTWYV"  # AlphaFold's order of the residue types
UNKNOWN, GAP = 20, 21  # X, and the gap of an alignment
# a3m letters to residue indices (AlphaFold's order, X unknown, - gap); B, Z, U count as D, E, C
_LETTER_TO_ID = np.full(256, UNKNOWN, np.int32)
for _i, _a in enumerate(RESTYPES):
    _LETTER_TO_ID[ord(_a)] = _i
for _a, _b in (("B", "D"), ("Z", "E"), ("U", "C")):
    _LETTER_TO_ID[ord(_a)] = RESTYPES.index(_b)
_LETTER_TO_ID[ord("-")] = GAP
_ID_TO_LETTER = np.frombuffer((RESTYPES + "X-").encode(), np.uint8)


def sequence_string(aatype) -> str:
    return _ID_TO_LETTER[np.asarray(aatype)].tobytes().decode()


def sequence_ids(sequence: str) -> np.ndarray:
    return _LETTER_TO_ID[np.frombuffer(sequence.encode(), np.uint8)]


# ---- writing ---------------------------------------------------------------------------------
def mmcif_dict(pdb_id: str, release_date: str, resolution: float, chains: dict) -> dict:
    """The reference's processed mmCIF dict of one entry whose chains {author chain id: (aatype,
    all_atom_positions [L, 37, 3], all_atom_mask [L, 37])} are each their own entity."""
    atoms, sequences = {}, {}
    for chain_id, (aatype, pos, mask) in chains.items():
        sequences[chain_id] = sequence_string(aatype)
        pos, mask = np.ascontiguousarray(pos, np.float32), np.ascontiguousarray(mask, bool)
        atoms[chain_id] = {
            "all_atom_positions": (zlib.compress(pos.tobytes()), pos.shape),
            "all_atom_mask": (zlib.compress(mask.tobytes()), mask.shape),
        }
    return {
        "pdb_id": pdb_id,
        "exptl_method": "X-RAY DIFFRACTION",
        "release_date": release_date,
        "resolution": float(resolution),
        "author_chain_ids": list(chains),
        "entity_id_to_mmcif_chain_ids": {str(i + 1): [c] for i, c in enumerate(chains)},
        "mmcif_chain_id_to_author_chain_id": {c: c for c in chains},
        "sequences": sequences,
        "atoms": atoms,
    }


def a3m_text(names: list[str], msa: np.ndarray, deletions: np.ndarray) -> str:
    """a3m: each row's aligned residues upper case (or -), preceded at column j by deletions[j]
    lower-case letters (the residues the row has there that the query has not)."""
    out = []
    for name, row, dels in zip(names, msa, deletions.astype(np.int64)):
        at = np.arange(len(row)) + np.cumsum(dels)  # where each column's residue lands
        text = np.full(len(row) + int(dels.sum()), ord("x"), np.uint8)
        text[at] = _ID_TO_LETTER[row]
        out.append(f">{name}\n{text.tobytes().decode()}\n")
    return "".join(out)


def hhr_text(query_name: str, query: str, hits: list[tuple[str, str, float]]) -> str:
    """An HHsearch result (.hhr) of hits (template pdb_chain_id, aligned template sequence,
    sum of probabilities), each aligned residue for residue to the whole query."""
    n = len(query)
    lines = [f"Query         {query_name}", f"Match_columns {n}", "No_of_seqs    1 out of 1", ""]
    lines += [" No Hit                             Prob E-value P-value  Score    SS Cols Query HMM  Template HMM"]
    for i, (name, _, _) in enumerate(hits, 1):
        lines.append(f"{i:3d} {name:<30s} 100.0 1e-30 1e-35  200.0   0.0 {n:4d} 1-{n} 1-{n} ({n})")
    lines.append("")
    for i, (name, seq, sum_probs) in enumerate(hits, 1):
        same = sum(a == b for a, b in zip(query, seq))
        lines += [
            f"No {i}",
            f">{name} synthetic template",
            f"Probab=100.00  E-value=1e-30  Score=200.00  Aligned_cols={n}  Identities={100 * same // n}%  "
            f"Similarity=1.000  Sum_probs={sum_probs!r}  Template_Neff=1.000",
            "",
        ]
        for s in range(0, n, 80):  # blocks of 80 columns, names in the first 17 characters
            e = min(s + 80, n)
            lines += [
                f"Q {query_name[:14]:<14s} {s + 1:4d} {query[s:e]} {e:4d} ({n})",
                f"T {name[:14]:<14s} {s + 1:4d} {seq[s:e]} {e:4d} ({n})",
                "",
            ]
    return "\n".join(lines) + "\n"


class SetWriter:
    """Writes the layout under root as entries and alignments come, holding little in memory:
    alignment files go straight to their shard, and a dicts file is written once the entries
    stop coming to it (entries must come grouped by pdb_id[1:3]). Everything is written to
    temp files renamed into place on close, chains.csv last (its presence marks a complete
    set); on an error nothing is left behind."""

    def __init__(self, root, shards: int = 4):
        self.root = Path(root)
        self.rows: list[dict] = []
        self.index: dict[str, dict] = {}
        self.done: list[tuple[str, Path]] = []  # (temp file, final path)
        self.group_key, self.group, self.groups_seen = None, {}, set()
        (self.root / ALIGNMENTS_DIR).mkdir(parents=True, exist_ok=True)
        self.shards = [self._temp(self.root / ALIGNMENTS_DIR / f"{s}.db") for s in range(shards)]
        self.sizes = [0] * shards

    def _temp(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        self.done.append((tmp, path))
        return os.fdopen(fd, "wb")

    def _flush_group(self) -> None:
        if self.group:
            with self._temp(self.root / MMCIF_DIR / "dicts" / self.group_key) as f:
                pickle.dump(self.group, f)
            self.groups_seen.add(self.group_key)
        self.group = {}

    def add_entry(self, entry: dict) -> None:
        """An mmCIF dict (mmcif_dict) and a chains.csv row per chain of it."""
        key = entry["pdb_id"][1:3]
        if key != self.group_key:
            self._flush_group()
            if key in self.groups_seen:
                raise ValueError(f"entry {entry['pdb_id']} comes after its dicts file {key} was written")
            self.group_key = key
        self.group[entry["pdb_id"]] = entry
        for c in entry["author_chain_ids"]:
            self.rows.append(
                {
                    "pdb_chain_id": f"{entry['pdb_id']}_{c}",
                    "pdb_id": entry["pdb_id"],
                    "author_chain_id": c,
                    "mmcif_chain_ids": c,
                    "release_date": entry["release_date"],
                    "resolution": repr(entry["resolution"]),
                    "pdb_cluster_id": -1,
                    "sequence_length": len(entry["sequences"][c]),
                    "sequence": entry["sequences"][c],
                }
            )

    def add_alignments(self, pdb_chain_id: str, files: dict[str, str]) -> None:
        """The chain's alignment files {name: text}, back to back in shard (chains in turn)."""
        shard = len(self.index) % len(self.shards)
        entry = {"db": f"{shard}.db", "files": []}
        for name, text in files.items():
            data = text.encode()
            self.shards[shard].write(data)
            entry["files"].append([name, self.sizes[shard], len(data)])
            self.sizes[shard] += len(data)
        self.index[pdb_chain_id] = entry

    def close(self) -> None:
        self._flush_group()
        for f in self.shards:
            f.close()
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=CHAIN_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        for path, text in (
            (SUPER_INDEX, json.dumps(self.index)),
            (MMCIF_DIR / "obsolete.dat", " LIST OF OBSOLETE COORDINATE ENTRIES AND SUCCESSORS\n"),
            (CHAINS_CSV, out.getvalue()),
        ):
            with self._temp(self.root / path) as f:
                f.write(text.encode())
        for tmp, path in self.done:
            os.replace(tmp, path)
        self.done = []

    def abort(self) -> None:
        for f in self.shards:
            f.close()
        for tmp, _ in self.done:
            Path(tmp).unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, *_):
        if kind is None:
            self.close()
        else:
            self.abort()


# ---- reading ---------------------------------------------------------------------------------
def _cached(files: int):
    """load(path) once per file version (path, modification time) for the last `files` files:
    a set written again is read again."""

    def wrap(load):
        cached = functools.lru_cache(maxsize=files)(lambda path, _mtime: load(path))

        def get(path: Path):
            try:
                mtime = path.stat().st_mtime_ns
            except OSError as exc:
                raise CorruptFileError(path, f"missing ({exc.strerror})") from None
            return cached(path, mtime)

        return get

    return wrap


@_cached(4)
def _chains_csv(path: Path) -> dict[str, dict]:
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CorruptFileError(path, f"cannot read the chain table ({exc})") from None
    missing = set(CHAIN_COLUMNS) - set(rows[0] if rows else CHAIN_COLUMNS)
    if missing:
        raise CorruptFileError(path, f"lacks the columns {sorted(missing)}; want {', '.join(CHAIN_COLUMNS)}")
    for r in rows:
        if not (r["sequence_length"] or "").isdigit() or not re.fullmatch(r"\d{4}-\d\d-\d\d", r["release_date"] or ""):
            raise CorruptFileError(
                path,
                f"chain {r['pdb_chain_id']}: sequence_length {r['sequence_length']!r}, release_date "
                f"{r['release_date']!r}; want a count and YYYY-MM-DD",
            )
    return {r["pdb_chain_id"]: r for r in rows}


def chains_table(root) -> dict[str, dict]:
    """chains.csv as {pdb_chain_id: row}."""
    return _chains_csv(Path(root) / CHAINS_CSV)


def _index_entry_ok(entry) -> bool:
    files = entry.get("files") if isinstance(entry, dict) else None
    return (
        isinstance(entry.get("db") if isinstance(entry, dict) else None, str)
        and isinstance(files, list)
        and all(isinstance(f, list) and len(f) == 3 and isinstance(f[0], str) for f in files)
        and all(isinstance(f[1], int) and isinstance(f[2], int) for f in files)
    )


@_cached(4)
def _super_index(path: Path) -> dict:
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CorruptFileError(path, f"not JSON ({exc})") from None
    if not isinstance(index, dict) or not all(_index_entry_ok(e) for e in index.values()):
        raise CorruptFileError(path, "not an alignment index {pdb_chain_id: {db, files: [[name, start, size]]}}")
    return index


def super_index(root) -> dict:
    return _super_index(Path(root) / SUPER_INDEX)


def require_files(root, pdb_chain_ids: list[str]) -> None:
    """A CorruptFileError naming the first mmCIF dicts file or alignment shard these chains need
    that is not there (found before a run starts rather than when its chain comes up)."""
    table, index = chains_table(root), super_index(root)
    needed = {Path(root) / MMCIF_DIR / "dicts" / table[c]["pdb_id"][1:3] for c in pdb_chain_ids}
    needed |= {Path(root) / ALIGNMENTS_DIR / index[c]["db"] for c in pdb_chain_ids}
    for path in sorted(needed):
        if not path.is_file():
            raise CorruptFileError(path, "missing")


def read_alignments(root, pdb_chain_id: str) -> dict[str, str]:
    """The chain's alignment files {name: text}, read from its shard as super.index places them."""
    entry = super_index(root).get(pdb_chain_id)
    if entry is None:
        raise CorruptFileError(Path(root) / SUPER_INDEX, f"has no entry for chain {pdb_chain_id!r}")
    path = Path(root) / ALIGNMENTS_DIR / entry["db"]
    out = {}
    try:
        with open(path, "rb") as f:
            for name, start, size in entry["files"]:
                f.seek(start)
                data = f.read(size)
                if len(data) != size:
                    raise CorruptFileError(
                        path, f"{name} of {pdb_chain_id} ends at {start + len(data)}, not {start + size}"
                    )
                out[name] = data.decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"cannot read the alignments of {pdb_chain_id}: {exc}") from None
    return out


class _PlainValues(pickle.Unpickler):
    """An mmCIF dicts file holds plain values only (str, numbers, bytes, tuples, lists, dicts), which
    a pickle encodes without naming any class or function: one that names one is refused. A data set
    sits in a shared project space, and a planted file naming os.system (say) ran it in every rank."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"names {module}.{name}; an mmCIF dicts file holds plain values only; refused")


@_cached(16)  # a real set has some thousand such files of many entries: keep a few
def _dicts_file(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            dicts = _PlainValues(f).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, AttributeError, ImportError) as exc:
        raise CorruptFileError(path, f"not a pickled {{pdb_id: mmCIF dict}} file: {exc}") from None
    if not isinstance(dicts, dict):
        raise CorruptFileError(path, f"holds a {type(dicts).__name__}, not a {{pdb_id: mmCIF dict}}")
    return dicts


def read_chain_atoms(root, pdb_id: str, chain_id: str) -> tuple[dict, str, np.ndarray, np.ndarray]:
    """(mmCIF dict, sequence, all_atom_positions float32 [L, 37, 3], all_atom_mask bool [L, 37])."""
    path = Path(root) / MMCIF_DIR / "dicts" / pdb_id[1:3]
    entry = _dicts_file(path).get(pdb_id)
    try:
        sequence = entry["sequences"][chain_id]
        (pos_z, pos_shape), (mask_z, mask_shape) = (
            entry["atoms"][chain_id][k] for k in ("all_atom_positions", "all_atom_mask")
        )
        pos = np.frombuffer(zlib.decompress(pos_z), np.float32).reshape(pos_shape)
        mask = np.frombuffer(zlib.decompress(mask_z), bool).reshape(mask_shape)
    except (TypeError, KeyError, ValueError, zlib.error) as exc:
        raise CorruptFileError(
            path, f"no mmCIF dict of {pdb_id} chain {chain_id} with sequences and atoms ({exc!r})"
        ) from None
    if pos.shape != (len(sequence), 37, 3) or mask.shape != (len(sequence), 37):
        raise CorruptFileError(
            path, f"{pdb_id}_{chain_id}: atoms {pos.shape}, {mask.shape} for {len(sequence)} residues"
        )
    return entry, sequence, pos, mask


def parse_a3m(text: str) -> tuple[list[str], np.ndarray]:
    """Aligned sequences (lower case removed) and deletions (lower-case letters before each
    column), as the reference's parser reads them."""
    rows, names = [], []
    for line in text.splitlines():
        if line.startswith(">"):
            names.append(line)
            rows.append([])
        elif line and not line.startswith("#") and rows:
            rows[-1].append(line.strip())
    seqs, dels = [], []
    for parts in rows:
        b = np.frombuffer("".join(parts).encode(), np.uint8)
        lower = (b >= ord("a")) & (b <= ord("z"))
        before = np.cumsum(lower)[~lower]  # lower-case letters up to each column
        dels.append(np.diff(before, prepend=0))
        seqs.append(b[~lower].tobytes().decode())
    return seqs, dels


def parse_hhr(text: str) -> list[dict]:
    """Hits of an .hhr file: name, sum_probs, aligned query and hit strings and their residue
    indices (-1 at gaps), as the reference's parser reads them."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("No ")] + [len(lines)]
    hits = []
    for a, b in zip(starts, starts[1:]):
        block = lines[a:b]
        m = re.search(r"Aligned_cols=(\S+).*Sum_probs=(\S+)", block[2]) if len(block) > 2 else None
        if m is None or not block[1].startswith(">"):
            raise ValueError(f"hit block at line {a + 1} lacks its >name and Probab ... Sum_probs= lines")
        hit = {
            "name": block[1][1:].split()[0],
            "aligned_cols": int(float(m.group(1))),
            "sum_probs": float(m.group(2)),
            "query": "",
            "hit": "",
        }
        idx = {"query": [], "hit": []}
        for line in block[3:]:
            kind = "query" if line.startswith("Q ") else "hit" if line.startswith("T ") else None
            if kind is None or line[2:].startswith(("ss_dssp", "ss_pred", "Consensus")):
                continue
            g = re.match(r"[\t ]*([0-9]*) ([A-Z-]*)[\t ]*([0-9]*) \([0-9]*\)", line[17:])
            if g is None:
                raise ValueError(f"cannot read the alignment line {line!r}")
            at = int(g.group(1)) - 1
            for c in g.group(2):
                idx[kind].append(-1 if c == "-" else at)
                at += c != "-"
            hit[kind] += g.group(2)
        hit["query_index"], hit["hit_index"] = np.array(idx["query"]), np.array(idx["hit"])
        hits.append(hit)
    return hits


@_cached(4)
def _obsolete(path: Path) -> dict[str, str]:
    """obsolete.dat: {obsolete pdb_id: its successor} from its 'OBSLTE  date  old  new' lines."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"cannot read the obsolete entries: {exc}") from None
    return {
        line[20:24].lower(): line[29:33].lower()
        for line in map(str.strip, lines)
        if line.startswith("OBSLTE") and len(line) > 30
    }


def acceptable_hit(hit: dict, table: dict, obsolete: dict, query: str, query_pdb_id: str, latest) -> dict | None:
    """The hit's chains.csv row if the reference would keep it: a chain of the set (obsolete ids
    replaced), not of the query's entry, released by `latest`, aligned over more than 10% of
    the query, not a copy of (most of) the query, and at least 10 residues long."""
    m = re.match(r"[a-zA-Z\d]{4}_[a-zA-Z0-9.]+", hit["name"])
    if m is None:
        return None
    pdb_id, chain = m.group(0).split("_")
    if f"{pdb_id}_{chain}" not in table:
        pdb_id = obsolete.get(pdb_id.lower(), pdb_id)
    row = table.get(f"{pdb_id}_{chain}")
    sequence = hit["hit"].replace("-", "")
    if (
        row is None
        or pdb_id.lower() == query_pdb_id.lower()
        or datetime.date.fromisoformat(row["release_date"]) > latest
        or hit["aligned_cols"] / len(query) <= MIN_ALIGN_RATIO
        or (sequence in query and len(sequence) / len(query) > MAX_SUBSEQUENCE_RATIO)
        or len(sequence) < MIN_TEMPLATE_LENGTH
    ):
        return None
    return row


def template_hits(root, hits: list[dict], query: str, query_pdb_id: str, release_date: str, limit: int) -> list:
    """(aatype, positions, mask, sum_probs) of up to `limit` hits, best sum_probs first, among
    those the reference's prefilter keeps (acceptable_hit); a hit whose residues are not its
    chain's mmCIF sequence is skipped (the reference realigns it first: not implemented)."""
    table = chains_table(root)
    obsolete = _obsolete(Path(root) / MMCIF_DIR / "obsolete.dat")
    latest = datetime.date.fromisoformat(release_date) - datetime.timedelta(days=TEMPLATE_DAYS_BEFORE_RELEASE)
    kept = [(h, row) for h in hits if (row := acceptable_hit(h, table, obsolete, query, query_pdb_id, latest))]
    out = []
    for hit, row in sorted(kept, key=lambda k: -k[0]["sum_probs"]):
        _, sequence, pos, mask = read_chain_atoms(root, row["pdb_id"], row["author_chain_id"])
        n = len(query)
        t_aatype, t_pos, t_mask = np.full(n, GAP, np.int32), np.zeros((n, 37, 3), np.float32), np.zeros((n, 37), bool)
        pairs = [(q, h, c) for q, h, c in zip(hit["query_index"], hit["hit_index"], hit["hit"]) if q >= 0 and h >= 0]
        if any(h >= len(sequence) or sequence[h] != c for _, h, c in pairs):
            continue
        for q, h, c in pairs:
            t_aatype[q], t_pos[q], t_mask[q] = sequence_ids(c)[0], pos[h], mask[h]
        out.append((t_aatype, t_pos, t_mask, np.float32(hit["sum_probs"])))
        if len(out) == limit:
            break
    return out
