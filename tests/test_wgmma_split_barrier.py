"""wgmma_sm90's reduce-scatter barrier (SPLIT_RS, kernel.cu): a tile's SPLIT_K CTAs arrive on one count per tile
(`red.release.gpu.inc` that wraps at RS_WRAP) and each polls it for the value its own read, taken before it arrived,
says completes the launch. The wrap bound, the count's step and the `done` expression are read from the template
and evaluated here with 32-bit unsigned arithmetic over launches from a fresh (zeroed) workspace and across the
wrap, each split's read placed anywhere before its own arrival: every split must see its `done` value once all
have arrived and never before (early: a split reads partials not yet written; never: the launch hangs). That the
kernel sums correctly with it is proven on a GPU (tests/test_gpu_pipeline.py)."""
import random
import re
from pathlib import Path

import pytest

KERNEL = Path(__file__).resolve().parent.parent / "templates" / "wgmma_sm90" / "kernel.cu"
U32 = 0xFFFFFFFF


def _protocol():
    """(wrap(split_k), step(count, split_k), done(seen, split_k)) from the template's text."""
    src = KERNEL.read_text()
    wrap = re.search(r"constexpr unsigned RS_WRAP = (.+?);", src)
    inc = re.search(r'red\.release\.gpu\.global\.inc\.u32 \[%0\], %1;" ::"l"\(p\), "r"\((.+?)\)', src)
    done = re.search(r"const unsigned done = (.+?);", src)
    assert wrap and inc and done, "the SPLIT_RS barrier's lines not found in the template"

    def ev(expr: str, **env) -> int:
        py = expr.replace("static_cast<unsigned>(SPLIT_K)", "SPLIT_K")
        return eval(py, {}, env) & U32  # noqa: S307 - our template

    def wrap_of(k: int) -> int:
        return ev(wrap.group(1), SPLIT_K=k)

    def step(count: int, k: int) -> int:  # PTX red.inc: (old >= b) ? 0 : old + 1
        b = ev(inc.group(1), RS_WRAP=wrap_of(k))
        return 0 if count >= b else count + 1

    def done_of(seen: int, k: int) -> int:
        return ev(done.group(1), seen=seen, SPLIT_K=k, RS_WRAP=wrap_of(k))

    return wrap_of, step, done_of


@pytest.mark.parametrize("split_k", [2, 3, 4, 6, 8, 16])
@pytest.mark.parametrize("start", ["fresh", "before the wrap"])
def test_every_split_released_exactly_when_the_last_arrives(split_k, start):
    wrap_of, step, done_of = _protocol()
    assert wrap_of(split_k) % split_k == 0, "the count must wrap at a multiple of SPLIT_K"
    count = 0 if start == "fresh" else wrap_of(split_k) - 3 * split_k
    rng = random.Random(split_k)
    for _launch in range(8):  # the wrap falls inside these launches
        # a random interleaving of every split's read and arrival, each split's read before its own arrival
        order = [(s, "read") for s in range(split_k)] + [(s, "arrive") for s in range(split_k)]
        rng.shuffle(order)
        for s in range(split_k):
            r, a = order.index((s, "read")), order.index((s, "arrive"))
            if r > a:
                order[r], order[a] = order[a], order[r]
        done, arrived = {}, 0
        for s, kind in order:
            if kind == "read":
                done[s] = done_of(count, split_k)
            else:
                count = step(count, split_k)
                arrived += 1
            if arrived < split_k:
                early = [d for d in done.values() if d == count]
                assert not early, f"released before the last arrival (count {count}, {arrived} of {split_k} arrived)"
        assert all(d == count for d in done.values()), f"a split waits for {done} but the count is {count}: a hang"
