"""OpenFold (AlphaFold2) training data: synthetic protein chains on disk and the loader that
turns one chain into the model's features, with the shapes and dtypes of the MLCommons HPC
reference's processed features (openfold/openfold/config.py FEATURE_SHAPES).

On disk, a set is the reference's processed layout (exabench.data.openfold_disk): each chain's
atoms in its mmCIF dict, its MSA and template hits in alignment files; read_raw turns them into
the reference's raw features: aatype, residue_index, msa, deletion_matrix (primary),
template_aatype, template_all_atom_positions, template_all_atom_mask, template_sum_probs
(templates), all_atom_positions, all_atom_mask (atom37: every heavy atom), resolution,
is_distillation (supervised).

The loader does what the reference's feature processing does at training time. On the whole
chain, from its atoms: atom14 ground truth and its symmetric alternative, rigid-group frames
and their alternatives, backbone frames, torsion angles (chi angles for the loss, template
torsions for the model), pseudo-beta. Then a random contiguous crop, the query plus a random
choice of cluster centres, the rest as extra MSA assigned to their nearest centre (cluster
profile and deletion mean), BERT-style masking of the clustered MSA (15%: 10% uniform, 10%
profile, 10% unchanged, 70% mask token), msa_feat (49 channels), target_feat (22).

The residue geometry belongs to the network's package (exabench.models.alphafold.atoms and
.residues), which this stage may not import: generate() and process() take that module as
their `atoms` argument.

Synthetic chains are learnable: the sequence is helices, strands and loops drawn from residue
classes, and each residue's class sets the rigid step from its C-alpha frame to the next
(ideal alpha-helix and beta-strand screws, fixed loop turns) with a little noise; psi and the
chi angles follow a preferred value per residue type, with noise, and place every heavy atom
(literature geometry, plus 0.03 A of noise off the backbone); homologs in the MSA are mutated
copies of the query; templates are noisy copies of the structure built for their own
residue types.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from exabench.data import openfold_disk as disk
from exabench.data.tfrecord import CorruptFileError

RESTYPES, GAP = disk.RESTYPES, disk.GAP  # AlphaFold's order; 20 = X (unknown), 21 = gap
MASK_TOKEN, MSA_CLASSES = 22, 23  # the BERT mask token the loader puts into MSA rows
GLYCINE = RESTYPES.index("G")
ATOM_TYPES = 37  # atom37: N, CA, C, CB, O, ...
RAW_KEYS = (
    "aatype",
    "residue_index",
    "msa",
    "deletion_matrix",
    "template_aatype",
    "template_all_atom_positions",
    "template_all_atom_mask",
    "template_sum_probs",
    "all_atom_positions",
    "all_atom_mask",
    "resolution",
    "is_distillation",
)
SPLITS = ("train", "validation")


def _rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    """Rotation matrix about a unit axis (Rodrigues)."""
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


def _screw(axis, angle_deg: float, rise: float, ca_step: float = 3.8) -> tuple[np.ndarray, np.ndarray]:
    """The constant step (rotation, translation, in the current C-alpha frame) whose repetition
    traces a helix about `axis` turning angle_deg and rising `rise` A per residue, with C-alphas
    ca_step A apart."""
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    perp = np.cross(axis, [0.0, 0.0, 1.0])
    perp /= np.linalg.norm(perp)
    return _rotation(axis, np.deg2rad(angle_deg)), rise * axis + np.sqrt(ca_step**2 - rise**2) * perp


# Secondary structure is written in the sequence: residues of a class take that class's step.
# alpha helix: 100 degrees and 1.5 A per residue; beta strand: nearly 180 degrees and 3.3 A;
# loop residues each have a fixed turn of their own.
HELIX, STRAND, LOOP = "AELMQKRH", "VIYFWTC", "GPSND"
STEPS = {
    **{aa: _screw((1.0, 0.3, 0.2), 100.0, 1.5) for aa in HELIX},
    **{aa: _screw((1.0, -0.2, 0.1), 170.0, 3.3) for aa in STRAND},
    **{
        aa: _screw(axis, angle, rise)
        for aa, axis, angle, rise in zip(
            LOOP,
            ((0.2, 1.0, 0.3), (0.5, 0.2, 1.0), (1.0, 1.0, 0.0), (0.1, 0.4, 1.0), (0.7, -0.6, 0.3)),
            (60.0, 80.0, 120.0, 45.0, 140.0),
            (2.0, 2.5, 1.0, 3.0, 1.8),
        )
    },
}


def synthetic_sequence(rng: np.random.Generator, length: int) -> np.ndarray:
    """Helices (6-10 residues) and strands (4-7) separated by 1-3 loop residues."""
    seq: list[str] = []
    while len(seq) < length:
        if rng.random() < 0.5:
            seq += list(rng.choice(list(HELIX), int(rng.integers(6, 11))))
        else:
            seq += list(rng.choice(list(STRAND), int(rng.integers(4, 8))))
        seq += list(rng.choice(list(LOOP), int(rng.integers(1, 4))))
    return np.array([RESTYPES.index(a) for a in seq[:length]])


# psi by secondary structure (degrees): alpha helix, beta strand, loop
PSI = {**dict.fromkeys(HELIX, -47.0), **dict.fromkeys(STRAND, 130.0), **dict.fromkeys(LOOP, 150.0)}


def torch_call(fn, *arrays, **kwargs) -> dict | tuple:
    """Call a torch function of the atoms module on numpy arrays (float64); numpy back."""
    import torch

    out = fn(
        *(torch.from_numpy(np.asarray(a, np.int64 if a.dtype.kind in "iu" else np.float64)) for a in arrays), **kwargs
    )
    return {k: v.numpy() for k, v in out.items()} if isinstance(out, dict) else tuple(v.numpy() for v in out)


def backbone_frames(aatype: np.ndarray, wobble: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each residue's backbone frame (rotation [L, 3, 3], C-alpha [L, 3]): every step is its
    residue class's, perturbed by the rotation vector wobble[i] (radians)."""
    rots, transs = np.zeros((len(aatype), 3, 3)), np.zeros((len(aatype), 3))
    rot, trans = np.eye(3), np.zeros(3)
    for i, a in enumerate(aatype):
        rots[i], transs[i] = rot, trans
        step_rot, step = STEPS[RESTYPES[a]]
        trans = trans + rot @ step
        angle = np.linalg.norm(wobble[i])
        rot = rot @ step_rot @ (_rotation(wobble[i] / angle, angle) if angle > 0 else np.eye(3))
    return rots, transs


def synthetic_torsions(rng: np.random.Generator, aatype: np.ndarray) -> np.ndarray:
    """(sin, cos) [L, 7, 2] of omega, phi, psi and chi1-4: psi by secondary structure, each chi a
    preferred rotamer per residue type (-60, 180 or 60 degrees), all with 0.2 rad of noise
    (omega and phi move no heavy atom)."""
    angles = np.zeros((len(aatype), 7))
    angles[:, 2] = np.deg2rad([PSI[RESTYPES[a]] for a in aatype])
    angles[:, 3:] = np.deg2rad(np.array([-60.0, 180.0, 60.0]))[(aatype[:, None] + np.arange(4)) % 3]
    angles[:, 2:] += rng.normal(0, 0.2, (len(aatype), 5))
    return np.stack([np.sin(angles), np.cos(angles)], -1)


def build_atoms(rng, atoms, aatype, rot, trans, torsions, noise: float = 0.03) -> tuple[np.ndarray, np.ndarray]:
    """atom37 positions and mask of residues `aatype` with these backbone frames and torsions,
    with `noise` A off the backbone (N, CA and C stay on their frame)."""
    pos, mask = torch_call(atoms.build_atom37, aatype, rot, trans, torsions)
    jitter = rng.normal(0, noise, pos.shape)
    jitter[:, :3] = 0.0
    return ((pos + jitter) * mask[..., None]).astype(np.float32), mask.astype(np.float32)


def synthetic_chain(rng: np.random.Generator, atoms, aatype: np.ndarray, wobble: np.ndarray) -> dict:
    """Every heavy atom (atom37) of a chain of `aatype` whose steps are perturbed by `wobble`."""
    rot, trans = backbone_frames(aatype, wobble)
    torsions = synthetic_torsions(rng, aatype)
    pos, mask = build_atoms(rng, atoms, aatype, rot, trans, torsions)
    return {
        "aatype": aatype,
        "all_atom_positions": pos,
        "all_atom_mask": mask,
        "frames": (rot, trans),
        "torsions": torsions,
    }


def homolog(
    rng: np.random.Generator,
    aatype: np.ndarray,
    wobble: np.ndarray,
    mutation_rate: float = 0.2,
    extra_wobble: float = 0.02,
) -> tuple[np.ndarray, np.ndarray]:
    """A family member: helix and strand residues mutated within their class (so the secondary
    structure stays), loop residues kept (their turns set the fold), every step perturbed a
    little more."""
    mutated = aatype.copy()
    for i in np.flatnonzero(rng.random(len(aatype)) < mutation_rate):
        cls = next(c for c in (HELIX, STRAND, LOOP) if RESTYPES[aatype[i]] in c)
        if cls != LOOP:
            mutated[i] = RESTYPES.index(rng.choice(list(cls)))
    return mutated, wobble + rng.normal(0, extra_wobble, wobble.shape)


def _distinct_rows(msa: np.ndarray) -> None:
    """Change, in place and without a draw, one residue at a time of a row that repeats an
    earlier one until it does not: the reference's loader keeps only the first of equal rows."""
    seen: set[bytes] = set()
    for r, row in enumerate(msa):
        col = r % msa.shape[1]
        while row.tobytes() in seen:
            row[col] = (row[col] + 1) % 20
            col = (col + 1) % msa.shape[1]
        seen.add(row.tobytes())


def synthetic_features(
    rng: np.random.Generator, atoms, aatype: np.ndarray, wobble: np.ndarray, msa_depth: int, templates: int
) -> dict:
    """Raw features (RAW_KEYS) of one synthetic chain of `aatype` with step perturbations `wobble`."""
    chain = synthetic_chain(rng, atoms, aatype, wobble)
    length = len(aatype)
    rates = rng.uniform(0.05, 0.6, (msa_depth - 1, 1))
    mutated = rng.random((msa_depth - 1, length)) < rates
    homologs = np.where(mutated, rng.integers(0, 20, (msa_depth - 1, length)), aatype)
    homologs = np.where(rng.random(homologs.shape) < 0.05, GAP, homologs)
    msa = np.concatenate([aatype[None], homologs]).astype(np.int32)
    _distinct_rows(msa)
    deletions = (rng.random(msa.shape) < 0.03) * rng.integers(1, 6, msa.shape)
    deletions[0] = 0
    # templates: the structure built for the template's residues (30% mutated) with 0.3 rad of
    # torsion noise, each residue shifted by 1 A
    t_aatype = np.where(rng.random((templates, length)) < 0.3, rng.integers(0, 20, (templates, length)), aatype)
    # a template identical to the query is a duplicate the reference's template prefilter drops:
    # one residue changed keeps it (no draw, so the rest of the set is unchanged)
    t_aatype[(t_aatype == aatype).all(1), 0] = (aatype[0] + 1) % 20
    t_pos, t_mask = [], []
    for t in range(templates):
        torsions = chain["torsions"] + rng.normal(0, 0.3, chain["torsions"].shape)
        torsions /= np.linalg.norm(torsions, axis=-1, keepdims=True)
        pos, mask = build_atoms(rng, atoms, t_aatype[t], *chain["frames"], torsions)
        t_pos.append((pos + rng.normal(0, 1.0, (length, 1, 3))) * mask[..., None])
        t_mask.append(mask)
    t_pos, t_mask = np.stack(t_pos).astype(np.float32), np.stack(t_mask)
    # best hits first, as the reference ranks them (nothing downstream reads the values)
    sum_probs = np.sort(rng.uniform(50, 200, (templates, 1)), axis=0)[::-1]
    return {
        "aatype": aatype.astype(np.int32),
        "residue_index": np.arange(length, dtype=np.int32),
        "msa": msa,
        "deletion_matrix": deletions.astype(np.float32),
        "template_aatype": t_aatype.astype(np.int32),
        "template_all_atom_positions": t_pos,
        "template_all_atom_mask": t_mask,
        "template_sum_probs": sum_probs.astype(np.float32),
        "all_atom_positions": chain["all_atom_positions"],
        "all_atom_mask": chain["all_atom_mask"],
        "resolution": np.float32(rng.uniform(1.0, 2.5)),
        "is_distillation": np.float32(0.0),
    }


def _pdb_id(c: int) -> str:
    """The c-th synthetic entry's 4-character PDB id, base 36, its two most significant digits
    at [1:3] (the dicts file name): entries in order fill one dicts file after another."""
    if not 0 <= c < 36**4:
        raise ValueError(f"{c + 1} entries are more than 4-character PDB ids can name")
    d = [_BASE36[c // 36**k % 36] for k in (3, 2, 1, 0)]
    return d[2] + d[0] + d[1] + d[3]


_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
TEMPLATE_CHAINS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
RELEASE_DATES = {"train": "2021-09-01", "validation": "2021-10-01", "template": "2021-01-01"}


def synthetic_set(
    atoms,
    n_train: int,
    n_validation: int,
    min_length: int,
    max_length: int,
    msa_depth: int,
    templates: int,
    seed: int = 0,
    families: int = 0,
    wobble: float = 0.05,
):
    """(pdb_chain_id, split, raw features) of every synthetic chain, in order.

    families = 0: every chain has its own random sequence; families = k: every chain is a
    homolog of one of k random chains (validation chains too, as new members of the families)."""
    if templates > len(TEMPLATE_CHAINS):
        raise ValueError(f"at most {len(TEMPLATE_CHAINS)} templates per chain, not {templates}")
    rng = np.random.default_rng(seed)

    def new_chain():
        n = int(rng.integers(min_length, max_length + 1))
        return synthetic_sequence(rng, n), rng.normal(0, wobble / np.sqrt(3), (n, 3))

    bases = [new_chain() for _ in range(families)]
    q = 0
    for split, n in zip(SPLITS, (n_train, n_validation)):
        for i in range(n):
            aatype, steps = homolog(rng, *bases[i % families]) if families else new_chain()
            # entry 2q holds chain q, entry 2q + 1 its templates
            yield f"{_pdb_id(2 * q)}_A", split, synthetic_features(rng, atoms, aatype, steps, msa_depth, templates)
            q += 1


def _entry_number(pdb_id: str) -> int:
    """_pdb_id's inverse."""
    return sum(_BASE36.index(pdb_id[i]) * 36**k for i, k in zip((1, 2, 0, 3), (3, 2, 1, 0)))


def _on_disk(pdb_chain_id: str, split: str, raw: dict) -> tuple[list[dict], dict[str, str]]:
    """The chain's mmCIF dict, its templates' (one entry, a chain per template) and its
    alignment files: the MSA split over the three a3m files (each starts with the query, as
    the search tools' output does), the templates as pdb70 hits aligned residue for residue
    with sequences that are their mmCIF sequences (so no realignment is needed)."""
    pdb_id = pdb_chain_id.split("_")[0]
    entry = disk.mmcif_dict(
        pdb_id,
        RELEASE_DATES[split],
        float(raw["resolution"]),
        {"A": (raw["aatype"], raw["all_atom_positions"], raw["all_atom_mask"])},
    )
    template_id = _pdb_id(_entry_number(pdb_id) + 1)
    chains = TEMPLATE_CHAINS[: len(raw["template_aatype"])]
    template_entry = disk.mmcif_dict(
        template_id,
        RELEASE_DATES["template"],
        2.0,
        {
            c: (raw["template_aatype"][t], raw["template_all_atom_positions"][t], raw["template_all_atom_mask"][t])
            for t, c in enumerate(chains)
        },
    )
    msa, dels = raw["msa"], raw["deletion_matrix"]
    names = [pdb_chain_id] + [f"{pdb_chain_id}_homolog{r}" for r in range(1, len(msa))]
    files = {}
    for name, rows in zip(disk.A3M_FILES, np.array_split(np.arange(1, len(msa)), 3)):
        rows = np.concatenate([[0], rows]).astype(int)
        files[name] = disk.a3m_text([names[r] for r in rows], msa[rows], dels[rows])
    query = disk.sequence_string(raw["aatype"])
    hits = [
        (f"{template_id}_{c}", template_entry["sequences"][c], float(raw["template_sum_probs"][t, 0]))
        for t, c in enumerate(chains)
    ]
    files[disk.HHR_FILE] = disk.hhr_text(pdb_chain_id, query, hits)
    return [entry, template_entry], files


def generate(root, atoms, *args, **kwargs) -> dict:
    """Write a synthetic set (synthetic_set's arguments) under root in the reference's processed
    layout (exabench.data.openfold_disk); `atoms` is exabench.models.alphafold.atoms."""
    counts = dict.fromkeys(SPLITS, 0)
    with disk.SetWriter(root) as writer:
        for pdb_chain_id, split, raw in synthetic_set(atoms, *args, **kwargs):
            entries, files = _on_disk(pdb_chain_id, split, raw)
            for entry in entries:
                writer.add_entry(entry)
            writer.add_alignments(pdb_chain_id, files)
            counts[split] += 1
    return counts


DATA_MARKER = str(disk.CHAINS_CSV)  # written last: its presence marks a complete set


def list_chains(root, split: str) -> list[str]:
    """pdb_chain_ids of the split, in chains.csv order: chains with alignments released up to
    the training cutoff (train) or in the validation window, at most 700 residues (validation)."""
    table = disk.chains_table(str(root))
    index = disk.super_index(str(root))
    low, high = disk.SPLIT_DATES[split]
    chains = [
        c
        for c, row in table.items()
        if c in index
        and low <= row["release_date"] <= high
        and (split == "train" or int(row["sequence_length"]) <= disk.VAL_MAX_SEQUENCE_LENGTH)
    ]
    if not chains:
        raise CorruptFileError(
            Path(root) / disk.CHAINS_CSV, f"no chains with alignments released {low}..{high} (split {split!r})"
        )
    disk.require_files(root, chains)
    return chains


def read_raw(root, pdb_chain_id: str, max_templates: int = 4) -> dict:
    """The raw features (RAW_KEYS) of one chain, from its mmCIF dict and its alignments."""
    root = str(root)
    row = disk.chains_table(root)[pdb_chain_id]
    entry, sequence, pos, mask = disk.read_chain_atoms(root, row["pdb_id"], row["author_chain_id"])
    files = disk.read_alignments(root, pdb_chain_id)
    where = Path(root) / disk.ALIGNMENTS_DIR / disk.super_index(root)[pdb_chain_id]["db"]
    n = len(sequence)
    seqs, dels = [], []
    try:
        seen = set()
        for name in disk.A3M_FILES:  # every distinct aligned sequence once, first come first kept
            for seq, d in zip(*disk.parse_a3m(files.get(name, ""))):
                if seq not in seen:
                    seen.add(seq)
                    seqs.append(seq)
                    dels.append(d)
        hits = disk.parse_hhr(files.get(disk.HHR_FILE, ""))
    except ValueError as exc:
        raise CorruptFileError(where, f"alignments of {pdb_chain_id}: {exc}") from None
    if not seqs:
        seqs, dels = [sequence], [np.zeros(n, np.int64)]
    if any(len(x) != n for x in seqs):
        raise CorruptFileError(where, f"alignments of {pdb_chain_id} have rows not {n} columns long")
    templates = disk.template_hits(root, hits, sequence, row["pdb_id"], row["release_date"], max_templates)
    t_aatype, t_pos, t_mask, t_probs = (
        (np.stack(x) for x in zip(*templates))
        if templates
        else (
            np.zeros((0, n), np.int32),
            np.zeros((0, n, ATOM_TYPES, 3), np.float32),
            np.zeros((0, n, ATOM_TYPES)),
            np.zeros(0),
        )
    )
    return {
        "aatype": disk.sequence_ids(sequence),
        "residue_index": np.arange(n, dtype=np.int32),
        "msa": np.stack([disk.sequence_ids(x) for x in seqs]),
        "deletion_matrix": np.stack(dels).astype(np.float32),
        "template_aatype": t_aatype.astype(np.int32),
        "template_all_atom_positions": t_pos.astype(np.float32),
        "template_all_atom_mask": t_mask.astype(np.float32),
        "template_sum_probs": t_probs.astype(np.float32).reshape(-1, 1),
        "all_atom_positions": pos.astype(np.float32),
        "all_atom_mask": mask.astype(np.float32),
        "resolution": np.float32(entry["resolution"]),
        "is_distillation": np.float32(0.0),
    }


# ---- feature processing ------------------------------------------------------------------
def atom_features(atoms, aatype: np.ndarray, pos: np.ndarray, mask: np.ndarray) -> dict:
    """What the reference's transforms derive from a whole chain's atoms (make_atom14_masks,
    make_atom14_positions, atom37_to_frames, atom37_to_torsion_angles, get_backbone_frames,
    get_chi_angles), float32, residue axis first."""
    f = {
        **torch_call(atoms.atom14_ground_truth, aatype, pos, mask),
        **torch_call(atoms.rigid_group_frames, aatype, pos, mask),
        **torch_call(atoms.torsion_angles, aatype, pos, mask),
    }
    f = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in f.items()}
    f["backbone_rigid_tensor"] = f["rigidgroups_gt_frames"][:, 0]
    f["backbone_rigid_mask"] = f["rigidgroups_gt_exists"][:, 0]
    f["chi_angles_sin_cos"] = f["torsion_angles_sin_cos"][:, 3:]
    f["chi_mask"] = f["torsion_angles_mask"][:, 3:]
    return f


def _pseudo_beta(aatype, pos, mask):
    gly = (aatype == GLYCINE)[..., None]
    return np.where(gly, pos[..., 1, :], pos[..., 3, :]), np.where(gly[..., 0], mask[..., 1], mask[..., 3])


def _deletion_value(d):
    return (2.0 / np.pi * np.arctan(d / 3.0)).astype(np.float32)


def process(
    raw: dict,
    rng: np.random.Generator,
    crop: int,
    n_clust: int,
    n_extra: int,
    n_templ: int,
    train: bool,
    atoms,
    clamped_fape_probability: float = 0.9,
) -> dict:
    """The model's features of one chain, padded to `crop` residues (train: a random crop);
    `atoms` is exabench.models.alphafold.atoms."""
    n = raw["aatype"].shape[0]
    # atom-level features of the whole chain and its templates first, as the reference's
    # non-ensembled transforms do, then the crop
    chain = atom_features(atoms, raw["aatype"], raw["all_atom_positions"], raw["all_atom_mask"])
    templ = [
        torch_call(atoms.torsion_angles, *(raw[k][t] for k in TEMPLATE_ATOMS))
        for t in range(min(n_templ, raw["template_aatype"].shape[0]))
    ]
    start = int(rng.integers(0, n - crop + 1)) if train and n > crop else 0
    sl = slice(start, start + min(crop, n))
    length = sl.stop - sl.start
    aatype = raw["aatype"][sl].astype(np.int64)
    msa, dels = raw["msa"][:, sl].astype(np.int64), raw["deletion_matrix"][:, sl]
    f = {
        "aatype": aatype,
        "residue_index": raw["residue_index"][sl].astype(np.int64),
        "seq_mask": np.ones(length, np.float32),
        "target_feat": np.concatenate([np.zeros((length, 1), np.float32), np.eye(21, dtype=np.float32)[aatype]], -1),
        **_msa_features(msa, dels, rng, n_clust, n_extra),
        **_template_features(raw, templ, sl, n_templ),
        **_structure_features(raw, chain, aatype, sl),
        "resolution": np.float32(raw["resolution"]),
        "seq_length": np.int64(n),
        "use_clamped_fape": np.float32(rng.random() < clamped_fape_probability if train else 1.0),
    }
    return pad(pad_templates(f, n_templ), crop if train else length)


def _msa_features(msa: np.ndarray, dels: np.ndarray, rng: np.random.Generator, n_clust: int, n_extra: int) -> dict:
    """The clustered (BERT-masked) and extra MSA features of the cropped MSA and deletion matrix."""
    # MSA: the query stays first; random other rows are cluster centres, the rest extra sequences.
    order = np.concatenate([[0], 1 + rng.permutation(msa.shape[0] - 1)])
    centres, extra = order[:n_clust], order[n_clust : n_clust + n_extra]
    clust, clust_del = msa[centres], dels[centres]
    onehot = np.eye(MSA_CLASSES, dtype=np.float32)
    ext, ext_del = msa[extra], dels[extra]
    masked, bert_mask = _bert_mask(msa, clust, rng, onehot)
    profile, del_mean = _cluster_profiles(masked, clust_del, ext, ext_del, onehot)
    msa_feat = np.concatenate(
        [
            onehot[masked],
            (clust_del > 0)[..., None],
            _deletion_value(clust_del)[..., None],
            profile,
            _deletion_value(del_mean)[..., None],
        ],
        -1,
    ).astype(np.float32)
    return {
        "msa_feat": msa_feat,
        "msa_mask": np.ones(clust.shape, np.float32),
        "true_msa": clust,
        "bert_mask": bert_mask,
        "extra_msa": ext,
        "extra_has_deletion": (ext_del > 0).astype(np.float32),
        "extra_deletion_value": _deletion_value(ext_del),
        "extra_msa_mask": np.ones(ext.shape, np.float32),
    }


def _bert_mask(msa: np.ndarray, clust: np.ndarray, rng: np.random.Generator, onehot: np.ndarray):
    """(the clustered MSA with 15% of its residues replaced, the mask of those residues)."""
    # BERT masking of the clustered MSA first (the cluster profile then sees the mask tokens, so
    # it does not reveal the masked residues); "profile" replacements follow the whole MSA's profile.
    full_profile = onehot[msa].mean(0)  # [L, 23]
    bert_mask = (rng.random(clust.shape) < 0.15).astype(np.float32)
    choice = rng.random(clust.shape)
    uniform = rng.integers(0, 20, clust.shape)
    from_profile = (rng.random(clust.shape)[..., None] > full_profile.cumsum(-1)).sum(-1).clip(0, MSA_CLASSES - 1)
    replaced = np.where(
        choice < 0.1, uniform, np.where(choice < 0.2, from_profile, np.where(choice < 0.3, clust, MASK_TOKEN))
    )
    return np.where(bert_mask > 0, replaced, clust), bert_mask


def _cluster_profiles(masked, clust_del, ext, ext_del, onehot: np.ndarray):
    """(each cluster's residue profile, its mean deletion count)."""
    # Each extra sequence joins the centre it agrees with most (ignoring gaps); centre profiles
    # and deletion means average the centre and its members.
    agree = np.einsum("eic,kic->ek", onehot[ext][..., :21], onehot[masked][..., :21])
    nearest = agree.argmax(1) if len(ext) else np.zeros(0, np.int64)
    profile = onehot[masked].copy()
    del_mean = clust_del.copy()
    counts = np.ones(len(masked), np.float32)
    for e, k in enumerate(nearest):
        profile[k] += onehot[ext[e]]
        del_mean[k] += ext_del[e]
        counts[k] += 1
    profile /= counts[:, None, None]
    del_mean /= counts[:, None]
    return profile, del_mean


def _template_features(raw: dict, templ: list[dict], sl: slice, n_templ: int) -> dict:
    """The first n_templ templates' features over the crop; templ their torsion angles (whole chains)."""
    length = sl.stop - sl.start
    t_aatype = raw["template_aatype"][:n_templ, sl].astype(np.int64)
    t_pos, t_amask = raw["template_all_atom_positions"][:n_templ, sl], raw["template_all_atom_mask"][:n_templ, sl]
    t_pb, t_pb_mask = _pseudo_beta(t_aatype, t_pos, t_amask)
    return {
        "template_aatype": t_aatype,
        "template_all_atom_positions": t_pos.astype(np.float32),
        "template_all_atom_mask": t_amask.astype(np.float32),
        "template_mask": np.ones(len(t_aatype), np.float32),
        "template_pseudo_beta": t_pb.astype(np.float32),
        "template_pseudo_beta_mask": t_pb_mask.astype(np.float32),
        **{
            "template_" + k: (np.stack([t[k][sl] for t in templ]) if templ else np.zeros((0, length, *shape))).astype(
                np.float32
            )
            for k, shape in TEMPLATE_TORSIONS.items()
        },
    }


def _structure_features(raw: dict, chain: dict, aatype: np.ndarray, sl: slice) -> dict:
    """The true structure's features over the crop; chain the atom-level features of the whole chain."""
    pos, amask = raw["all_atom_positions"][sl], raw["all_atom_mask"][sl]
    pb, pb_mask = _pseudo_beta(aatype, pos, amask)
    return {
        "all_atom_positions": pos.astype(np.float32),
        "all_atom_mask": amask.astype(np.float32),
        **{k: chain[k][sl] for k in CHAIN_ATOM_FEATURES},
        "pseudo_beta": pb.astype(np.float32),
        "pseudo_beta_mask": pb_mask.astype(np.float32),
    }


def pad_templates(f: dict, n_templ: int) -> dict:
    """Zero templates up to n_templ, masked out (template_mask 0), as the reference pads a chain
    with fewer hits."""
    missing = n_templ - len(f["template_mask"])
    if missing <= 0:
        return f
    return {
        k: np.pad(v, [(0, missing)] + [(0, 0)] * (v.ndim - 1)) if k.startswith("template_") else v for k, v in f.items()
    }


# the atom-level features of the chain the loader passes on (reference names)
CHAIN_ATOM_FEATURES = (
    "atom14_atom_exists",
    "residx_atom14_to_atom37",
    "residx_atom37_to_atom14",
    "atom37_atom_exists",
    "atom14_gt_exists",
    "atom14_gt_positions",
    "atom14_alt_gt_positions",
    "atom14_alt_gt_exists",
    "atom14_atom_is_ambiguous",
    "rigidgroups_gt_frames",
    "rigidgroups_gt_exists",
    "rigidgroups_group_exists",
    "rigidgroups_group_is_ambiguous",
    "rigidgroups_alt_gt_frames",
    "backbone_rigid_tensor",
    "backbone_rigid_mask",
    "chi_angles_sin_cos",
    "chi_mask",
)
TEMPLATE_TORSIONS = {
    "torsion_angles_sin_cos": (7, 2),
    "alt_torsion_angles_sin_cos": (7, 2),
    "torsion_angles_mask": (7,),
}
TEMPLATE_ATOMS = ("template_aatype", "template_all_atom_positions", "template_all_atom_mask")

# residue axis of each feature (the others are per chain)
RESIDUE_AXIS = {
    "aatype": 0,
    "residue_index": 0,
    "seq_mask": 0,
    "target_feat": 0,
    "msa_feat": 1,
    "msa_mask": 1,
    "true_msa": 1,
    "bert_mask": 1,
    "extra_msa": 1,
    "extra_has_deletion": 1,
    "extra_deletion_value": 1,
    "extra_msa_mask": 1,
    "template_aatype": 1,
    "template_all_atom_positions": 1,
    "template_all_atom_mask": 1,
    "template_pseudo_beta": 1,
    "template_pseudo_beta_mask": 1,
    "template_torsion_angles_sin_cos": 1,
    "template_alt_torsion_angles_sin_cos": 1,
    "template_torsion_angles_mask": 1,
    "all_atom_positions": 0,
    "all_atom_mask": 0,
    **dict.fromkeys(CHAIN_ATOM_FEATURES, 0),
    "pseudo_beta": 0,
    "pseudo_beta_mask": 0,
}


def pad(f: dict, n_res: int) -> dict:
    """Zero-pad every residue axis to n_res (masks are zero on the padding)."""
    out = dict(f)
    for k, axis in RESIDUE_AXIS.items():
        x = f[k]
        if x.shape[axis] < n_res:
            widths = [(0, 0)] * x.ndim
            widths[axis] = (0, n_res - x.shape[axis])
            out[k] = np.pad(x, widths)
    return out


def collate(examples: list[dict]) -> dict:
    """Stack examples padded to the longest one."""
    n_res = max(e["aatype"].shape[0] for e in examples)
    return {k: np.stack([pad(e, n_res)[k] for e in examples]) for k in examples[0]}
