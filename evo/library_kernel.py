"""Which kernel the library ran for a shape, and its configuration, read from the kernel's name.

cuBLAS encodes its kernels' configuration in their names; Nsight Compute reports the name
(evo.profile.Profiler.profile_library). Names seen on Hopper and Ampere:

    nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_TNT          tile 256x128, BK 64, 4 stages, cluster 2x1, ...
    sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64_cluster2x1x1_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas
    sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel
    ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn
    cutlass_80_tensorop_f16_s16816gemm_f16_256x128_32x3_tn_align8

What a name does not say stays unset; nothing is guessed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class LibraryKernel:
    name: str
    kind: str = ""  # nvjet, xmma, cutlass, ampere, ...
    tile: tuple[int, ...] = ()  # (BM, BN) or (BM, BN, BK)
    bk: int = 0
    stages: int = 0
    cluster: tuple[int, ...] = ()
    warpgroups: tuple[int, ...] = ()
    split_k: str = ""  # "on", "off", "split-K", "stream-K", "" (not said)
    schedule: str = ""  # cooperative, ping-pong, warp-specialized, ... as named
    raster: str = ""

    def summary(self) -> str:
        parts = [f"library kernel `{self.name}`"]
        cfg = []
        if self.tile:
            cfg.append("tile " + "x".join(map(str, self.tile)))
        if self.bk and len(self.tile) < 3:
            cfg.append(f"BK {self.bk}")
        if self.stages:
            cfg.append(f"{self.stages} stages")
        if self.cluster:
            cfg.append("cluster " + "x".join(map(str, self.cluster)))
        if self.warpgroups:
            cfg.append("warpgroups " + "x".join(map(str, self.warpgroups)))
        if self.schedule:
            cfg.append(self.schedule)
        if self.split_k:
            cfg.append(f"split-K {self.split_k}" if self.split_k in ("on", "off") else self.split_k)
        if self.raster:
            cfg.append(f"raster {self.raster}")
        if cfg:
            parts.append("(" + ", ".join(cfg) + ", read from its name)")
        return " ".join(parts)


def _ints(*groups: str) -> tuple[int, ...]:
    return tuple(int(g) for g in groups)


def parse_kernel_name(name: str) -> LibraryKernel:
    """The configuration a library kernel's name gives (demangled or not; parameters after '(' ignored)."""
    base = name.split("(")[0].strip()
    k = LibraryKernel(name=base)
    low = base.lower()
    if low.startswith("nvjet"):
        k.kind = "nvjet"
        m = re.search(r"_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)(?:_|$)", base)
        if m:
            k.tile, k.bk, k.stages, k.cluster = _ints(m[1], m[2]), int(m[3]), int(m[4]), _ints(m[5], m[6])
        if m2 := re.search(r"_([hv])_", base):
            k.raster = {"h": "horizontal", "v": "vertical"}[m2[1]]
    elif "xmma" in low:
        k.kind = "xmma"
    elif low.startswith("cutlass"):
        k.kind = "cutlass"
    elif low.startswith(("ampere", "sm80", "sm90", "volta", "turing")):
        k.kind = low.split("_")[0]
    if not k.tile:
        if m := re.search(r"tilesize(\d+)x(\d+)x(\d+)", base):
            k.tile, k.bk = _ints(m[1], m[2], m[3]), int(m[3])
        elif m := re.search(r"_(\d+)x(\d+)_(\d+)x(\d+)_", base):  # cutlass: tile, then BK x stages
            k.tile, k.bk, k.stages = _ints(m[1], m[2]), int(m[3]), int(m[4])
        elif m := re.search(r"_(\d+)x(\d+)_", base):
            k.tile = _ints(m[1], m[2])
    if not k.cluster and (m := re.search(r"cluster(\d+)x(\d+)x(\d+)", base)):
        k.cluster = _ints(m[1], m[2], m[3])
    if m := re.search(r"warpgroupsize(\d+)x(\d+)x(\d+)", base):
        k.warpgroups = _ints(m[1], m[2], m[3])
    if not k.stages and (m := re.search(r"stages?_?(?:\d+x)?(\d+)", base)):
        k.stages = int(m[1])
    if m := re.search(r"segment_k_(on|off)", low):
        k.split_k = m[1]
    elif "streamk" in low or "stream_k" in low:
        k.split_k = "stream-K"
    elif "splitk" in low or "split_k" in low:
        k.split_k = "split-K"
    for word, label in (("pingpong", "ping-pong"), ("coop", "cooperative"), ("warpspecialized", "warp-specialized")):
        if word in low:
            k.schedule = label + ("" if word != "coop" else f" ({m[0]})" if (m := re.search(r"coop[a-z]", base, re.I)) else "")
            break
    return k
