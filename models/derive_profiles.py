#!/usr/bin/env python3
"""Derived hardware profiles: the papers' machines, scaled from a base profile by spec ratios.

    python3 models/derive_profiles.py [--base models/profiles/h100.ini] [--out models/profiles]

Every derived number says where it comes from. Operator models are the base profile's, with
each slope (seconds per byte) multiplied by the ratio of the resource that bounds it:
  * memory-bound pieces (streaming kernels, hash tables and gathers beyond the L2) by
    base memory bandwidth / target memory bandwidth;
  * cache-resident pieces (tables and gather sources inside the L2, partitions inside shared
    memory) by base (SMs x clock) / target (SMs x clock);
constants (launch + synchronization) are kept, and the L2 break of the table-size and
gather-source models moves to the target's L2 size. Of the fitted cache sizes of the models
with cache terms (cache.far, cache.near), the far one (an effective L2) scales with the L2 size
and the near one (per-SM L1 / shared memory, alike on these GPUs) is kept; their miss costs
scale as the piece's other slopes. Re-run after `joinlab calibrate` replaces the base profile:
the derived profiles follow the measured models.

The first-pass chunk partition's rates by fanout ([gpu] chunk_partition_<fanout>_bw, which the
base does not measure) come from the measured h200 profile (`--chunk-partition-from`), times
target memory bandwidth / H200 memory bandwidth (datasheet peaks), each line saying so.

CPUs ([cpu]): each machine states its sockets, cores per socket, clock and memory bandwidth per
socket from public specs; the per-core rates are the base profile's times target clock / base
clock (the same instructions per cycle assumed), each line saying so. [msg] (the transports'
software cost) is the base's, kept: the same software stacks.
"""
import argparse
import datetime
import os
import re
import sys

# --- the machines ------------------------------------------------------------------------------
# Each entry: value, source. Memory bandwidths are datasheet peaks; the scaling uses the ratio
# of peaks (the base profile's measured/achieved bandwidth times that ratio is the target's).
H100_PEAK_BW = (3.35e12, "H100 SXM5 HBM3 3.35 TB/s (NVIDIA H100 datasheet)")
H100_COMPUTE = (132 * 1.98, "H100 SXM5: 132 SMs x 1.98 GHz (NVIDIA H100 datasheet)")

MACHINES = {
    "h200": {
        "description": "NVIDIA H200 141 GB in an HGX H200-like node (8 x NVSwitch, NDR 400 per GPU)",
        "status": "provisional: from specs, not calibrated (scaled from h100 by measured bandwidth ratios)",
        "peak_bw": (4.8e12, "H200 HBM3e 4.8 TB/s (NVIDIA H200 datasheet)"),
        # The device machine measured both: 4.2 TB/s on the H200, about 3.0 TB/s on the H100.
        "bw_ratio_override": (4.2e12 / 3.0e12, "device copy 4.2 TB/s on H200 / 3.0 TB/s on H100, measured (DESIGN.md 8)"),
        "compute": (132 * 1.98, "H200: same GH100 die, 132 SMs x 1.98 GHz (NVIDIA H200 datasheet)"),
        "gpu": {
            "memory": (141e9, "H200: 141 GB HBM3e (NVIDIA H200 datasheet)"),
            "mem_bw": (4.2e12, "device copy, read+write, measured on the H200 device machine (DESIGN.md 8)"),
            "l2_bytes": (50e6, "50 MB L2 (NVIDIA H200 datasheet)"),
            "sms": (132, "NVIDIA H200 datasheet"),
            "clock_ghz": (1.98, "NVIDIA H200 datasheet"),
        },
        "links": {
            "h2d": (55e9, 1e-5, "pinned H2D, PCIe 5 x16, measured on the H200 device machine (DESIGN.md 8); latency typical"),
            "d2h": (55e9, 1e-5, "pinned D2H, PCIe 5 x16, measured on the H200 device machine (DESIGN.md 8); latency typical"),
            "p2p": (396e9, 3e-6, "GPU0 -> GPU1 P2P copy 396 GB/s over NVLink 4, measured on the 2 x H200 machine (DESIGN.md 8)"),
            "nic": (48e9, 2e-6, "NDR 400 Gb/s = 50 GB/s, ~96% goodput (ConnectX-7 datasheet)"),
        },
        "host": {
            "memory": (2e12, "HGX H200 servers: 2 TB DDR5 typical (vendor configurations)"),
            "mem_bw": (4.0e11, "2 x 8-channel DDR5-4800 = 614 GB/s peak, ~65% achieved (estimate)"),
            "cores": (112, "2 x 56-core Xeon 8480C-class host (estimate)"),
        },
        "cpu": {
            "sockets": (2, "2 x Xeon Platinum 8480C-class CPUs (HGX H200 host; estimate)"),
            "cores": (56, "Xeon Platinum 8480C: 56 cores (Intel ARK)"),
            "clock_ghz": (2.0, "Xeon Platinum 8480C base clock 2.0 GHz (Intel ARK)"),
            "mem_bw": (2.0e11, "8-channel DDR5-4800 = 307.2 GB/s peak per socket (Intel ARK 8480C), ~65% achieved (estimate)"),
            "numa": "pooled",
        },
        "topology": {"gpus_per_node": 8, "intra": "nvswitch", "nics": "per_gpu", "fabric": "star", "levels": 2,
                     "leaf_nodes": 32, "oversubscription": 1, "hop_latency": 3e-7,
                     "source": "HGX H200: 8 GPUs on NVSwitch, one NDR NIC per GPU (NVIDIA HGX H200 datasheet)"},
    },
    "dgx-a100-hdr": {
        "description": "DGX A100 SuperPOD (gao2021's Selene): 8 x A100 80 GB on NVSwitch, 8 x HDR 200 Gb/s per node, "
                       "rail-optimized 3-level fat tree",
        "status": "derived from h100 by spec ratios",
        "peak_bw": (2.039e12, "A100 SXM4 80 GB HBM2e 2.039 TB/s (NVIDIA A100 datasheet)"),
        "compute": (108 * 1.41, "A100: 108 SMs x 1.41 GHz (NVIDIA A100 datasheet)"),
        "gpu": {
            "memory": (80e9, "A100 SXM4 80 GB (NVIDIA A100 datasheet)"),
            "l2_bytes": (40e6, "A100: 40 MB L2 (NVIDIA Ampere architecture whitepaper)"),
            "sms": (108, "NVIDIA A100 datasheet"),
            "clock_ghz": (1.41, "NVIDIA A100 datasheet"),
        },
        "links": {
            "h2d": (25e9, 1e-5, "PCIe 4 x16: 32 GB/s raw, ~25 GB/s pinned copies (DGX A100 user guide; typical)"),
            "d2h": (25e9, 1e-5, "PCIe 4 x16, as h2d"),
            "p2p": (264e9, 3e-6, "NVLink 3: 300 GB/s per direction (A100 datasheet) x 396/450 achieved on NVLink 4 (DESIGN.md 8)"),
            "nic": (24e9, 2e-6, "HDR 200 Gb/s = 25 GB/s, ~96% goodput with GPUDirect RDMA (ConnectX-6 datasheet; gao2021 2)"),
        },
        "host": {
            "memory": (1e12, "DGX A100: 1 TB DDR4 (DGX A100 user guide)"),
            "mem_bw": (2.66e11, "2 x AMD EPYC 7742, 8 x DDR4-3200 each = 409.6 GB/s peak, ~65% achieved (estimate)"),
            "cores": (128, "2 x 64-core EPYC 7742 (DGX A100 user guide)"),
        },
        "cpu": {
            "sockets": (2, "2 x AMD EPYC 7742 (DGX A100 user guide)"),
            "cores": (64, "AMD EPYC 7742: 64 cores (AMD product page)"),
            "clock_ghz": (2.25, "AMD EPYC 7742 base clock 2.25 GHz (AMD product page)"),
            "mem_bw": (1.33e11, "8-channel DDR4-3200 = 204.8 GB/s peak per socket (AMD EPYC 7742), ~65% achieved (estimate)"),
            "numa": "pooled",
        },
        "topology": {"gpus_per_node": 8, "intra": "nvswitch", "nics": "per_gpu", "fabric": "fat_tree", "levels": 3,
                     "leaf_nodes": 20, "oversubscription": 1, "hop_latency": 3e-7,
                     "source": "DGX SuperPOD: rail-optimized full fat tree, leaf/spine/core, 20-node scalable units "
                               "(gao2021 2; DGX SuperPOD A100 reference architecture); HDR switch ~300 ns (QM8700 datasheet)"},
    },
    "v100-edr": {
        "description": "V100 + EDR cluster (thostrup2023): 2 x V100 16 GB per node on PCIe 3, one EDR 100 Gb/s NIC per GPU",
        "status": "derived from h100 by spec ratios",
        "peak_bw": (0.9e12, "V100 HBM2 900 GB/s (NVIDIA V100 datasheet)"),
        "compute": (80 * 1.53, "V100: 80 SMs x 1.53 GHz (NVIDIA V100 datasheet)"),
        "gpu": {
            "memory": (16e9, "V100 16 GB (thostrup2023 6.1)"),
            "l2_bytes": (6e6, "V100: 6 MB L2 (NVIDIA Volta whitepaper)"),
            "sms": (80, "NVIDIA V100 datasheet"),
            "clock_ghz": (1.53, "NVIDIA V100 datasheet"),
        },
        "links": {
            "h2d": (12e9, 1e-5, "PCIe 3 x16: 15.75 GB/s raw, ~12 GB/s pinned copies (typical)"),
            "d2h": (12e9, 1e-5, "PCIe 3 x16, as h2d"),
            "p2p": (10e9, 5e-6, "GPU to GPU through the PCIe root complex (no NVLink in thostrup2023's nodes; typical)"),
            "nic": (11.5e9, 2e-6, "EDR 4x 100 Gb/s = 12.5 GB/s, ~92% goodput (ConnectX-5 datasheet; thostrup2023 6.1)"),
        },
        "host": {
            "memory": (512e9, "512 GB per node (thostrup2023 6.1)"),
            "mem_bw": (1.5e11, "2 x Xeon Gold 5120, 6 x DDR4-2400 each = 230 GB/s peak, ~65% achieved (estimate)"),
            "cores": (28, "2 x 14 cores (thostrup2023 6.1)"),
        },
        # One GPU and one NIC per socket: each rank owns its socket's memory and cores.
        "cpu": {
            "sockets": (2, "2 x Intel Xeon Gold 5120 per node (thostrup2023 6.1)"),
            "cores": (14, "Xeon Gold 5120: 14 cores (thostrup2023 6.1; Intel ARK)"),
            "clock_ghz": (2.2, "Xeon Gold 5120 base clock 2.2 GHz (Intel ARK)"),
            "mem_bw": (7.5e10, "6-channel DDR4-2400 = 115.2 GB/s peak per socket (Intel ARK Xeon Gold 5120), ~65% achieved (estimate)"),
            "numa": "per_socket",
        },
        "topology": {"gpus_per_node": 2, "intra": "pcie", "nics": "per_gpu", "fabric": "star", "levels": 1,
                     "leaf_nodes": 5, "oversubscription": 1, "hop_latency": 1e-7,
                     "source": "5 nodes, 2 x ConnectX-5 EDR per node, one switch (thostrup2023 6.1)"},
    },
    "power9-v100-nvlink2": {
        "description": "IBM AC922 (lutz2022): 2 x POWER9 + 2 x V100-SXM2 16 GB, each GPU on NVLink 2.0 to its CPU",
        "status": "derived from h100 by spec ratios",
        "peak_bw": (0.9e12, "V100-SXM2 HBM2 900 GB/s (lutz2022 2)"),
        "compute": (80 * 1.53, "V100: 80 SMs x 1.53 GHz (lutz2022 6)"),
        "gpu": {
            "memory": (16e9, "16 GiB per GPU (lutz2022 6)"),
            "l2_bytes": (6e6, "V100: 6 MB L2 (NVIDIA Volta whitepaper)"),
            "sms": (80, "lutz2022 6"),
            "clock_ghz": (1.53, "lutz2022 6"),
        },
        "links": {
            "h2d": (67.6e9, 5e-6, "NVLink 2.0 CPU-GPU: 75 GB/s per direction, max effective 62-65.7 GiB/s (lutz2022 2): 63 GiB/s"),
            "d2h": (67.6e9, 5e-6, "NVLink 2.0, as h2d (lutz2022 2)"),
            "p2p": (60e9, 6e-6, "GPUs on different sockets: GPU-CPU NVLink, X-bus, CPU-GPU NVLink; X-bus ~64 GB/s (estimate)"),
            "nic": (12.5e9, 2e-6, "one machine: no network in lutz2022; EDR-class placeholder"),
        },
        "host": {
            "memory": (256e9, "2 x 128 GiB (lutz2022 6)"),
            "mem_bw": (2.72e11, "2 x 170 GB/s per CPU (lutz2022 2), ~80% achieved (estimate)"),
            "cores": (32, "2 x 16 cores (lutz2022 6)"),
        },
        "cpu": {
            "sockets": (2, "2 x IBM POWER9 (lutz2022 6)"),
            "cores": (16, "16 cores per CPU (lutz2022 6)"),
            "clock_ghz": (3.8, "3.8 GHz (lutz2022 6)"),
            "mem_bw": (1.36e11, "170 GB/s per CPU (lutz2022 2), ~80% achieved (estimate)"),
            "numa": "per_socket",
        },
        "topology": {"gpus_per_node": 2, "intra": "pcie", "nics": "per_node", "fabric": "star", "levels": 1,
                     "leaf_nodes": 1, "oversubscription": 1, "hop_latency": 1e-7,
                     "source": "one AC922 8335-GTH; GPU-to-GPU traffic crosses both CPUs (lutz2022 6)"},
    },
    # The Grace Hopper superchip: one H100 and one Grace CPU on a package, joined by NVLink-C2C,
    # the link whose 450 GB/s per direction makes triton's spills cheap (lutz2022's NVLink 2.0
    # argument, seven times over).
    "gh200": {
        "description": "NVIDIA GH200 Grace Hopper Superchip: 72-core Grace CPU with 480 GB LPDDR5X, H100 96 GB HBM3, "
                       "NVLink-C2C between them",
        "status": "derived from h100 by spec ratios",
        "peak_bw": (4.0e12, "GH200's H100 96 GB HBM3 4 TB/s (NVIDIA GH200 Grace Hopper Superchip datasheet)"),
        "compute": (132 * 1.98, "GH200's H100: the GH100 die of the H100 SXM5, 132 SMs x 1.98 GHz (NVIDIA GH200 "
                                "datasheet; NVIDIA H100 datasheet)"),
        "gpu": {
            "memory": (96e9, "96 GB HBM3 (NVIDIA GH200 Grace Hopper Superchip datasheet)"),
            "l2_bytes": (50e6, "50 MB L2 (NVIDIA Hopper whitepaper)"),
            "sms": (132, "NVIDIA H100 datasheet (the GH200's GPU)"),
            "clock_ghz": (1.98, "NVIDIA H100 datasheet (the GH200's GPU)"),
        },
        "links": {
            "h2d": (450e9, 1e-6, "NVLink-C2C 900 GB/s total, 450 GB/s per direction (NVIDIA GH200 Grace Hopper "
                                 "Superchip datasheet), peak; latency about 1 us (estimate)"),
            "d2h": (450e9, 1e-6, "NVLink-C2C, as h2d (NVIDIA GH200 datasheet)"),
            "p2p": (450e9, 1e-6, "one GPU per superchip: no GPU peer; NVLink-C2C's figure as a placeholder"),
            "nic": (48e9, 2e-6, "NDR 400 Gb/s = 50 GB/s per superchip, ~96% goodput (ConnectX-7 datasheet); "
                                "one superchip here: placeholder"),
        },
        "host": {
            "memory": (480e9, "480 GB LPDDR5X (NVIDIA GH200 Grace Hopper Superchip datasheet)"),
            "mem_bw": (4.1e11, "LPDDR5X up to 512 GB/s (NVIDIA GH200 datasheet), ~80% achieved (estimate)"),
            "cores": (72, "72 Arm Neoverse V2 cores (NVIDIA GH200 datasheet)"),
        },
        "cpu": {
            "sockets": (1, "one Grace CPU per superchip (NVIDIA GH200 datasheet)"),
            "cores": (72, "72 Arm Neoverse V2 cores (NVIDIA GH200 datasheet)"),
            "clock_ghz": (3.1, "Grace: about 3.1 GHz (estimate; the datasheet gives no base clock)"),
            "mem_bw": (4.1e11, "LPDDR5X up to 512 GB/s (NVIDIA GH200 datasheet), ~80% achieved (estimate)"),
            "numa": "per_socket",
        },
        "topology": {"gpus_per_node": 1, "intra": "pcie", "nics": "per_node", "fabric": "star", "levels": 1,
                     "leaf_nodes": 1, "oversubscription": 1, "hop_latency": 1e-7,
                     "source": "one GH200 superchip: its GPU reaches host memory over NVLink-C2C (the model's host link)"},
    },
    # maltenberger2025's machine (its Table 1 names the configuration). Figures from IBM's and
    # NVIDIA's public documents; none from the paper's measurements.
    "ac922-v100x4-nvlink2": {
        "description": "IBM AC922 (maltenberger2025): 2 x POWER9 + 4 x V100-SXM2 32 GB, NVLink 2.0 CPU-GPU and GPU-GPU",
        "status": "derived from h100 by spec ratios",
        "peak_bw": (0.9e12, "V100-SXM2 HBM2 900 GB/s (NVIDIA V100 datasheet)"),
        "compute": (80 * 1.53, "V100-SXM2: 80 SMs x 1.53 GHz boost (NVIDIA Tesla V100 architecture whitepaper)"),
        "gpu": {
            "memory": (32e9, "V100-SXM2 32 GB HBM2 (NVIDIA V100 datasheet; the 32 GB part, maltenberger2025 Table 1)"),
            "l2_bytes": (6e6, "V100: 6144 KB L2 (NVIDIA Tesla V100 architecture whitepaper)"),
            "sms": (80, "NVIDIA Tesla V100 architecture whitepaper"),
            "clock_ghz": (1.53, "V100-SXM2 boost clock (NVIDIA Tesla V100 architecture whitepaper)"),
        },
        "links": {
            "h2d": (67.6e9, 5e-6, "NVLink 2.0 CPU-GPU, three bricks of 25 GB/s per direction in the 4-GPU AC922 "
                                  "(IBM Redpaper REDP-5472; V100 whitepaper): 75 GB/s, 62-65.7 GiB/s after packet "
                                  "headers (Lutz et al., SIGMOD 2022, Sec. 2): 63 GiB/s; latency typical (estimate)"),
            "d2h": (67.6e9, 5e-6, "NVLink 2.0 CPU-GPU, as h2d (IBM Redpaper REDP-5472)"),
            # The two GPUs of a socket share three bricks; GPUs of different sockets go through both
            # CPUs and the X-bus. intra = pcie routes every pair over the GPUs' host links, which is
            # what the cross-socket pairs (two in three of a GPU's peers) do.
            "p2p": (67.6e9, 5e-6, "NVLink 2.0 GPU-GPU of one socket, three bricks: 75 GB/s per direction (IBM "
                                  "Redpaper REDP-5472), effective as h2d (estimate); with intra = pcie every pair "
                                  "is routed over the host links, as the cross-socket pairs are (CPU, X-bus, CPU)"),
            "nic": (12.5e9, 2e-6, "one machine: no network in maltenberger2025; EDR-class placeholder"),
        },
        "host": {
            "memory": (512e9, "2 x 256 GB DDR4 (maltenberger2025 Table 1; the AC922 takes up to 2 TB, IBM Redpaper REDP-5472)"),
            "mem_bw": (2.72e11, "2 x 8 DDR4-2666 channels = 2 x 170 GB/s peak (IBM Redpaper REDP-5472), ~80% achieved (estimate)"),
            "cores": (32, "2 x 16 cores (maltenberger2025 Table 1; the AC922's 16-core POWER9, IBM Redpaper REDP-5472)"),
        },
        "cpu": {
            "sockets": (2, "2 x IBM POWER9 (IBM Redpaper REDP-5472)"),
            "cores": (16, "16-core POWER9 (maltenberger2025 Table 1; IBM Redpaper REDP-5472)"),
            "clock_ghz": (2.7, "16-core POWER9 base clock 2.7 GHz (IBM Redpaper REDP-5472; maltenberger2025 Table 1)"),
            "mem_bw": (1.36e11, "8 DDR4-2666 channels = 170 GB/s peak per socket (IBM Redpaper REDP-5472), ~80% achieved (estimate)"),
            "numa": "per_socket",
        },
        "topology": {"gpus_per_node": 4, "intra": "pcie", "nics": "per_node", "fabric": "star", "levels": 1,
                     "leaf_nodes": 1, "oversubscription": 1, "hop_latency": 1e-7,
                     "source": "one AC922, two V100 per POWER9 socket (IBM Redpaper REDP-5472)"},
    },
    "dgx-h100-ndr": {
        "description": "DGX H100 SuperPOD: 8 x H100 SXM5 on NVSwitch, 8 x NDR 400 Gb/s per node, rail-optimized leaf/spine",
        "status": "derived from h100 by spec ratios",
        "peak_bw": H100_PEAK_BW,
        "compute": H100_COMPUTE,
        "gpu": {
            "memory": (80e9, "H100 SXM5 80 GB (NVIDIA H100 datasheet)"),
            "l2_bytes": (50e6, "50 MB L2 (NVIDIA Hopper whitepaper)"),
            "sms": (132, "NVIDIA H100 datasheet"),
            "clock_ghz": (1.98, "NVIDIA H100 datasheet"),
        },
        "links": {
            "h2d": (55e9, 1e-5, "PCIe 5 x16 pinned copies, as measured on the device machine (DESIGN.md 8)"),
            "d2h": (55e9, 1e-5, "PCIe 5 x16, as h2d"),
            "p2p": (396e9, 3e-6, "NVLink 4 P2P copy 396 GB/s, measured on the 2 x H200 machine (DESIGN.md 8)"),
            "nic": (48e9, 2e-6, "NDR 400 Gb/s = 50 GB/s, ~96% goodput (ConnectX-7 datasheet)"),
        },
        "host": {
            "memory": (2e12, "DGX H100: 2 TB DDR5 (DGX H100 user guide)"),
            "mem_bw": (4.0e11, "2 x Xeon 8480C, 8 x DDR5-4800 each = 614 GB/s peak, ~65% achieved (estimate)"),
            "cores": (112, "2 x 56 cores (DGX H100 user guide)"),
        },
        "cpu": {
            "sockets": (2, "2 x Intel Xeon Platinum 8480C (DGX H100 user guide)"),
            "cores": (56, "Xeon Platinum 8480C: 56 cores (Intel ARK)"),
            "clock_ghz": (2.0, "Xeon Platinum 8480C base clock 2.0 GHz (Intel ARK)"),
            "mem_bw": (2.0e11, "8-channel DDR5-4800 = 307.2 GB/s peak per socket (Intel ARK 8480C), ~65% achieved (estimate)"),
            "numa": "pooled",
        },
        "topology": {"gpus_per_node": 8, "intra": "nvswitch", "nics": "per_gpu", "fabric": "fat_tree", "levels": 2,
                     "leaf_nodes": 32, "oversubscription": 1, "hop_latency": 3e-7,
                     "source": "DGX SuperPOD H100: 32-node scalable units, rail-optimized leaf/spine, full bisection "
                               "(DGX SuperPOD H100 reference architecture); QM9700 ~300 ns"},
    },
}

# Models whose first piece is cache- or shared-memory-resident (compute-bound), and whose break
# is the L2 size (moved to the target's L2).
CACHE_FIRST = {"build.linear", "build.chained", "probe.linear", "probe.chained", "gather",
               "partitioned_join.linear", "partitioned_join.chained"}
L2_BREAK = {"build.linear", "build.chained", "probe.linear", "probe.chained", "gather"}


def read_profile(path):
    """Sections in order: [(name, [(key, value, comment)])]."""
    sections, cur = [], None
    for raw in open(path):
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith(";"):
            continue
        if line.startswith("["):
            cur = (line[1:-1].strip(), [])
            sections.append(cur)
            continue
        key, rest = line.split("=", 1)
        value, _, comment = rest.partition("#")
        cur[1].append((key.strip(), value.strip(), comment.strip()))
    return sections


def fmt(x):
    return ("%.4g" % x) if isinstance(x, float) else str(x)


def chunk_partition_rates(path):
    """(profile name, [(key, (value, comment))]) of a measured profile's chunk partition table."""
    if not path or not os.path.exists(path):
        return None
    sections = dict(read_profile(path))
    rates = [(k, (v, c)) for k, v, c in sections.get("gpu", []) if re.fullmatch(r"chunk_partition_\d+_bw", k)]
    if not rates:
        return None
    return dict((k, v) for k, v, _ in sections["profile"])["name"], rates


def derive(base_path, name, m, chunk_source=None):
    base = dict(read_profile(base_path))
    base_name = dict((k, v) for k, v, _ in base["profile"])["name"]
    base_gpu = dict((k, (v, c)) for k, v, c in base["gpu"])
    base_bw_measured = float(base_gpu["mem_bw"][0])
    base_l2 = float(base_gpu["l2_bytes"][0])
    if "bw_ratio_override" in m:
        bw_ratio, bw_src = m["bw_ratio_override"]
    else:
        bw_ratio = m["peak_bw"][0] / H100_PEAK_BW[0]
        bw_src = "%s / %s" % (m["peak_bw"][1], H100_PEAK_BW[1])
    cpu_ratio = m["compute"][0] / H100_COMPUTE[0]
    cpu_src = "%s / %s" % (m["compute"][1], H100_COMPUTE[1])
    l2 = m["gpu"]["l2_bytes"][0]
    today = datetime.date.today().isoformat()
    out = []
    w = out.append
    w("# %s: %s" % (name, m["description"]))
    w("# %s. Generated by models/derive_profiles.py from %s on %s: do not edit, re-run the script." %
      (m["status"][0].upper() + m["status"][1:], os.path.basename(base_path), today))
    w("# Memory-bound slopes x %.4f: 1 / (%s)." % (1 / bw_ratio, bw_src))
    w("# Cache-resident slopes x %.4f: 1 / (%s)." % (1 / cpu_ratio, cpu_src))
    w("")
    w("[profile]")
    w("name = %s" % name)
    w("description = %s" % m["description"])
    w("status = %s" % m["status"])
    w("source = derived from profile %s (%s) by spec ratios: models/derive_profiles.py" % (base_name, base_path.split("/")[-1]))
    w("")
    w("[gpu]")
    gpu = dict(m["gpu"])
    if "mem_bw" not in gpu:
        gpu["mem_bw"] = (base_bw_measured * bw_ratio, "%s measured/assumed %.4g B/s x %.4f (%s)" %
                         (base_name, base_bw_measured, bw_ratio, bw_src))
    for key in ["memory", "mem_bw", "l2_bytes", "sms", "clock_ghz"]:
        v, src = gpu[key]
        w("%-28s # %s" % ("%s = %s" % (key, fmt(float(v))), src))
    w("%-28s # joinlab choice, not hardware" % "streams = 16")
    if chunk_source:  # triton's first-pass chunk partition into device memory, by fanout
        src_name, rates = chunk_source
        ratio = m["peak_bw"][0] / MACHINES["h200"]["peak_bw"][0]
        for key, (v, _) in rates:
            w("%s = %s   # %s's measured %s x %.4f (%s / %s)" %
              (key, fmt(float(v) * ratio), src_name, fmt(float(v)), ratio, m["peak_bw"][1], MACHINES["h200"]["peak_bw"][1]))
    w("")
    w("[host]")
    for key in ["memory", "mem_bw", "cores"]:
        v, src = m["host"][key]
        w("%-28s # %s" % ("%s = %s" % (key, fmt(float(v))), src))
    w("%-28s # one flag read over the host link (typical)" % "poll_seconds = 1e-6")
    base_host = dict((k, v) for k, v, _ in base["host"])
    if "phase_seconds" in base_host:  # joinlab's host work per phase: the same software, kept
        w("%-28s # %s's, kept: joinlab's host work per phase (launch, synchronization), not scaled" %
          ("phase_seconds = %s" % fmt(float(base_host["phase_seconds"])), base_name))
    for link in ["h2d", "d2h", "p2p", "nic"]:
        bw, lat, src = m["links"][link]
        w("")
        w("[link.%s]" % link)
        w("%-28s # %s" % ("bw = %s" % fmt(bw), src))
        w("%-28s # %s" % ("latency = %s" % fmt(lat), src))
    t = m["topology"]
    w("")
    w("[topology]")
    for key in ["gpus_per_node", "intra", "nics", "fabric", "levels", "leaf_nodes", "oversubscription", "hop_latency"]:
        v = t[key]
        line = "%s = %s" % (key, fmt(v) if not isinstance(v, str) else v)
        w("%-28s # %s" % (line, t["source"]) if not isinstance(v, str) else line)
    sections = dict(read_profile(base_path))
    if "cpu" in sections:
        base_cpu = dict((k, (v, c)) for k, v, c in sections["cpu"])
        base_clock = float(base_cpu["clock_ghz"][0])
        c = m["cpu"]
        clock_ratio = c["clock_ghz"][0] / base_clock
        w("")
        w("[cpu]")
        for key in ["sockets", "cores", "mem_bw", "clock_ghz"]:
            v, src = c[key]
            w("%-28s # %s" % ("%s = %s" % (key, fmt(v)), src))
        w("numa = %s" % c["numa"])
        for key, (v, src) in base_cpu.items():
            if key.startswith("rate."):
                w("%s = %s   # %s's x %.4f (clock %s GHz / %s GHz); was: %s" %
                  (key, fmt(float(v) * clock_ratio), base_name, clock_ratio, fmt(c["clock_ghz"][0]), fmt(base_clock), src))
    if "msg" in sections:  # the transports' software cost: the same software, kept
        w("")
        w("[msg]")
        # UCX's costs were measured between two ranks of one host, where its puts and sends are
        # staged through host memory: not an RDMA NIC's (GPUDirect) path, which these machines'
        # nodes use between them. Left out, so UCX messages cost their network time only.
        w("# ucx.*: not kept (measured on one host through host-memory staging, not RDMA)")
        for key, v, src in sections["msg"]:
            if key.startswith("ucx."):
                continue
            if key in ("send", "put") and v == "ucx":  # no measured cost to pay: none
                w("%s = none   # %s's is ucx, whose cost is not kept (above)" % (key, base_name))
                continue
            w("%s = %s   # %s's, kept (the same transports' software); was: %s" % (key, v, base_name, src)
              if src else "%s = %s" % (key, v))
    for sec, entries in read_profile(base_path):
        if not sec.startswith("op."):
            continue
        model = sec[3:]
        w("")
        w("[%s]" % sec)
        for key, value, comment in entries:
            if not key.startswith("cache."):
                continue
            size = float(value)
            if key == "cache.far":
                w("%s = %s   # %s of %s x %.4f (L2 ratio %s / %s); was: %s" %
                  (key, fmt(size * l2 / base_l2), key, base_name, l2 / base_l2, fmt(l2), fmt(base_l2), comment))
            else:
                w("%s = %s   # %s of %s, kept (per-SM L1 / shared memory alike); was: %s" %
                  (key, fmt(size), key, base_name, comment))
        segs = [(v, c) for k, v, c in entries if k == "seg"]
        for i, (value, comment) in enumerate(segs):
            nums = [float(x) for x in value.split()]
            lower, coef = nums[0], nums[1:]
            cache_piece = model in CACHE_FIRST and i == 0
            ratio = cpu_ratio if cache_piece else bw_ratio
            if model in L2_BREAK and lower > 0:
                lower = lower * l2 / base_l2
            scaled = [coef[0]] + [c / ratio for c in coef[1:]]
            w("seg = %s %s   # %s piece of %s x %.4f (%s); was: %s" %
              (fmt(lower), " ".join("%.5g" % c for c in scaled), "cache-resident" if cache_piece else "memory-bound",
               base_name, 1 / ratio, "compute ratio" if cache_piece else "bandwidth ratio", comment))
    return "\n".join(out) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default=os.path.join(here, "profiles", "h100.ini"))
    ap.add_argument("--out", default=os.path.join(here, "profiles"))
    ap.add_argument("--chunk-partition-from", default=os.path.join(here, "profiles", "h200.ini"),
                    help="measured profile whose [gpu] chunk_partition_<fanout>_bw the derived ones scale")
    ap.add_argument("--force", action="store_true", help="also replace profiles that joinlab calibrate measured")
    args = ap.parse_args()
    for name, m in MACHINES.items():
        path = os.path.join(args.out, name + ".ini")
        # A profile measured on its own hardware (h200 on the H200 device machine) beats one
        # scaled from another GPU's: keep it.
        if not args.force and os.path.exists(path):
            with open(path) as f:
                if any(line.startswith("status = calibrated") for line in f):
                    print("kept", path, "(calibrated; --force replaces it)")
                    continue
        with open(path, "w") as f:
            f.write(derive(args.base, name, m, chunk_partition_rates(args.chunk_partition_from)))
        print("wrote", path)


if __name__ == "__main__":
    sys.exit(main())
