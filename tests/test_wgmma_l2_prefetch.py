"""The L2 prefetch of wgmma_sm90 and wgmma_skinny_sm90 (L2_AHEAD): each producer's prefetch loop, cut out of its
template, compiled for the host and walked over a unit's k blocks (a CTA's steps in the skinny family). Every k block
past the ones the ring loads at the start is prefetched once, never behind its load and at most L2_AHEAD ahead of it;
with L2_AHEAD 0 the template issues no prefetch."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from evo.families import load_families

ROOT = Path(__file__).resolve().parent.parent

# per family: the loop's variable, the driver's names for the load position, the unit's first and its end, and where
# the variable counts from (wgmma_sm90: k blocks of the tensor; the skinny family: this CTA's steps)
LOOPS = {
    "wgmma_sm90": ("kb", "int pkb = s0 + i; struct { int kb0, kb1; } pw{s0, s0 + n};", "s0"),
    "wgmma_skinny_sm90": ("q", "int pi = i; const int nk = n; (void)s0;", "0"),
}
DRIVER = r"""
#include <cstdio>
#include <cstdlib>
// argv: STAGES L2_AHEAD first count; prints "load prefetched" (positions from the unit's first) as the producer issues
int main(int argc, char** argv) {
  const int STAGES = atoi(argv[1]), L2_AHEAD = atoi(argv[2]), s0 = atoi(argv[3]), n = atoi(argv[4]);
  for (int i = 0; i < n; ++i) {
    %(names)s
    for (int %(var)s = %(init)s; %(cond)s; ++%(var)s) printf("%%d %%d\n", i, %(var)s - (%(base)s));
  }
  return 0;
}
"""


@pytest.fixture(scope="module", params=sorted(LOOPS))
def family(request, tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no host C++ compiler")
    name = request.param
    var, names, base = LOOPS[name]
    text = (ROOT / "templates" / name / "kernel.cu").read_text()
    loops = re.findall(r"if constexpr \(L2_AHEAD > 0\).*\n\s*for \(int " + var + r" = (.*?); (.*?); \+\+" + var + r"\)",
                       text)
    assert len(loops) == 1, loops  # the producer's one prefetch loop
    init, cond = loops[0]
    d = tmp_path_factory.mktemp(name)
    (d / "walk.cpp").write_text(DRIVER % {"names": names, "var": var, "init": init, "cond": cond, "base": base})
    r = subprocess.run([cxx, "-std=c++17", "-O1", "-o", str(d / "walk"), str(d / "walk.cpp")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-3000:]

    def run(stages: int, ahead: int, first: int, count: int) -> list[tuple[int, int]]:
        out = subprocess.run([str(d / "walk"), str(stages), str(ahead), str(first), str(count)], check=True,
                             capture_output=True, text=True).stdout
        return [tuple(map(int, line.split())) for line in out.splitlines()]

    (fam,) = load_families(ROOT / "templates", names=[name])
    return fam, run


def test_every_k_block_past_the_ring_is_prefetched_once_ahead_of_its_load(family):
    fam, walk = family
    for stages in (2, 6, 8, 13):
        for ahead in [a for a in fam.space["L2_AHEAD"] if a > 0] + [stages + 1]:
            for first in (0, 5):
                for n in (1, stages, stages + 1, 16, 32, 100, 300):
                    issued = walk(stages, ahead, first, n)  # positions within the unit: load i, prefetch j
                    assert sorted(j for _, j in issued) == list(range(stages, n)), (stages, ahead, first, n)
                    assert all(i < j <= i + ahead for i, j in issued), (stages, ahead, first, n)
                    # the first load sends the whole window past the ring at once
                    assert [j for i, j in issued if i == 0] == list(range(stages, min(ahead, n - 1) + 1))


@pytest.mark.parametrize("name, base", [
    ("wgmma_sm90", {"BM": 128, "BN": 64, "SPLIT_K": 4, "SPLIT_RS": 1, "SPLIT_MAJOR": 1, "PERSISTENT": 0, "STAGES": 8}),
    ("wgmma_skinny_sm90", {"BM": 64, "BN": 48, "CLK": 16, "CONSUMERS": 1, "G": 1, "STAGES": 8}),
])
def test_l2_ahead_renders_the_prefetch_and_must_run_past_the_ring(name, base):
    (fam,) = load_families(ROOT / "templates", names=[name])
    on, off = fam.complete(base | {"L2_AHEAD": 32}), fam.complete(base)
    assert fam.valid(on) and fam.valid(off) and off["L2_AHEAD"] == 0
    assert "constexpr int L2_AHEAD = 32;" in fam.render(on).text
    assert "constexpr int L2_AHEAD = 0;" in fam.render(off).text
    assert "cp.async.bulk.prefetch.tensor.2d.L2.global.tile" in fam.render(on).text
    assert not fam.valid(off | {"L2_AHEAD": 8}) and fam.valid(off | {"L2_AHEAD": 9})  # inside the ring: nothing to prefetch
