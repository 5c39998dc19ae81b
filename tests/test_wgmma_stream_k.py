"""wgmma_sm90's stream-K schedule (STREAMK): the template's own work functions, compiled for the host and walked.

The functions that deal out whole tiles and k-block pieces (`stream_of` ... `stream_empty` in kernel.cu) are cut out
of the template, compiled with the host C++ compiler beside a small driver that walks every CTA's units the way the
kernel's producer and consumers do, and replays the loop by which a tile's first piece finds the partials to add.
For many shapes and grid sizes: every whole tile is taken once, every k block of every streamed tile once; each
streamed tile split over several CTAs has one piece from k block 0, which adds exactly the tile's other pieces (a
partial left out, or one read twice, is a wrong C; a count that never completes hangs the kernel), all of them from
higher CTAs (the waits' order that keeps the kernel deadlock-free), no CTA streams more than ceil(I / G) k blocks
beyond its whole tiles, and no tile is split over more than three CTAs where the grid has a whole wave to stream. That the kernel computes with it correctly is proven on a GPU (tests/test_gpu_pipeline.py,
`test_stream_k_correct_on_gpu`).
"""
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from evo.families import load_families
from evo.problem import Problem

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "templates" / "wgmma_sm90" / "kernel.cu"
NAMES = ("struct Stream", "stream_of", "stream_start", "stream_end", "stream_piece", "stream_first", "stream_next",
         "stream_range", "stream_empty")

SHIM = """
#include <algorithm>
#include <cstdio>
#include <cstdlib>
struct Dim3 { unsigned x; };
static Dim3 gridDim, blockIdx;
#define __device__
#define __forceinline__ inline
using std::max;
using std::min;
constexpr int BM = %(bm)d, BN = %(bn)d, BK = 64, STREAMK = 1;
inline int cdiv(int a, int b) { return (a + b - 1) / b; }
"""

DRIVER = r"""
// walk: argv = Mk Nk K G; prints WHOLE b tile | PIECE b tile kb0 kb1 | ADD b tile b2 | NK nk DP dp TILES t
int main(int argc, char** argv) {
  const int Mk = atoi(argv[1]), Nk = atoi(argv[2]), K = atoi(argv[3]);
  gridDim.x = atoi(argv[4]);
  for (unsigned b = 0; b < gridDim.x; ++b) {
    blockIdx.x = b;
    const Stream st = stream_of(cdiv(Mk, BM) * cdiv(Nk, BN), K);  // the kernel's unit count (no split, no pairs)
    if (b == 0) printf("NK %d DP %d TILES %d\n", st.nk, st.dp, st.tiles);
    int steps = 0;
    for (int u = stream_first(st); u < stream_end(st); u = stream_next(u, st)) {
      if (++steps > 1000000) { printf("RUNAWAY %u\n", b); return 1; }
      if (u < st.tiles) { printf("WHOLE %u %d\n", b, u); continue; }
      int ta, kb0, kb1;
      stream_range(st, u, ta, kb0, kb1);
      printf("PIECE %u %d %d %d\n", b, st.dp + ta, kb0, kb1);
      if (kb0 == 0 && kb1 < st.nk) {  // the kernel's loop over the partials this piece adds
        const unsigned tile_end = static_cast<unsigned>(ta + 1) * st.nk;
        for (int b2 = static_cast<int>(b) + 1; stream_start(st, b2) < tile_end; ++b2) {
          if (stream_empty(st, b2)) continue;
          printf("ADD %u %d %d\n", b, st.dp + ta, b2);
        }
      }
    }
  }
  return 0;
}
"""


def _definition(src: str, name: str) -> str:
    """The template's definition of `name` (a struct or a function), braces matched."""
    m = re.search((r"^struct Stream \{" if name.startswith("struct") else
                   r"^__device__ __forceinline__ [\w:&<> ]+? " + name + r"\("), src, re.M)
    assert m, f"{name} not found in the template"
    i = src.index("{", m.start())
    depth = 0
    for j in range(i, len(src)):
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        if depth == 0:
            end = j + 1
            return src[m.start():end + (1 if src[end:end + 1] == ";" else 0)]
    raise AssertionError(f"{name}: unbalanced braces")


@pytest.fixture(scope="module")
def walker(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no host C++ compiler")
    src = KERNEL.read_text()
    body = "\n".join(_definition(src, n) for n in NAMES)
    exes = {}

    def walk(bm: int, bn: int, m: int, n: int, k: int, grid: int) -> str:
        if (bm, bn) not in exes:
            d = tmp_path_factory.mktemp(f"sk{bm}x{bn}")
            (d / "walk.cpp").write_text(SHIM % {"bm": bm, "bn": bn} + body + DRIVER)
            r = subprocess.run([cxx, "-std=c++17", "-O1", "-o", str(d / "walk"), str(d / "walk.cpp")],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-3000:]
            exes[bm, bn] = d / "walk"
        return subprocess.run([str(exes[bm, bn]), str(m), str(n), str(k), str(grid)], check=True,
                              capture_output=True, text=True).stdout

    return walk


CASES = [  # (BM, BN, M, N, K, grid): remainders of every size, fewer tiles than CTAs, one k block, odd grids
    (128, 128, 4096, 4096, 1024, 132),   # 1024 tiles: 7 waves and 100 streamed tiles of 16 k blocks
    (128, 128, 4096, 4224, 1024, 132),   # 1056 tiles: whole waves, nothing streamed
    (128, 128, 512, 2048, 4096, 132),    # 64 tiles < 132 CTAs: all streamed, ~2 CTAs a tile
    (128, 256, 4096, 4096, 1024, 132),   # 512 tiles, remainder 116
    (128, 128, 100, 100, 64, 132),       # one tile of one k block: 131 empty ranges
    (128, 128, 1000, 1000, 72, 114),     # 64 tiles of 2 k blocks on 114 CTAs
    (64, 128, 12288, 1024, 192, 78),     # 1536 tiles of 3 k blocks, remainder 54
    (128, 64, 200, 1000, 4096, 7),       # 32 tiles, a small grid: whole waves then long ranges
    (128, 128, 130, 260, 1000, 132),     # off-tile edges, 6 tiles of 16 k blocks
]


@pytest.mark.parametrize("bm,bn,m,n,k,grid", CASES)
def test_stream_k_covers_every_k_block_once(walker, bm, bn, m, n, k, grid):
    out = walker(bm, bn, m, n, k, grid)
    assert "RUNAWAY" not in out
    head = out.split("\n", 1)[0].split()
    nk, dp, tiles = int(head[1]), int(head[3]), int(head[5])
    assert tiles == -(-m // bm) * -(-n // bn) and nk == -(-k // 64)
    r = tiles % grid  # whole waves of whole tiles, then the last r + grid tiles streamed (all of them when fewer)
    assert dp == (tiles if r == 0 else max(tiles - r - grid, 0))
    whole: dict[int, list[int]] = defaultdict(list)
    pieces: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # tile -> (cta, kb0, kb1)
    adds: dict[tuple[int, int], list[int]] = defaultdict(list)
    streamed_kb: dict[int, int] = defaultdict(int)  # cta -> k blocks streamed
    whole_of: dict[int, int] = defaultdict(int)
    for line in out.splitlines()[1:]:
        f = line.split()
        if f[0] == "WHOLE":
            whole[int(f[2])].append(int(f[1]))
            whole_of[int(f[1])] += 1
        elif f[0] == "PIECE":
            b, t, kb0, kb1 = map(int, f[1:])
            assert 0 <= kb0 < kb1 <= nk and dp <= t < tiles
            pieces[t].append((b, kb0, kb1))
            streamed_kb[b] += kb1 - kb0
        elif f[0] == "ADD":
            adds[int(f[1]), int(f[2])].append(int(f[3]))
    assert sorted(whole) == list(range(dp)) and all(len(v) == 1 for v in whole.values())
    assert max(whole_of.values(), default=0) <= dp // grid
    assert sorted(pieces) == list(range(dp, tiles))
    for t, ps in pieces.items():
        covered = sorted(kb for _, kb0, kb1 in ps for kb in range(kb0, kb1))
        assert covered == list(range(nk)), f"tile {t}: k blocks {covered}"
        first = [b for b, kb0, kb1 in ps if kb0 == 0]
        assert len(first) == 1
        if len(ps) == 1:
            assert not adds.get((first[0], t))  # a whole streamed tile adds nothing
            continue
        others = sorted(b for b, kb0, _ in ps if kb0 > 0)
        assert adds[first[0], t] == others  # exactly the other pieces, in CTA order
        assert all(b > first[0] for b in others)  # a piece waits only for higher CTAs
        if tiles >= r + grid:
            assert len(ps) <= 3, f"tile {t} split over {len(ps)} CTAs"
    iters = (tiles - dp) * nk
    assert max(streamed_kb.values(), default=0) <= -(-iters // grid)  # balanced to one k block


def test_stream_k_constraints_and_launch():
    (fam,) = load_families(ROOT / "templates", names=["wgmma_sm90"])
    sk = {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 6, "EPI": 1, "STREAMK": 1}
    assert fam.valid(fam.complete(sk))
    for bad in ({"PERSISTENT": 0}, {"SPLIT_K": 2, "PINGPONG": 0, "BN": 64}, {"CLUSTER": 2}, {"DYN": 1},
                {"EARLY_STORE": 1}, {"PANEL": 1, "PINGPONG": 0, "GROUP": 1}):
        assert not fam.valid(fam.complete({**sk, **bad})), bad
    spec = fam.render(fam.complete(sk)).launch(Problem(512, 2048, 4096), num_sms=132)
    assert spec.grid == (132, 1, 1)  # every SM, even with 64 tiles
    assert spec.workspace == 320 * 4 + 132 * 128 * 128 * 4  # the counters, then a partial slot per CTA
    plain = fam.render(fam.complete({**sk, "STREAMK": 0})).launch(Problem(512, 2048, 4096), num_sms=132)
    assert plain.grid == (64, 1, 1) and plain.workspace == 0
