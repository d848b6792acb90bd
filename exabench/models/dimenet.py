"""DimeNet++ as the MLCommons HPC OC20 reference builds it (ocpmodels DimeNetPlusPlusWrap on the
torch_geometric 2021 DimeNet blocks), in plain torch: no torch_geometric, torch_scatter or
torch_sparse.

What the reference computes, kept here:
- the graph comes with the data (edge_index rows = neighbour j, source; cols = centre i), each edge
  with the integer cell offset of the neighbour's periodic image; distances are
  |pos_j - pos_i + offset . cell|;
- radial basis: sin(n pi d / c) Bessel functions (n = 1..num_radial, the frequencies are trained)
  times the polynomial envelope 1/x + a x^(p-1) + b x^p + c x^(p+1), p = exponent + 1;
- angular basis: spherical Bessel functions j_l(z_ln d / c), normalised by
  1 / sqrt(j_(l+1)(z_ln)^2 / 2) with z_ln the n-th zero of j_l, times the envelope, times the real
  spherical harmonic Y_l^0 of the angle k->j->i (l-major, n-minor);
- triplets k->j->i for every pair of edges k->j, j->i, except k = i in the same periodic image;
- angles from detached positions (forces flow through distances only, as in the reference);
- the embedding of 95 atomic numbers, interaction blocks with a down-projection to int_emb_size,
  output blocks with an up-projection to out_emb_channels, glorot-orthogonal initialisation with
  scale 2, output layers initialised to 0, swish activations;
- energy = sum over atoms of the output blocks; forces = -dE/dpos (create_graph while training).

The parameter count at the reference configuration (hidden 192, 3 blocks, ...) is checked in
tests/integration/test_oc20.py against the reference model built from its own code.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


def swish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


def glorot_orthogonal_(weight: torch.Tensor, scale: float = 2.0) -> None:
    """Orthogonal init rescaled to variance scale / (fan_in + fan_out)."""
    with torch.no_grad():
        nn.init.orthogonal_(weight)
        weight.mul_((scale / ((weight.size(-2) + weight.size(-1)) * weight.var())).sqrt())


def scatter_sum(src: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    return src.new_zeros((size,) + tuple(src.shape[1:])).index_add(0, index, src)


# ---- basis functions ------------------------------------------------------------------------
class Envelope(nn.Module):
    def __init__(self, exponent: int):
        super().__init__()
        self.p = exponent + 1
        self.a = -(self.p + 1) * (self.p + 2) / 2
        self.b = self.p * (self.p + 2)
        self.c = -self.p * (self.p + 1) / 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xp0 = x.pow(self.p - 1)
        return 1.0 / x + self.a * xp0 + self.b * xp0 * x + self.c * xp0 * x * x


class BesselBasis(nn.Module):
    def __init__(self, num_radial: int, cutoff: float, envelope_exponent: int):
        super().__init__()
        self.cutoff = cutoff
        self.envelope = Envelope(envelope_exponent)
        self.freq = nn.Parameter(torch.empty(num_radial))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.freq.copy_(torch.arange(1, self.freq.numel() + 1) * math.pi)

    def forward(self, dist: torch.Tensor) -> torch.Tensor:
        x = dist.unsqueeze(-1) / self.cutoff
        return self.envelope(x) * torch.sin(self.freq * x)


def spherical_bessel(l_max: int, x: torch.Tensor) -> list[torch.Tensor]:
    """[j_0(x), ..., j_l_max(x)] by the upward recurrence j_(l+1) = (2l+1)/x j_l - j_(l-1)."""
    j = [torch.sin(x) / x]
    if l_max >= 1:
        j.append(torch.sin(x) / x**2 - torch.cos(x) / x)
    for order in range(1, l_max):
        j.append((2 * order + 1) / x * j[order] - j[order - 1])
    return j


def _spherical_bessel_np(x: float, order: int) -> float:
    from scipy import special
    return float(np.sqrt(np.pi / (2 * x)) * special.jv(order + 0.5, x))


def spherical_bessel_zeros(num_spherical: int, num_radial: int) -> np.ndarray:
    """(num_spherical, num_radial) first positive zeros of j_l, found between the zeros of j_(l-1)
    (they interlace); float32 as the reference tabulates them."""
    from scipy.optimize import brentq
    zeros = np.zeros((num_spherical, num_radial), dtype=np.float32)
    points = np.arange(1, num_radial + num_spherical) * np.pi  # zeros of j_0
    zeros[0] = points[:num_radial]
    for order in range(1, num_spherical):
        roots = np.array([brentq(_spherical_bessel_np, points[k], points[k + 1], args=(order,))
                          for k in range(len(points) - 1)], dtype=np.float32)
        zeros[order] = roots[:num_radial]
        points = roots
    return zeros


def legendre(l_max: int, z: torch.Tensor) -> list[torch.Tensor]:
    p = [torch.ones_like(z), z]
    for order in range(2, l_max + 1):
        p.append(((2 * order - 1) * z * p[order - 1] - (order - 1) * p[order - 2]) / order)
    return p[:l_max + 1]


class SphericalBasis(nn.Module):
    def __init__(self, num_spherical: int, num_radial: int, cutoff: float, envelope_exponent: int):
        super().__init__()
        self.num_spherical, self.num_radial, self.cutoff = num_spherical, num_radial, cutoff
        self.envelope = Envelope(envelope_exponent)
        zeros = spherical_bessel_zeros(num_spherical, num_radial).astype(np.float64)
        norm = np.array([[1.0 / math.sqrt(0.5 * _spherical_bessel_np(z, order + 1) ** 2) for z in row]
                         for order, row in enumerate(zeros)])
        self.register_buffer("zeros", torch.tensor(zeros, dtype=torch.float32), persistent=False)
        self.register_buffer("norm", torch.tensor(norm, dtype=torch.float32), persistent=False)
        self.register_buffer("sph_prefactor", torch.tensor(
            [math.sqrt((2 * order + 1) / (4 * math.pi)) for order in range(num_spherical)]), persistent=False)

    def forward(self, dist: torch.Tensor, angle: torch.Tensor, idx_kj: torch.Tensor) -> torch.Tensor:
        x = dist / self.cutoff
        n, k = self.num_spherical, self.num_radial
        args = x[:, None, None] * self.zeros  # (E, n, k)
        rbf = self._bessel(args)  # j_l on its own zeros, (E, n, k)
        rbf = self.envelope(x)[:, None, None] * rbf * self.norm
        cbf = torch.stack(legendre(n - 1, torch.cos(angle)), dim=1) * self.sph_prefactor  # (T, n)
        return (rbf[idx_kj] * cbf[:, :, None]).reshape(-1, n * k)

    def _bessel(self, args: torch.Tensor) -> torch.Tensor:
        """(E, n, k): j_l evaluated at args[:, l, :] for each order l."""
        per_order = [spherical_bessel(order, args[:, order, :])[order] for order in range(self.num_spherical)]
        return torch.stack(per_order, dim=1)


# ---- blocks ---------------------------------------------------------------------------------
class ResidualLayer(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin1, self.lin2):
            glorot_orthogonal_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + swish(self.lin2(swish(self.lin1(x))))


class EmbeddingBlock(nn.Module):
    NUM_ELEMENTS = 95  # atomic numbers 0..94

    def __init__(self, num_radial: int, hidden: int):
        super().__init__()
        self.emb = nn.Embedding(self.NUM_ELEMENTS, hidden)
        self.lin_rbf = nn.Linear(num_radial, hidden)
        self.lin = nn.Linear(3 * hidden, hidden)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.emb.weight.uniform_(-math.sqrt(3), math.sqrt(3))
        self.lin_rbf.reset_parameters()
        self.lin.reset_parameters()

    def forward(self, z, rbf, i, j):
        x = self.emb(z)
        return swish(self.lin(torch.cat([x[i], x[j], swish(self.lin_rbf(rbf))], dim=-1)))


class InteractionPPBlock(nn.Module):
    def __init__(self, hidden: int, int_emb_size: int, basis_emb_size: int, num_spherical: int, num_radial: int,
                 num_before_skip: int, num_after_skip: int):
        super().__init__()
        self.lin_rbf1 = nn.Linear(num_radial, basis_emb_size, bias=False)
        self.lin_rbf2 = nn.Linear(basis_emb_size, hidden, bias=False)
        self.lin_sbf1 = nn.Linear(num_spherical * num_radial, basis_emb_size, bias=False)
        self.lin_sbf2 = nn.Linear(basis_emb_size, int_emb_size, bias=False)
        self.lin_kj = nn.Linear(hidden, hidden)
        self.lin_ji = nn.Linear(hidden, hidden)
        self.lin_down = nn.Linear(hidden, int_emb_size, bias=False)
        self.lin_up = nn.Linear(int_emb_size, hidden, bias=False)
        self.layers_before_skip = nn.ModuleList(ResidualLayer(hidden) for _ in range(num_before_skip))
        self.lin = nn.Linear(hidden, hidden)
        self.layers_after_skip = nn.ModuleList(ResidualLayer(hidden) for _ in range(num_after_skip))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_rbf1, self.lin_rbf2, self.lin_sbf1, self.lin_sbf2, self.lin_kj, self.lin_ji,
                    self.lin_down, self.lin_up, self.lin):
            glorot_orthogonal_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        for layer in (*self.layers_before_skip, *self.layers_after_skip):
            layer.reset_parameters()

    def forward(self, x, rbf, sbf, idx_kj, idx_ji):
        x_ji = swish(self.lin_ji(x))
        x_kj = swish(self.lin_kj(x)) * self.lin_rbf2(self.lin_rbf1(rbf))
        x_kj = swish(self.lin_down(x_kj))
        x_kj = x_kj[idx_kj] * self.lin_sbf2(self.lin_sbf1(sbf))
        x_kj = swish(self.lin_up(scatter_sum(x_kj, idx_ji, x.size(0))))
        h = x_ji + x_kj
        for layer in self.layers_before_skip:
            h = layer(h)
        h = swish(self.lin(h)) + x
        for layer in self.layers_after_skip:
            h = layer(h)
        return h


class OutputPPBlock(nn.Module):
    def __init__(self, num_radial: int, hidden: int, out_emb_channels: int, out_channels: int, num_layers: int):
        super().__init__()
        self.lin_rbf = nn.Linear(num_radial, hidden, bias=False)
        self.lin_up = nn.Linear(hidden, out_emb_channels)
        self.lins = nn.ModuleList(nn.Linear(out_emb_channels, out_emb_channels) for _ in range(num_layers))
        self.lin = nn.Linear(out_emb_channels, out_channels, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot_orthogonal_(self.lin_rbf.weight)
        glorot_orthogonal_(self.lin_up.weight)  # its bias keeps torch's default, as in the reference
        for lin in self.lins:
            glorot_orthogonal_(lin.weight)
            nn.init.zeros_(lin.bias)
        nn.init.zeros_(self.lin.weight)

    def forward(self, x, rbf, i, num_nodes: int):
        x = scatter_sum(self.lin_rbf(rbf) * x, i, num_nodes)
        x = self.lin_up(x)
        for lin in self.lins:
            x = swish(lin(x))
        return self.lin(x)


# ---- the model ------------------------------------------------------------------------------
def triplets(edge_index: torch.Tensor, cell_offsets: torch.Tensor, num_nodes: int):
    """(idx_i, idx_j, idx_k, idx_kj, idx_ji) of the triplets k->j->i: every edge kj into the source j
    of an edge ji, except the edge straight back to i in the same image."""
    j, i = edge_index
    order = torch.argsort(i, stable=True)                  # edges grouped by their target
    into = torch.bincount(i, minlength=num_nodes)          # edges into each atom
    start = torch.cumsum(into, 0) - into
    count = into[j]                                        # edges k->j for each edge j->i
    idx_ji = torch.repeat_interleave(torch.arange(len(j), device=j.device), count)
    first = torch.repeat_interleave(torch.cumsum(count, 0) - count, count)
    rank = torch.arange(len(idx_ji), device=j.device) - first
    idx_kj = order[start[j[idx_ji]] + rank]
    idx_i, idx_j, idx_k = i[idx_ji], j[idx_ji], j[idx_kj]
    keep = (idx_i != idx_k) | torch.any(cell_offsets[idx_kj] + cell_offsets[idx_ji] != 0, dim=-1)
    return idx_i[keep], idx_j[keep], idx_k[keep], idx_kj[keep], idx_ji[keep]


class DimeNetPlusPlus(nn.Module):
    """Energy (per system) and forces (per atom) of a batch of periodic systems."""

    def __init__(self, hidden_channels: int = 192, num_blocks: int = 3, int_emb_size: int = 64,
                 basis_emb_size: int = 8, out_emb_channels: int = 192, num_spherical: int = 7, num_radial: int = 6,
                 cutoff: float = 6.0, envelope_exponent: int = 5, num_before_skip: int = 1, num_after_skip: int = 2,
                 num_output_layers: int = 3, num_targets: int = 1, regress_forces: bool = True):
        super().__init__()
        self.cutoff, self.regress_forces = cutoff, regress_forces
        self.rbf = BesselBasis(num_radial, cutoff, envelope_exponent)
        self.sbf = SphericalBasis(num_spherical, num_radial, cutoff, envelope_exponent)
        self.emb = EmbeddingBlock(num_radial, hidden_channels)
        self.output_blocks = nn.ModuleList(
            OutputPPBlock(num_radial, hidden_channels, out_emb_channels, num_targets, num_output_layers)
            for _ in range(num_blocks + 1))
        self.interaction_blocks = nn.ModuleList(
            InteractionPPBlock(hidden_channels, int_emb_size, basis_emb_size, num_spherical, num_radial,
                               num_before_skip, num_after_skip) for _ in range(num_blocks))

    def energy(self, batch: dict) -> torch.Tensor:
        pos, edge_index, offsets_int = batch["pos"], batch["edge_index"], batch["cell_offsets"]
        num_nodes = pos.size(0)
        # Each edge's image offset in Angstrom, from its system's cell.
        cell = torch.repeat_interleave(batch["cell"], batch["neighbors"], dim=0)
        offsets = torch.bmm(offsets_int.to(cell.dtype).view(-1, 1, 3), cell).view(-1, 3)
        j, i = edge_index
        dist = (pos[j] - pos[i] + offsets).norm(dim=-1)
        idx_i, idx_j, idx_k, idx_kj, idx_ji = triplets(edge_index, offsets_int, num_nodes)
        p = pos.detach()
        pos_ji = p[idx_j] - p[idx_i] + offsets[idx_ji]
        pos_kj = p[idx_k] - p[idx_j] + offsets[idx_kj]
        angle = torch.atan2(torch.cross(pos_ji, pos_kj, dim=-1).norm(dim=-1), (pos_ji * pos_kj).sum(dim=-1))
        rbf = self.rbf(dist)
        sbf = self.sbf(dist, angle, idx_kj)
        x = self.emb(batch["atomic_numbers"].long(), rbf, i, j)
        per_atom = self.output_blocks[0](x, rbf, i, num_nodes)
        for interaction, output in zip(self.interaction_blocks, self.output_blocks[1:]):
            x = interaction(x, rbf, sbf, idx_kj, idx_ji)
            per_atom = per_atom + output(x, rbf, i, num_nodes)
        return scatter_sum(per_atom, batch["batch"], len(batch["natoms"]))

    def forward(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(energy (B,), forces (N, 3) or None); gradients on even under no_grad, as forces need them."""
        if not self.regress_forces:
            return self.energy(batch).view(-1), None
        with torch.enable_grad():
            pos = batch["pos"].detach().requires_grad_(True)
            energy = self.energy(dict(batch, pos=pos))
            forces = -torch.autograd.grad(energy, pos, grad_outputs=torch.ones_like(energy),
                                          create_graph=self.training)[0]
        return energy.view(-1), forces
