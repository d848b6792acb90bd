"""Residue geometry of the 20 amino acids as AlphaFold2 uses it (supplement 1.8.1, Table 2):
each heavy atom's position in one of eight rigid groups per residue, the atoms that define
the four chi torsions, the atom37 and atom14 orders, and the symmetric atom pairs whose
names may be swapped. The figures are those of the MLCommons HPC OpenFold reference
(openfold/openfold/data/residue_constants.py, from DeepMind's AlphaFold tables). Every
table the network, loss and loader use is derived from these facts at import.

Rigid groups: 0 backbone (N, CA, C, CB), 1 pre-omega and 2 phi (no heavy atoms), 3 psi
(O), 4-7 chi1-chi4. A group's frame has its origin at the end atom of its rotation axis,
x along the axis and the atom that defines its torsion in the xy-plane (y > 0).
"""

from __future__ import annotations

import numpy as np

RESTYPES = "ARNDCQEGHILKMFPSTWYV"  # AlphaFold's order; index 20 is the unknown residue X
UNKNOWN = 20
NUM_RESTYPES = 21  # the 20 and X

ATOM37 = tuple(
    "N CA C CB O CG CG1 CG2 OG OG1 SG CD CD1 CD2 ND1 ND2 OD1 OD2 SD CE CE1 CE2 CE3 NE NE1 NE2 OE1 OE2 CH2 "
    "NH1 NH2 OH CZ CZ2 CZ3 NZ OXT".split()
)
ATOM_INDEX = {name: i for i, name in enumerate(ATOM37)}

# atom14: N, CA, C, O, then these side-chain atoms, in this order
ATOM14_SIDE_CHAIN = {
    "A": "CB",
    "R": "CB CG CD NE CZ NH1 NH2",
    "N": "CB CG OD1 ND2",
    "D": "CB CG OD1 OD2",
    "C": "CB SG",
    "Q": "CB CG CD OE1 NE2",
    "E": "CB CG CD OE1 OE2",
    "G": "",
    "H": "CB CG ND1 CD2 CE1 NE2",
    "I": "CB CG1 CG2 CD1",
    "L": "CB CG CD1 CD2",
    "K": "CB CG CD CE NZ",
    "M": "CB CG SD CE",
    "F": "CB CG CD1 CD2 CE1 CE2 CZ",
    "P": "CB CG CD",
    "S": "CB OG",
    "T": "CB OG1 CG2",
    "W": "CB CG CD1 CD2 NE1 CE2 CE3 CZ2 CZ3 CH2",
    "Y": "CB CG CD1 CD2 CE1 CE2 CZ OH",
    "V": "CB CG1 CG2",
}

# The chi torsions run along a chain of atoms: chi k is the dihedral of atoms k..k+3 of
# N, CA followed by these (chi5 of arginine is flat and not used).
CHI_CHAIN = {
    "A": "",
    "R": "CB CG CD NE CZ",
    "N": "CB CG OD1",
    "D": "CB CG OD1",
    "C": "CB SG",
    "Q": "CB CG CD OE1",
    "E": "CB CG CD OE1",
    "G": "",
    "H": "CB CG ND1",
    "I": "CB CG1 CD1",
    "L": "CB CG CD1",
    "K": "CB CG CD CE NZ",
    "M": "CB CG SD CE",
    "F": "CB CG CD1",
    "P": "CB CG CD",
    "S": "CB OG",
    "T": "CB OG1",
    "W": "CB CG CD1",
    "Y": "CB CG CD1",
    "V": "CB CG1",
}

# Atom pairs related by a 180-degree flip of the residue's last chi: their names are
# arbitrary, so the loss may compare either naming (supplement 1.8.5). That last chi is
# pi-periodic.
SYMMETRIC_PAIRS = {
    "D": (("OD1", "OD2"),),
    "E": (("OE1", "OE2"),),
    "F": (("CD1", "CD2"), ("CE1", "CE2")),
    "Y": (("CD1", "CD2"), ("CE1", "CE2")),
}

# residue, atom, rigid group, position (A) in the group's frame
_LITERATURE_POSITIONS = """
A N   0  -0.525   1.363   0.000
A CA  0   0.000   0.000   0.000
A C   0   1.526   0.000   0.000
A CB  0  -0.529  -0.774  -1.205
A O   3   0.627   1.062   0.000
R N   0  -0.524   1.362   0.000
R CA  0   0.000   0.000   0.000
R C   0   1.525   0.000   0.000
R CB  0  -0.524  -0.778  -1.209
R O   3   0.626   1.062   0.000
R CG  4   0.616   1.390   0.000
R CD  5   0.564   1.414   0.000
R NE  6   0.539   1.357   0.000
R NH1 7   0.206   2.301   0.000
R NH2 7   2.078   0.978   0.000
R CZ  7   0.758   1.093   0.000
N N   0  -0.536   1.357   0.000
N CA  0   0.000   0.000   0.000
N C   0   1.526   0.000   0.000
N CB  0  -0.531  -0.787  -1.200
N O   3   0.625   1.062   0.000
N CG  4   0.584   1.399   0.000
N ND2 5   0.593  -1.188   0.001
N OD1 5   0.633   1.059   0.000
D N   0  -0.525   1.362   0.000
D CA  0   0.000   0.000   0.000
D C   0   1.527   0.000   0.000
D CB  0  -0.526  -0.778  -1.208
D O   3   0.626   1.062   0.000
D CG  4   0.593   1.398   0.000
D OD1 5   0.610   1.091   0.000
D OD2 5   0.592  -1.101  -0.003
C N   0  -0.522   1.362   0.000
C CA  0   0.000   0.000   0.000
C C   0   1.524   0.000   0.000
C CB  0  -0.519  -0.773  -1.212
C O   3   0.625   1.062   0.000
C SG  4   0.728   1.653   0.000
Q N   0  -0.526   1.361   0.000
Q CA  0   0.000   0.000   0.000
Q C   0   1.526   0.000   0.000
Q CB  0  -0.525  -0.779  -1.207
Q O   3   0.626   1.062   0.000
Q CG  4   0.615   1.393   0.000
Q CD  5   0.587   1.399   0.000
Q NE2 6   0.593  -1.189  -0.001
Q OE1 6   0.634   1.060   0.000
E N   0  -0.528   1.361   0.000
E CA  0   0.000   0.000   0.000
E C   0   1.526   0.000   0.000
E CB  0  -0.526  -0.781  -1.207
E O   3   0.626   1.062   0.000
E CG  4   0.615   1.392   0.000
E CD  5   0.600   1.397   0.000
E OE1 6   0.607   1.095   0.000
E OE2 6   0.589  -1.104  -0.001
G N   0  -0.572   1.337   0.000
G CA  0   0.000   0.000   0.000
G C   0   1.517   0.000   0.000
G O   3   0.626   1.062   0.000
H N   0  -0.527   1.360   0.000
H CA  0   0.000   0.000   0.000
H C   0   1.525   0.000   0.000
H CB  0  -0.525  -0.778  -1.208
H O   3   0.625   1.063   0.000
H CG  4   0.600   1.370   0.000
H CD2 5   0.889  -1.021   0.003
H ND1 5   0.744   1.160   0.000
H CE1 5   2.030   0.851   0.002
H NE2 5   2.145  -0.466   0.004
I N   0  -0.493   1.373   0.000
I CA  0   0.000   0.000   0.000
I C   0   1.527   0.000   0.000
I CB  0  -0.536  -0.793  -1.213
I O   3   0.627   1.062   0.000
I CG1 4   0.534   1.437   0.000
I CG2 4   0.540  -0.785  -1.199
I CD1 5   0.619   1.391   0.000
L N   0  -0.520   1.363   0.000
L CA  0   0.000   0.000   0.000
L C   0   1.525   0.000   0.000
L CB  0  -0.522  -0.773  -1.214
L O   3   0.625   1.063   0.000
L CG  4   0.678   1.371   0.000
L CD1 5   0.530   1.430   0.000
L CD2 5   0.535  -0.774   1.200
K N   0  -0.526   1.362   0.000
K CA  0   0.000   0.000   0.000
K C   0   1.526   0.000   0.000
K CB  0  -0.524  -0.778  -1.208
K O   3   0.626   1.062   0.000
K CG  4   0.619   1.390   0.000
K CD  5   0.559   1.417   0.000
K CE  6   0.560   1.416   0.000
K NZ  7   0.554   1.387   0.000
M N   0  -0.521   1.364   0.000
M CA  0   0.000   0.000   0.000
M C   0   1.525   0.000   0.000
M CB  0  -0.523  -0.776  -1.210
M O   3   0.625   1.062   0.000
M CG  4   0.613   1.391   0.000
M SD  5   0.703   1.695   0.000
M CE  6   0.320   1.786   0.000
F N   0  -0.518   1.363   0.000
F CA  0   0.000   0.000   0.000
F C   0   1.524   0.000   0.000
F CB  0  -0.525  -0.776  -1.212
F O   3   0.626   1.062   0.000
F CG  4   0.607   1.377   0.000
F CD1 5   0.709   1.195   0.000
F CD2 5   0.706  -1.196   0.000
F CE1 5   2.102   1.198   0.000
F CE2 5   2.098  -1.201   0.000
F CZ  5   2.794  -0.003  -0.001
P N   0  -0.566   1.351   0.000
P CA  0   0.000   0.000   0.000
P C   0   1.527   0.000   0.000
P CB  0  -0.546  -0.611  -1.293
P O   3   0.621   1.066   0.000
P CG  4   0.382   1.445   0.000
P CD  5   0.477   1.424   0.000
S N   0  -0.529   1.360   0.000
S CA  0   0.000   0.000   0.000
S C   0   1.525   0.000   0.000
S CB  0  -0.518  -0.777  -1.211
S O   3   0.626   1.062   0.000
S OG  4   0.503   1.325   0.000
T N   0  -0.517   1.364   0.000
T CA  0   0.000   0.000   0.000
T C   0   1.526   0.000   0.000
T CB  0  -0.516  -0.793  -1.215
T O   3   0.626   1.062   0.000
T CG2 4   0.550  -0.718  -1.228
T OG1 4   0.472   1.353   0.000
W N   0  -0.521   1.363   0.000
W CA  0   0.000   0.000   0.000
W C   0   1.525   0.000   0.000
W CB  0  -0.523  -0.776  -1.212
W O   3   0.627   1.062   0.000
W CG  4   0.609   1.370   0.000
W CD1 5   0.824   1.091   0.000
W CD2 5   0.854  -1.148  -0.005
W CE2 5   2.186  -0.678  -0.007
W CE3 5   0.622  -2.530  -0.007
W NE1 5   2.140   0.690  -0.004
W CH2 5   3.028  -2.890  -0.013
W CZ2 5   3.283  -1.543  -0.011
W CZ3 5   1.715  -3.389  -0.011
Y N   0  -0.522   1.362   0.000
Y CA  0   0.000   0.000   0.000
Y C   0   1.524   0.000   0.000
Y CB  0  -0.522  -0.776  -1.213
Y O   3   0.627   1.062   0.000
Y CG  4   0.607   1.382   0.000
Y CD1 5   0.716   1.195   0.000
Y CD2 5   0.713  -1.194  -0.001
Y CE1 5   2.107   1.200  -0.002
Y CE2 5   2.104  -1.201  -0.003
Y OH  5   4.168  -0.002  -0.005
Y CZ  5   2.791  -0.001  -0.003
V N   0  -0.494   1.373   0.000
V CA  0   0.000   0.000   0.000
V C   0   1.527   0.000   0.000
V CB  0  -0.533  -0.795  -1.213
V O   3   0.627   1.062   0.000
V CG1 4   0.540   1.429   0.000
V CG2 4   0.533  -0.776   1.203
"""


def _literature_positions() -> dict[str, list[tuple[str, int, np.ndarray]]]:
    table: dict[str, list] = {r: [] for r in RESTYPES}
    for line in _LITERATURE_POSITIONS.strip().splitlines():
        residue, atom, group, *xyz = line.split()
        table[residue].append((atom, int(group), np.array([float(v) for v in xyz])))
    return table


LITERATURE = _literature_positions()


def chi_atoms(residue: str) -> list[tuple[str, str, str, str]]:
    chain = ["N", "CA", *CHI_CHAIN[residue].split()]
    return [tuple(chain[k : k + 4]) for k in range(len(chain) - 3)]


def atom14_names(residue: str) -> list[str]:
    names = ["N", "CA", "C", "O", *ATOM14_SIDE_CHAIN[residue].split()]
    return names + [""] * (14 - len(names))


def _frame(x_axis, xy_point, origin) -> np.ndarray:
    """4x4 frame with x along `x_axis`, `xy_point` in the xy-plane (y > 0), at `origin`."""
    ex = x_axis / np.linalg.norm(x_axis)
    ey = xy_point - np.dot(xy_point, ex) * ex
    ey = ey / np.linalg.norm(ey)
    m = np.eye(4)
    m[:3, :3] = np.stack([ex, ey, np.cross(ex, ey)], axis=-1)
    m[:3, 3] = origin
    return m


def _tables() -> dict[str, np.ndarray]:
    t = {
        "chi_mask": np.zeros((NUM_RESTYPES, 4), np.float32),
        "chi_pi_periodic": np.zeros((NUM_RESTYPES, 4), np.float32),
        "chi_atom37": np.zeros((NUM_RESTYPES, 4, 4), np.int64),
        "atom14_to_atom37": np.zeros((NUM_RESTYPES, 14), np.int64),
        "atom37_to_atom14": np.zeros((NUM_RESTYPES, 37), np.int64),
        "atom14_mask": np.zeros((NUM_RESTYPES, 14), np.float32),
        "atom37_mask": np.zeros((NUM_RESTYPES, 37), np.float32),
        "atom14_group": np.zeros((NUM_RESTYPES, 14), np.int64),
        "atom14_literature": np.zeros((NUM_RESTYPES, 14, 3), np.float32),
        "atom14_ambiguous": np.zeros((NUM_RESTYPES, 14), np.float32),
        "atom14_swap": np.tile(np.arange(14), (NUM_RESTYPES, 1)),
        "default_frames": np.zeros((NUM_RESTYPES, 8, 4, 4), np.float32),  # all zero where no group
        "group_base_atom37": np.zeros((NUM_RESTYPES, 8, 3), np.int64),
        "group_exists": np.zeros((NUM_RESTYPES, 8), np.float32),
        "group_ambiguous": np.zeros((NUM_RESTYPES, 8), np.float32),
    }
    t["group_exists"][:, [0, 3]] = 1.0  # backbone and psi groups, the unknown residue's too
    t["group_base_atom37"][:, 0] = [ATOM_INDEX[a] for a in ("C", "CA", "N")]
    t["group_base_atom37"][:, 3] = [ATOM_INDEX[a] for a in ("CA", "C", "O")]
    for r, residue in enumerate(RESTYPES):
        names = atom14_names(residue)
        for i, name in enumerate(names):
            if name:
                t["atom14_to_atom37"][r, i] = ATOM_INDEX[name]
                t["atom37_to_atom14"][r, ATOM_INDEX[name]] = i
                t["atom14_mask"][r, i] = 1.0
                t["atom37_mask"][r, ATOM_INDEX[name]] = 1.0
        pos = {}
        for atom, group, xyz in LITERATURE[residue]:
            pos[atom] = xyz
            t["atom14_group"][r, names.index(atom)] = group
            t["atom14_literature"][r, names.index(atom)] = xyz
        chis = chi_atoms(residue)
        for k, atoms in enumerate(chis):
            t["chi_mask"][r, k] = 1.0
            t["chi_atom37"][r, k] = [ATOM_INDEX[a] for a in atoms]
            t["group_exists"][r, 4 + k] = 1.0
            t["group_base_atom37"][r, 4 + k] = [ATOM_INDEX[a] for a in atoms[1:]]
        for a, b in SYMMETRIC_PAIRS.get(residue, ()):
            i, j = names.index(a), names.index(b)
            t["atom14_swap"][r, [i, j]] = j, i
            t["atom14_ambiguous"][r, [i, j]] = 1.0
        if residue in SYMMETRIC_PAIRS:
            t["chi_pi_periodic"][r, len(chis) - 1] = 1.0
            t["group_ambiguous"][r, 4 + len(chis) - 1] = 1.0
        # Default frames: each group's frame in the backbone frame (phi, psi, chi1) or in the
        # previous chi group's frame (chi2-4), at zero torsion.
        frames = t["default_frames"][r]
        frames[0] = frames[1] = np.eye(4)  # backbone; pre-omega moves no atom
        frames[2] = _frame(pos["N"] - pos["CA"], np.array([1.0, 0.0, 0.0]), pos["N"])
        frames[3] = _frame(pos["C"] - pos["CA"], pos["CA"] - pos["N"], pos["C"])
        if chis:
            a, b, c, _ = (pos[x] for x in chis[0])
            frames[4] = _frame(c - b, a - b, c)
        for k in range(1, len(chis)):
            end = pos[chis[k][2]]  # the axis starts at the previous group's origin
            frames[4 + k] = _frame(end, np.array([-1.0, 0.0, 0.0]), end)
    return t


_T = _tables()
CHI_MASK = _T["chi_mask"]  # [21, 4] chis the residue has
CHI_PI_PERIODIC = _T["chi_pi_periodic"]  # [21, 4]
CHI_ATOM37 = _T["chi_atom37"]  # [21, 4, 4] atom37 indices of each chi's four atoms
ATOM14_TO_ATOM37 = _T["atom14_to_atom37"]  # [21, 14] (0 where no atom)
ATOM37_TO_ATOM14 = _T["atom37_to_atom14"]  # [21, 37] (0 where no atom)
ATOM14_MASK = _T["atom14_mask"]  # [21, 14] atoms the residue has
ATOM37_MASK = _T["atom37_mask"]  # [21, 37]
ATOM14_GROUP = _T["atom14_group"]  # [21, 14] rigid group of each atom
ATOM14_LITERATURE = _T["atom14_literature"]  # [21, 14, 3] positions in their group's frame
ATOM14_AMBIGUOUS = _T["atom14_ambiguous"]  # [21, 14] 1 for atoms of a symmetric pair
ATOM14_SWAP = _T["atom14_swap"]  # [21, 14] atom14 index of each atom's partner (itself if none)
DEFAULT_FRAMES = _T["default_frames"]  # [21, 8, 4, 4] rigid groups at zero torsion
GROUP_BASE_ATOM37 = _T["group_base_atom37"]  # [21, 8, 3] atoms a true group frame is built from
GROUP_EXISTS = _T["group_exists"]  # [21, 8]
GROUP_AMBIGUOUS = _T["group_ambiguous"]  # [21, 8] the group turned by a symmetric pair's flip
GLYCINE = RESTYPES.index("G")
