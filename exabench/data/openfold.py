"""OpenFold (AlphaFold2) training data: synthetic protein chains on disk and the loader that
turns one chain into the model's features, with the shapes and dtypes of the MLCommons HPC
reference's processed features (openfold/openfold/config.py FEATURE_SHAPES).

On disk, beside `chains.csv` (one row per chain: pdb_chain_id, split, sequence, release_date,
resolution), `features/<pdb_chain_id>.npz` holds the chain's raw features under the
reference's raw feature names: aatype, residue_index, msa, deletion_matrix (primary),
template_aatype, template_all_atom_positions, template_all_atom_mask, template_sum_probs
(templates), all_atom_positions, all_atom_mask, resolution, is_distillation (supervised),
plus chi_angles and template_chi_angles (radians): the synthetic chains have no side-chain
atoms to measure those torsions from.

The loader does what the reference's feature processing does at training time: a random
contiguous crop, the query plus a random choice of cluster centres, the rest as extra MSA
assigned to their nearest centre (cluster profile and deletion mean), BERT-style masking of
the clustered MSA (15%: 10% uniform, 10% profile, 10% unchanged, 70% mask token), msa_feat
(49 channels), target_feat (22), template pseudo-beta and torsions, backbone frames.

Synthetic chains are learnable: the sequence is helices, strands and loops drawn from residue
classes, and each residue's class sets the rigid step from its C-alpha frame to the next
(ideal alpha-helix and beta-strand screws, fixed loop turns) with a little noise; homologs in
the MSA are mutated copies of the query; templates are noisy copies of the structure.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from exabench.data.tfrecord import CorruptFileError
from exabench.io import atomic_write_text

RESTYPES = "ARNDCQEGHILKMFPSTWYV"  # AlphaFold's order; 20 = X (unknown), 21 = gap, 22 = BERT mask token
GAP, MASK_TOKEN, MSA_CLASSES = 21, 22, 23
GLYCINE = RESTYPES.index("G")
CHI_COUNT = dict(zip(RESTYPES, (0, 4, 2, 2, 1, 3, 3, 0, 2, 2, 2, 4, 3, 2, 2, 1, 1, 2, 2, 1)))
# chi angles that are symmetric under a rotation by pi (D chi2, E chi3, F chi2, Y chi2)
CHI_PI_PERIODIC = {("D", 1), ("E", 2), ("F", 1), ("Y", 1)}
ATOM_TYPES = 37  # atom37: N, CA, C, CB, O, ...
N_ATOMS_BUILT = 4  # the synthetic chains have N, CA, C and (except glycine) CB
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
    "chi_angles",
    "template_chi_angles",
)
SPLITS = ("train", "validation")
IDEAL = np.array([(-0.525, 1.363, 0.0), (0.0, 0.0, 0.0), (1.526, 0.0, 0.0), (-0.529, -0.774, -1.205)])


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


def synthetic_chain(rng: np.random.Generator, aatype: np.ndarray, wobble: np.ndarray) -> dict:
    """Backbone atoms (atom37 with N, CA, C, CB) and chi angles of a chain of `aatype`; each
    step is perturbed by the rotation vector wobble[i] (radians)."""
    length = len(aatype)
    rot, trans = np.eye(3), np.zeros(3)
    pos = np.zeros((length, ATOM_TYPES, 3), np.float32)
    mask = np.zeros((length, ATOM_TYPES), np.float32)
    for i, a in enumerate(aatype):
        pos[i, :N_ATOMS_BUILT] = IDEAL @ rot.T + trans
        mask[i, :N_ATOMS_BUILT] = 1.0
        if a == GLYCINE:
            pos[i, 3], mask[i, 3] = 0.0, 0.0
        step_rot, step = STEPS[RESTYPES[a]]
        trans = trans + rot @ step
        angle = np.linalg.norm(wobble[i])
        rot = rot @ step_rot @ (_rotation(wobble[i] / angle, angle) if angle > 0 else np.eye(3))
    # chi angles: a preferred rotamer per residue type (-60, 180 or 60 degrees) plus noise
    pref = np.deg2rad(np.array([-60.0, 180.0, 60.0]))[(aatype[:, None] + np.arange(4)) % 3]
    chi = (pref + rng.normal(0, 0.2, (length, 4))).astype(np.float32)
    chi *= np.array([[k < CHI_COUNT[RESTYPES[a]] for k in range(4)] for a in aatype], np.float32)
    return {"aatype": aatype, "all_atom_positions": pos, "all_atom_mask": mask, "chi_angles": chi}


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


def synthetic_features(
    rng: np.random.Generator, aatype: np.ndarray, wobble: np.ndarray, msa_depth: int, templates: int
) -> dict:
    """Raw features (RAW_KEYS) of one synthetic chain of `aatype` with step perturbations `wobble`."""
    chain = synthetic_chain(rng, aatype, wobble)
    length = len(aatype)
    rates = rng.uniform(0.05, 0.6, (msa_depth - 1, 1))
    mutated = rng.random((msa_depth - 1, length)) < rates
    homologs = np.where(mutated, rng.integers(0, 20, (msa_depth - 1, length)), aatype)
    homologs = np.where(rng.random(homologs.shape) < 0.05, GAP, homologs)
    msa = np.concatenate([aatype[None], homologs]).astype(np.int32)
    deletions = (rng.random(msa.shape) < 0.03) * rng.integers(1, 6, msa.shape)
    deletions[0] = 0
    t_pos = chain["all_atom_positions"][None] + rng.normal(0, 1.0, (templates, length, 1, 3)).astype(np.float32)
    t_mask = np.repeat(chain["all_atom_mask"][None], templates, 0)
    t_pos *= t_mask[..., None]
    t_aatype = np.where(rng.random((templates, length)) < 0.3, rng.integers(0, 20, (templates, length)), aatype)
    return {
        "aatype": aatype.astype(np.int32),
        "residue_index": np.arange(length, dtype=np.int32),
        "msa": msa,
        "deletion_matrix": deletions.astype(np.float32),
        "template_aatype": t_aatype.astype(np.int32),
        "template_all_atom_positions": t_pos,
        "template_all_atom_mask": t_mask,
        "template_sum_probs": rng.uniform(50, 200, (templates, 1)).astype(np.float32),
        "all_atom_positions": chain["all_atom_positions"],
        "all_atom_mask": chain["all_atom_mask"],
        "resolution": np.float32(rng.uniform(1.0, 2.5)),
        "is_distillation": np.float32(0.0),
        "chi_angles": chain["chi_angles"],
        "template_chi_angles": (chain["chi_angles"][None] + rng.normal(0, 0.3, (templates, length, 4))).astype(
            np.float32
        ),
    }


def _write_npz(path: Path, arrays: dict) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def generate(
    root,
    n_train: int,
    n_validation: int,
    min_length: int,
    max_length: int,
    msa_depth: int,
    templates: int,
    seed: int = 0,
    families: int = 0,
    wobble: float = 0.05,
) -> dict:
    """Write root/features/<chain>.npz and, last, root/chains.csv (its presence marks a complete set).

    families = 0: every chain has its own random sequence; families = k: every chain is a
    homolog of one of k random chains (validation chains too, as new members of the families)."""
    rng = np.random.default_rng(seed)
    features = Path(root) / "features"
    features.mkdir(parents=True, exist_ok=True)

    def new_chain():
        n = int(rng.integers(min_length, max_length + 1))
        return synthetic_sequence(rng, n), rng.normal(0, wobble / np.sqrt(3), (n, 3))

    bases = [new_chain() for _ in range(families)]
    rows = []
    for split, n in zip(SPLITS, (n_train, n_validation)):
        for i in range(n):
            chain_id = f"{'t' if split == 'train' else 'v'}{i:04d}_A"
            aatype, steps = homolog(rng, *bases[i % families]) if families else new_chain()
            raw = synthetic_features(rng, aatype, steps, msa_depth, templates)
            _write_npz(features / f"{chain_id}.npz", raw)
            rows.append(
                {
                    "pdb_chain_id": chain_id,
                    "split": split,
                    "sequence": "".join(RESTYPES[a] for a in raw["aatype"]),
                    "release_date": "2021-09-01" if split == "train" else "2021-10-01",
                    "resolution": f"{float(raw['resolution']):.2f}",
                }
            )
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(Path(root) / "chains.csv", out.getvalue())
    return {s: sum(r["split"] == s for r in rows) for s in SPLITS}


def list_chains(root, split: str) -> list[str]:
    """Paths of the split's feature files, in chains.csv order."""
    index = Path(root) / "chains.csv"
    try:
        with open(index, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise CorruptFileError(index, f"cannot read the chain index: {exc}") from exc
    if rows and not {"pdb_chain_id", "split"} <= set(rows[0]):
        raise CorruptFileError(index, f"columns {sorted(rows[0])}; want pdb_chain_id and split")
    paths = [str(Path(root) / "features" / f"{r['pdb_chain_id']}.npz") for r in rows if r["split"] == split]
    if not paths:
        raise CorruptFileError(index, f"no chains in split {split!r}")
    return paths


def read_raw(path) -> dict:
    try:
        with np.load(path) as f:
            raw = {k: f[k] for k in RAW_KEYS}
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise CorruptFileError(path, f"not an OpenFold feature file with {', '.join(RAW_KEYS)}: {exc}") from exc
    n = raw["aatype"].shape[0]
    if raw["msa"].shape[1:] != (n,) or raw["all_atom_positions"].shape != (n, ATOM_TYPES, 3):
        raise CorruptFileError(
            path,
            f"msa {raw['msa'].shape}, all_atom_positions {raw['all_atom_positions'].shape} do not match {n} residues",
        )
    return raw


# ---- feature processing ------------------------------------------------------------------
def _dihedral(a, b, c, d) -> np.ndarray:
    b0, b1, b2 = a - b, c - b, d - c
    b1n = b1 / (np.linalg.norm(b1, axis=-1, keepdims=True) + 1e-8)
    v = b0 - (b0 * b1n).sum(-1, keepdims=True) * b1n
    w = b2 - (b2 * b1n).sum(-1, keepdims=True) * b1n
    x = (v * w).sum(-1)
    y = (np.cross(b1n, v) * w).sum(-1)
    return np.arctan2(y, x)


def torsions(aatype: np.ndarray, pos: np.ndarray, mask: np.ndarray, chi: np.ndarray):
    """(sin/cos [L, 7, 2], alternative sin/cos with pi-periodic chis shifted, mask [L, 7]) of
    omega, phi, psi (from the backbone atoms) and chi1-4."""
    n, ca, c = pos[:, 0], pos[:, 1], pos[:, 2]
    prev_ca, prev_c = np.roll(ca, 1, 0), np.roll(c, 1, 0)
    next_n = np.roll(n, -1, 0)
    bb = mask[:, 0] * mask[:, 1] * mask[:, 2]
    has_prev = np.concatenate([[0.0], bb[:-1]]) * bb
    has_next = np.concatenate([bb[1:], [0.0]]) * bb
    angles = np.stack([_dihedral(prev_ca, prev_c, n, ca), _dihedral(prev_c, n, ca, c), _dihedral(n, ca, c, next_n)], -1)
    counts = np.array([CHI_COUNT[RESTYPES[a]] if a < 20 else 0 for a in aatype])
    chi_mask = (np.arange(4)[None] < counts[:, None]).astype(np.float32)
    all_angles = np.concatenate([angles, chi], -1)
    t_mask = np.concatenate([np.stack([has_prev, has_prev, has_next], -1), chi_mask], -1).astype(np.float32)
    sc = np.stack([np.sin(all_angles), np.cos(all_angles)], -1) * t_mask[..., None]
    flip = np.ones((len(aatype), 7), np.float32)
    for i, a in enumerate(aatype):
        for k in range(4):
            if a < 20 and (RESTYPES[a], k) in CHI_PI_PERIODIC:
                flip[i, 3 + k] = -1.0
    return sc.astype(np.float32), (sc * flip[..., None]).astype(np.float32), t_mask


def _pseudo_beta(aatype, pos, mask):
    gly = (aatype == GLYCINE)[..., None]
    return np.where(gly, pos[..., 1, :], pos[..., 3, :]), np.where(gly[..., 0], mask[..., 1], mask[..., 3])


def _backbone_frames(pos, mask):
    """4x4 frames [L, 4, 4] from N, CA, C (Gram-Schmidt, as geometry.frames_from_atoms) and their mask."""
    n, ca, c = pos[:, 0], pos[:, 1], pos[:, 2]
    e1 = (c - ca) / (np.linalg.norm(c - ca, axis=-1, keepdims=True) + 1e-8)
    u2 = n - ca
    e2 = u2 - (u2 * e1).sum(-1, keepdims=True) * e1
    e2 = e2 / (np.linalg.norm(e2, axis=-1, keepdims=True) + 1e-8)
    frames = np.tile(np.eye(4, dtype=np.float32), (len(pos), 1, 1))
    frames[:, :3, :3] = np.stack([e1, e2, np.cross(e1, e2)], -1)
    frames[:, :3, 3] = ca
    return frames, (mask[:, 0] * mask[:, 1] * mask[:, 2]).astype(np.float32)


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
    clamped_fape_probability: float = 0.9,
) -> dict:
    """The model's features of one chain, padded to `crop` residues (train: a random crop)."""
    n = raw["aatype"].shape[0]
    start = int(rng.integers(0, n - crop + 1)) if train and n > crop else 0
    sl = slice(start, start + min(crop, n))
    length = sl.stop - sl.start
    aatype = raw["aatype"][sl].astype(np.int64)
    msa, dels = raw["msa"][:, sl].astype(np.int64), raw["deletion_matrix"][:, sl]

    # MSA: the query stays first; random other rows are cluster centres, the rest extra sequences.
    order = np.concatenate([[0], 1 + rng.permutation(msa.shape[0] - 1)])
    centres, extra = order[:n_clust], order[n_clust : n_clust + n_extra]
    clust, clust_del = msa[centres], dels[centres]
    onehot = np.eye(MSA_CLASSES, dtype=np.float32)
    ext, ext_del = msa[extra], dels[extra]
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
    masked = np.where(bert_mask > 0, replaced, clust)

    # Each extra sequence joins the centre it agrees with most (ignoring gaps); centre profiles
    # and deletion means average the centre and its members.
    agree = np.einsum("eic,kic->ek", onehot[ext][..., :21], onehot[masked][..., :21])
    nearest = agree.argmax(1) if len(extra) else np.zeros(0, np.int64)
    profile = onehot[masked].copy()
    del_mean = clust_del.copy()
    counts = np.ones(len(centres), np.float32)
    for e, k in enumerate(nearest):
        profile[k] += onehot[ext[e]]
        del_mean[k] += ext_del[e]
        counts[k] += 1
    profile /= counts[:, None, None]
    del_mean /= counts[:, None]
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
    target_feat = np.concatenate([np.zeros((length, 1), np.float32), np.eye(21, dtype=np.float32)[aatype]], -1)

    pos, amask = raw["all_atom_positions"][sl], raw["all_atom_mask"][sl]
    sc, alt, tmask = [], [], []
    t_aatype = raw["template_aatype"][:n_templ, sl].astype(np.int64)
    t_pos, t_amask = raw["template_all_atom_positions"][:n_templ, sl], raw["template_all_atom_mask"][:n_templ, sl]
    for t in range(t_aatype.shape[0]):
        s, a, m = torsions(t_aatype[t], t_pos[t], t_amask[t], raw["template_chi_angles"][t, sl])
        sc.append(s), alt.append(a), tmask.append(m)
    t_pb, t_pb_mask = _pseudo_beta(t_aatype, t_pos, t_amask)
    chi_sc, _, chi_mask = torsions(aatype, pos, amask, raw["chi_angles"][sl])
    pb, pb_mask = _pseudo_beta(aatype, pos, amask)
    frames, frames_mask = _backbone_frames(pos, amask)
    f = {
        "aatype": aatype,
        "residue_index": raw["residue_index"][sl].astype(np.int64),
        "seq_mask": np.ones(length, np.float32),
        "target_feat": target_feat,
        "msa_feat": msa_feat,
        "msa_mask": np.ones(clust.shape, np.float32),
        "true_msa": clust,
        "bert_mask": bert_mask,
        "extra_msa": ext,
        "extra_has_deletion": (ext_del > 0).astype(np.float32),
        "extra_deletion_value": _deletion_value(ext_del),
        "extra_msa_mask": np.ones(ext.shape, np.float32),
        "template_aatype": t_aatype,
        "template_all_atom_positions": t_pos.astype(np.float32),
        "template_all_atom_mask": t_amask.astype(np.float32),
        "template_mask": np.ones(len(t_aatype), np.float32),
        "template_pseudo_beta": t_pb.astype(np.float32),
        "template_pseudo_beta_mask": t_pb_mask.astype(np.float32),
        "template_torsion_angles_sin_cos": np.stack(sc),
        "template_alt_torsion_angles_sin_cos": np.stack(alt),
        "template_torsion_angles_mask": np.stack(tmask),
        "all_atom_positions": pos.astype(np.float32),
        "all_atom_mask": amask.astype(np.float32),
        "atom37_atom_exists": amask.astype(np.float32),  # the synthetic chains have no other atoms
        "backbone_rigid_tensor": frames,
        "backbone_rigid_mask": frames_mask,
        "pseudo_beta": pb.astype(np.float32),
        "pseudo_beta_mask": pb_mask.astype(np.float32),
        "chi_angles_sin_cos": chi_sc[:, 3:],
        "chi_mask": chi_mask[:, 3:],
        "chi_pi_periodic": np.array(
            [[(RESTYPES[a], k) in CHI_PI_PERIODIC for k in range(4)] for a in aatype], np.float32
        ),
        "resolution": np.float32(raw["resolution"]),
        "seq_length": np.int64(n),
        "use_clamped_fape": np.float32(rng.random() < clamped_fape_probability if train else 1.0),
    }
    return pad(f, crop if train else length)


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
    "atom37_atom_exists": 0,
    "backbone_rigid_tensor": 0,
    "backbone_rigid_mask": 0,
    "pseudo_beta": 0,
    "pseudo_beta_mask": 0,
    "chi_angles_sin_cos": 0,
    "chi_mask": 0,
    "chi_pi_periodic": 0,
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
