"""Published figures a GPU check compares with: datasheet peaks and NVIDIA's per-GPU ResNet-50
training throughput. Each figure carries its source; a GPU not listed gets no anchor, never a
guessed one."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Dense (no structured sparsity) peak TFLOP/s from NVIDIA's datasheets. The datasheets print the
# Tensor Core figures "with sparsity"; the dense figure is half of that.
# H200 SXM and GH200 print the H100 SXM's peaks (the same GPU die and clocks; more, faster memory).
H100_SXM_PEAKS = {"fp64": 34.0, "fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}
DATASHEETS = {
    "H100 SXM5": ("NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column", H100_SXM_PEAKS),
    "H100 PCIe": ("NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column",
                  {"fp64": 26.0, "fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5}),
    "H100 NVL": ("NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column",
                 {"fp64": 30.0, "fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}),
    "H200 SXM": ("NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column", H100_SXM_PEAKS),
    "GH200": ("NVIDIA GH200 Grace Hopper Superchip datasheet (H100 GPU figures)", H100_SXM_PEAKS),
    "A100": ("NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe columns agree on peaks)",
             {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    "V100 SXM2": ("NVIDIA Tesla V100 datasheet, V100 SXM2 column",
                  {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}),
    "V100 PCIe": ("NVIDIA Tesla V100 datasheet, V100 PCIe column",
                  {"fp64": 7.0, "fp32": 14.0, "fp16": 112.0}),
}

# torch.cuda.get_device_name() -> datasheet entry; first match wins (H100 PCIe before H100 SXM).
_MODELS = [
    (r"GH200", "GH200"),
    (r"H200", "H200 SXM"),
    (r"H100.*NVL", "H100 NVL"),
    (r"H100.*PCI", "H100 PCIe"),
    (r"H100", "H100 SXM5"),
    (r"A100", "A100"),
    (r"V100.*PCI", "V100 PCIe"),
    (r"V100", "V100 SXM2"),
]

# NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "Training
# performance results" (pytorch-21.03 NGC container, 1 GPU rows; ImageNet through DALI, batch 256).
# "mixed precision" there is AMP with fp16. {device-name pattern: (section, {precision: images/s})}
_RESNET50_SOURCE = "NVIDIA DeepLearningExamples PyTorch ResNet50 v1.5 README, Training performance"
# H100 SXM: DeepLearningExamples has no H100 table, so the figure is derived from NVIDIA's MLPerf
# Training v3.0 ResNet-50 result on 8 DGX H100 (64 GPUs): the `tracked_stats` throughput of epochs
# 20 to 35 in its result_0.txt lies between 293,814 and 295,598 images/s, 4,591 to 4,619 per GPU.
# That is MXNet, fp16 mixed precision, NHWC, real ImageNet through DALI, and 64 GPUs with their
# allreduce: an anchor for the check's fp16 parts, not a figure of the same code.
_MLPERF_H100 = ("MLPerf Training v3.0, NVIDIA, github.com/mlcommons/training_results_v3.0, "
                "NVIDIA/results/dgxh100_n8_ngc23.04_mxnet/resnet/result_0.txt: tracked_stats throughput "
                "293,814-295,598 images/s over epochs 20-35 on 64 H100 (8 DGX H100), / 64 = 4,591-4,619 per GPU "
                "(MXNet, fp16 AMP, NHWC, DALI)")
RESNET50 = [
    (r"A100.*80GB", f"{_RESNET50_SOURCE}: NVIDIA DGX A100 (8x A100 80GB), 1 GPU", {"tf32": 938.0, "fp16": 2470.0}),
    (r"V100.*32GB", f"{_RESNET50_SOURCE}: NVIDIA DGX-1 32GB (8x V100 32GB), 1 GPU", {"fp32": 356.0, "fp16": 1156.0}),
    (r"V100", f"{_RESNET50_SOURCE}: NVIDIA DGX-1 16GB (8x V100 16GB), 1 GPU", {"fp32": 367.0, "fp16": 1200.0}),
    (r"H100 80GB HBM3|H100 SXM", _MLPERF_H100, {"fp16": 4600.0}),
]


@dataclass(frozen=True)
class Anchor:
    value: float
    unit: str
    source: str


def datasheet(device_name: str) -> tuple[str, str, dict[str, float]] | None:
    """(model, source, peaks by precision) of a device name, or None when no datasheet is known."""
    for pattern, model in _MODELS:
        if re.search(pattern, device_name):
            source, peaks = DATASHEETS[model]
            return model, source, dict(peaks)  # a copy: the H100 SXM figures are shared
    return None


def peak_tflops(device_name: str, precision: str) -> Anchor | None:
    found = datasheet(device_name)
    if not found or precision not in found[2]:
        return None
    model, source, peaks = found
    return Anchor(peaks[precision], "TFLOP/s", f"{source} ({model}, {precision}, dense)")


def resnet50_images_per_s(device_name: str, precision: str) -> Anchor | None:
    for pattern, source, figures in RESNET50:
        if re.search(pattern, device_name):
            if precision in figures:
                return Anchor(figures[precision], "images/s", source)
            return None
    return None


# Per-direction bandwidth of one PCIe lane in GB/s by generation (after 8b/10b or 128b/130b coding).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def link_bandwidth(links: dict) -> Anchor | None:
    """The bus bandwidth an allreduce between this machine's GPUs can reach: the sum of one GPU's
    active NVLink links as nvidia-smi reports them, else its PCIe link (generation x width)."""
    nvlink = links.get("nvlink_GBps") or []
    if nvlink:
        return Anchor(round(sum(nvlink), 1), "GB/s",
                      f"nvidia-smi nvlink -s: {len(nvlink)} active links of GPU 0, summed")
    gen, width = links.get("pcie_gen"), links.get("pcie_width")
    if gen in PCIE_LANE_GBPS and width:
        return Anchor(round(PCIE_LANE_GBPS[gen] * width, 1), "GB/s",
                      f"nvidia-smi: PCIe gen {gen} x{width} of GPU 0, per direction")
    return None
