"""wgmma_sm90's split-K unit order (`get_work` in kernel.cu): a tile's splits adjacent, or SPLIT_MAJOR.

The numbering lines are read from the template itself and evaluated here: for either order every (tile, split)
must be taken by exactly one unit (a unit no CTA takes would leave a partial missing and its reducer waiting), the
two CTAs of a pair must take the same split, SPLIT_MAJOR must give consecutive units (the CTAs a launch places side
by side) the same k split of neighbouring tiles, and a tile's reducing split (SPLIT_OWNER: split SPLIT_K-1) must
come after its other splits, since it waits for them. That the kernel computes with it correctly is proven on a
GPU (tests/test_gpu_pipeline.py, `test_split_major_correct_on_gpu`).
"""
import re
from pathlib import Path

import pytest

from evo.families import load_families

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "templates" / "wgmma_sm90" / "kernel.cu"


def _c_to_py(expr: str) -> str:
    """One of the template's integer expressions as Python: `c ? a : b` (one level; c a name or parenthesized), &&,
    `w.` fields, gridDim.x as `grid`, and integer division of non-negative operands."""
    expr = (expr.replace("w.", "w_").replace("&&", " and ").replace("static_cast<int>(gridDim.x)", "grid")
            .replace("/", "//").strip())
    m = re.fullmatch(r"(\(.+?\)|\w+) \? (.+?) : (.+)", expr)
    return f"(({m.group(2)}) if {m.group(1)} else ({m.group(3)}))" if m else expr


def _statements(body: str, where: str) -> list[tuple[str, object]]:
    """A function body's `const int a = ..., b = ...;` / `w.x = ...;` / `return ...;` lines, compiled in order as
    (name, code); a return is named ""."""
    code = []
    for s in (s.strip() for s in re.sub(r"//[^\n]*", "", body).split(";")):
        if not s or s.startswith("Work "):
            continue
        if s.startswith("return "):
            code.append(("", compile(_c_to_py(s.removeprefix("return ")), where, "eval")))
            continue
        for part in re.split(r",\s*(?=\w+ =)", s.removeprefix("const int ")):
            name, expr = (x.strip() for x in part.split("=", 1))
            code.append((name.replace("w.", "w_"), compile(_c_to_py(expr), where, "eval")))
    return code


def _run(code: list[tuple[str, object]], env: dict) -> dict:
    for name, c in code:
        env[name] = eval(c, env)  # noqa: S307 - our template
    return env


def _numbering_from_template():
    src = KERNEL.read_text()
    # (from the numbering's first line: STREAMK's pieces, before it, map a piece to its tile's unit)
    body = re.search(r"Work get_work\(int u, int Mk, int Nk, int K, const Stream& st\) \{.*?(const int r = u % CLUSTER.*?)"
                     r"if \(PANEL\)", src, re.S)
    assert body, "get_work's numbering not found in the template"
    code = _statements(body.group(1), "get_work")

    def f(u: int, mk: int, nk: int, consts: dict) -> tuple[int, int]:
        env = _run(code, {"u": u, "Mk": mk, "Nk": nk, "cdiv": lambda a, b: -(-a // b), **consts})
        return env["w_tile"], env["w_split"]

    return f


CASES = [  # (Mk, Nk, BM, BN, CLUSTER, SPLIT_K)
    (512, 256, 64, 64, 1, 4), (256, 1024, 128, 64, 1, 4), (1030, 4104, 128, 128, 1, 3), (200, 136, 64, 64, 1, 2),
    (512, 1024, 128, 128, 2, 4), (1000, 1000, 128, 128, 2, 3), (64, 64, 64, 64, 1, 16),
]


@pytest.mark.parametrize("major", [0, 1])
@pytest.mark.parametrize("mk,nk,bm,bn,cluster,split_k", CASES)
def test_every_split_of_every_tile_once(major, mk, nk, bm, bn, cluster, split_k):
    f = _numbering_from_template()
    consts = {"BM": bm, "BN": bn, "CLUSTER": cluster, "SPLIT_K": split_k, "SPLIT_MAJOR": major}
    tiles = -(-mk // bm) * (-(-(-(-nk // bn)) // cluster) * cluster)  # pair-padded, as the kernel's `units`
    got = [f(u, mk, nk, consts) for u in range(tiles * split_k)]
    assert sorted(got) == [(t, s) for t in range(tiles) for s in range(split_k)]
    for u in range(0, len(got), cluster):  # a pair's CTAs take the same split (their multicast A covers one k range)
        assert len({s for _, s in got[u:u + cluster]}) == 1
    first = {}
    for u, (t, s) in enumerate(got):  # the reducer (split SPLIT_K-1) is numbered after the tile's other splits
        first.setdefault(t, {})[s] = u
    assert all(max(v for s, v in ss.items() if s < split_k - 1) < ss[split_k - 1] for ss in first.values() if split_k > 1)
    if major:  # consecutive units stream the same k split of neighbouring tiles
        same = sum(got[u][1] == got[u + 1][1] for u in range(len(got) - 1))
        assert same >= len(got) - split_k
    else:  # a tile's splits adjacent
        assert [s for _, s in got[: split_k * cluster : cluster]] == list(range(split_k))


def test_split_major_constraints():
    (fam,) = load_families(ROOT / "templates", names=["wgmma_sm90"])
    p = {"BM": 64, "BN": 64, "CONSUMERS": 1, "SPLIT_K": 4, "STAGES": 8, "SPLIT_OWNER": 1, "SPLIT_MAJOR": 1}
    assert fam.valid(fam.complete(p))
    assert fam.valid(fam.complete({**p, "CLUSTER": 2}))
    assert not fam.valid(fam.complete({**p, "SPLIT_K": 1, "SPLIT_OWNER": 0}))       # no splits to order
    assert not fam.valid(fam.complete({**p, "SPLIT_OWNER": 0, "SPLIT_CLUSTER": 1, "PERSISTENT": 0}))  # a K-split cluster


def _k_range_from_template():
    """get_work's k range of a split (the lines from `kblocks` to STREAMK's override), evaluated for given constants."""
    src = KERNEL.read_text()
    body = re.search(r"const int kblocks = cdiv\(K, BK\);(.*?)if \(STREAMK && skb1 > 0\)", src, re.S)
    assert body, "get_work's k range not found in the template"
    code = _statements(body.group(1), "get_work")

    def f(kblocks: int, split: int, consts: dict) -> tuple[int, int]:
        env = _run(code, {"kblocks": kblocks, "w_split": split, "cdiv": lambda a, b: -(-a // b), "max": max,
                          "min": min, **consts})
        return env["w_kb0"], env["w_kb1"]

    return f


@pytest.mark.parametrize("skew", [0, 2, 4])
@pytest.mark.parametrize("owner", [0, 1])
@pytest.mark.parametrize("kblocks,split_k", [(64, 2), (96, 3), (256, 4), (2, 3), (257, 2), (3, 16), (1, 2)])
def test_split_k_ranges_cover_k_once(kblocks, split_k, owner, skew):
    """Every k block in exactly one split, in order; SPLIT_SKEW moves k blocks from the other splits to the reducing
    split (SPLIT_K-1) only with SPLIT_OWNER, and never leaves a split with a negative range."""
    f = _k_range_from_template()
    consts = {"SPLIT_K": split_k, "SPLIT_OWNER": owner, "SPLIT_SKEW": skew}
    ranges = [f(kblocks, s, consts) for s in range(split_k)]
    assert all(0 <= a <= b <= kblocks for a, b in ranges)
    covered = [k for a, b in ranges for k in range(a, b)]
    assert covered == list(range(kblocks))
    even = -(-kblocks // split_k)
    if owner and skew:
        per = max(even - skew, 0)
        assert all(b - a == min(per, max(kblocks - a, 0)) for a, b in ranges[:-1])
        assert ranges[-1] == (min((split_k - 1) * per, kblocks), kblocks)
    else:
        assert all(b - a <= even for a, b in ranges)


def test_split_skew_is_for_the_reducing_split():
    (fam,) = load_families(ROOT / "templates", names=["wgmma_sm90"])
    p = {"BM": 128, "BN": 128, "SPLIT_K": 2, "STAGES": 6, "SPLIT_OWNER": 1, "PERSISTENT": 0, "SPLIT_SKEW": 2}
    assert fam.valid(fam.complete(p))
    assert not fam.valid(fam.complete({**p, "SPLIT_OWNER": 0}))  # whichever split arrives last reduces: nothing to skew


def _spread_from_template():
    """cluster_spread (CTA b of a grid of clusters -> its unit), evaluated from the template's lines."""
    src = KERNEL.read_text()
    spread = int(re.search(r"constexpr int GPC_SPREAD = (\d+);", src).group(1))
    body = re.search(r"int cluster_spread\(int b\) \{(.*?)\n\}", src, re.S)
    assert body, "cluster_spread not found in the template"
    code = _statements(body.group(1), "cluster_spread")
    assert code and code[-1][0] == "", "cluster_spread's return not found"

    def f(b: int, grid: int, cluster: int) -> int:
        return _run(code, {"b": b, "grid": grid, "CLUSTER": cluster, "GPC_SPREAD": spread, "min": min})[""]

    return f


def _launch_completes(mk: int, nk: int, bm: int, bn: int, cluster: int, split_k: int, major: int, resident: int) -> bool:
    """One unit per CTA, clusters dispatched in launch order while fewer than `resident` run; a cluster ends when its
    main loop has run and, for the reducing split (SPLIT_OWNER: split SPLIT_K-1), every other split of its tile has
    published. False where every resident cluster waits on splits that have not been launched: a hang on a GPU."""
    number, spread = _numbering_from_template(), _spread_from_template()
    consts = {"BM": bm, "BN": bn, "CLUSTER": cluster, "SPLIT_K": split_k, "SPLIT_MAJOR": major}
    grid = -(-mk // bm) * (-(-(-(-nk // bn)) // cluster) * cluster) * split_k
    clusters = [[number(spread(c * cluster + r, grid, cluster) if cluster > 1 else c, mk, nk, consts)
                 for r in range(cluster)] for c in range(grid // cluster)]
    published, running, launched = set(), [], 0
    while launched < len(clusters) or running:
        while len(running) < resident and launched < len(clusters):
            running.append(launched)
            launched += 1
        done = [c for c in running if all(s < split_k - 1 or all((t, x) in published for x in range(split_k - 1))
                                          for t, s in clusters[c])]
        if not done:
            return False
        for c in done:
            published.update((t, s) for t, s in clusters[c] if s < split_k - 1)
            running.remove(c)
    return True


def test_the_simulated_launch_finds_the_hang():
    # split-major reducers in 3 splits, CTA pairs: the GPC stripes put reducers two thirds of a stripe ahead of their
    # other splits, so on a grid of several waves the 66 resident pairs all wait (the check shape 1030x4104x136)
    assert not _launch_completes(1030, 4104, 128, 64, 2, 3, 1, resident=66)
    assert _launch_completes(1030, 4104, 128, 64, 2, 4, 1, resident=66)
    assert _launch_completes(1030, 4104, 128, 64, 2, 3, 0, resident=66)


def test_no_valid_split_owner_instance_hangs_its_launch():
    """Every valid one-unit-per-CTA instance whose reducing split waits (SPLIT_OWNER), in every unit order and cluster
    size of the space, completes on grids of several waves with one CTA per SM of a 132-SM H100."""
    (fam,) = load_families(ROOT / "templates", names=["wgmma_sm90"])
    for cluster in fam.space["CLUSTER"]:
        for split_k in (s for s in fam.space["SPLIT_K"] if s > 1):
            for major in fam.space["SPLIT_MAJOR"]:
                p = {"BM": 128, "BN": 64, "CLUSTER": cluster, "SPLIT_K": split_k, "SPLIT_OWNER": 1,
                     "SPLIT_MAJOR": major, "PERSISTENT": 0, "STAGES": 8}
                if not fam.valid(fam.complete(p)):
                    continue
                for mk, nk in ((1030, 1030), (4104, 520)):  # 153-297 tiles: several waves at every split count
                    assert _launch_completes(mk, nk, 128, 64, cluster, split_k, major, resident=132 // cluster), (p, mk, nk)
