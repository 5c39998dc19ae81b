import subprocess
import sys
from pathlib import Path

import pytest

from evo.compile import Compiler, gate, parse_ptxas
from evo.config import load_config
from evo.kernel import KernelSource

ROOT = Path(__file__).resolve().parent.parent
LOG = """ptxas info    : Compiling entry function 'evo_gemm' for 'sm_90a'
ptxas info    : Function properties for evo_gemm
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
"""


def test_parse_ptxas_report():
    r = parse_ptxas("h", "sm_90a", LOG)
    assert (r.registers, r.smem_static, r.stack_bytes, r.spill_bytes) == (168, 1024, 24, 20)
    ok, why = gate(r, LOG, reject_spills=True)
    assert not ok and "spill" in why
    clean = parse_ptxas("h", "sm_90a", LOG.replace("24 bytes stack frame, 8 bytes spill stores, 12", "0 bytes stack frame, 0 bytes spill stores, 0"))
    assert gate(clean, LOG, True) == (True, "")
    c7510 = "ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized"
    assert not gate(clean, c7510, True)[0]


@pytest.fixture
def compiler(tmp_path):
    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path / "cache")}})
    return Compiler.from_config(cfg.compile)


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_compile_naive_and_cache(compiler, naive_source, arch):
    ks = KernelSource.parse(naive_source)
    r = compiler.compile(ks, arch)
    assert r.ok, r.error
    assert Path(r.cubin_path).stat().st_size > 0 and r.registers > 0 and not r.cached
    again = compiler.compile(ks, arch)
    assert again.cached and again.cubin_path == r.cubin_path


@pytest.mark.nvcc
def test_compile_error_is_one_line(compiler, naive_source):
    ks = KernelSource.parse(naive_source.replace("float acc = 0.f;", "float acc = undefined_name;"))
    r = compiler.compile(ks, "sm_80")
    assert not r.ok and "undefined_name" in r.error and "\n" not in r.error
    assert "undefined_name" in r.log


@pytest.mark.nvcc
def test_compile_timeout(tmp_path, naive_source):
    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path / "c"), "timeout_s": 0.05}})
    r = Compiler.from_config(cfg.compile).compile(KernelSource.parse(naive_source), "sm_80")
    assert not r.ok and "longer than" in r.error


def test_arch_not_claimed(compiler, naive_source):
    ks = KernelSource.parse(naive_source.replace("archs: [sm_80, sm_90a]", "archs: [sm_90a]"))
    r = compiler.compile(ks, "sm_80")
    assert not r.ok and "does not claim sm_80" in r.error


@pytest.mark.nvcc
def test_compile_only_cli(tmp_path):
    res = subprocess.run([sys.executable, "-m", "evo.search", "--shape", "1000x1000x1000", "--compile-only", "--arch", "sm_80",
                          "--families", "simt", "--db", str(tmp_path / "e.db"), "--config", str(_small_cfg(tmp_path))],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "compiled for sm_80" in res.stdout and "simt" in res.stdout


def _small_cfg(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(f"search:\n  initial_random: 2\ncompile:\n  cache_dir: {tmp_path / 'cache'}\n")
    return f


def test_compile_only_bad_arch(tmp_path):
    res = subprocess.run([sys.executable, "-m", "evo.search", "--shape", "64x64x64", "--compile-only", "--arch", "sm_70",
                          "--db", str(tmp_path / "e.db")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip().startswith("error: unknown arch") and "Traceback" not in res.stderr


def test_candidates_with_the_same_code_share_one_compile(tmp_path):
    """Front matter (launch rules, runtime arguments) is not compiled: one nvcc run serves every candidate
    whose code is the same, and each gets its own hash back."""
    import threading
    from evo.compile import Compiler
    from evo.kernel import KernelSource

    calls = []

    class Counting(Compiler):
        def _compile(self, ks, arch, key, cancel=None):
            calls.append(key)
            return super()._compile(ks, arch, key, cancel)

    src = (Path(__file__).parent / "data" / "naive.cu").read_text()
    a = KernelSource.parse(src)
    b = KernelSource.parse(src.replace("---*/", "# another launch rule\nworkspace: 16\n---*/", 1))
    assert a.hash != b.hash and a.code_hash == b.code_hash
    comp = Counting(nvcc="/bin/false", flags=(), include_dirs=(), cache_dir=tmp_path, timeout_s=5, memory_mb=0,
                    reject_spills=True)
    res = {}
    ts = [threading.Thread(target=lambda k=k: res.__setitem__(k.hash, comp.compile(k, "sm_90a"))) for k in (a, b)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert res[a.hash].hash == a.hash and res[b.hash].hash == b.hash
    assert len(calls) == 2 and calls[0] == calls[1]          # both took the lock for one key...
    assert len(list((tmp_path / "sm_90a").glob("*.json"))) == 1   # ...and the second found the first's entry


def test_compile_many_hands_over_results_as_they_finish(tmp_path):
    """A slow compile at the head of the queue does not hold back the quick ones behind it: on_done sees them in the
    order they finish, the returned list keeps the items' order."""
    import threading
    from evo.compile import CompileResult

    release = threading.Event()

    class Staged(Compiler):
        def compile(self, ks, arch):
            if ks == "slow":
                release.wait(5)  # finishes only once the quick one has been handed over
            return CompileResult(ks, arch, True)

    comp = Staged(nvcc="/bin/false", flags=(), include_dirs=(), cache_dir=tmp_path, timeout_s=5, memory_mb=0,
                  reject_spills=True)
    seen = []

    def done(r):
        seen.append(r.hash)
        release.set()

    out = comp.compile_many([("slow", "sm_90a"), ("quick", "sm_90a")], jobs=2, on_done=done)
    assert seen == ["quick", "slow"]
    assert [r.hash for r in out] == ["slow", "quick"]


def test_compile_many_drops_what_is_left_once_stop_says_so(tmp_path):
    # a search whose budget is spent stops its compiles: the queued ones never start, the running ones are told to
    # stop (a real compile kills its nvcc), and neither reaches on_done or the returned list. Two threads: "quick"
    # frees one, which takes "slow2"; "queued" waits behind the two slow ones until the stop drops it
    import time

    from evo.compile import CANCELLED, CompileResult

    started = []

    class Staged(Compiler):
        def compile(self, ks, arch, cancel=None):
            started.append(ks)
            if ks != "quick":
                assert cancel is not None and cancel.wait(10)  # a slow compile, running until cancelled
                return CompileResult(ks, arch, False, error=CANCELLED)
            return CompileResult(ks, arch, True)

    comp = Staged(nvcc="/bin/false", flags=(), include_dirs=(), cache_dir=tmp_path, timeout_s=5, memory_mb=0,
                  reject_spills=True)
    seen: list[str] = []
    t0 = time.monotonic()
    out = comp.compile_many([("quick", "sm_90a"), ("slow1", "sm_90a"), ("slow2", "sm_90a"), ("queued", "sm_90a")],
                            jobs=2, on_done=lambda r: seen.append(r.hash), stop=lambda: "quick" in seen)
    assert seen == ["quick"] and [r.hash for r in out] == ["quick"]
    assert "queued" not in started and time.monotonic() - t0 < 5
    # without `stop` every compile is waited for (the behaviour of callers that need every result)
    class Done(Compiler):
        def compile(self, ks, arch):
            return CompileResult(ks, arch, True)

    done = Done(nvcc="/bin/false", flags=(), include_dirs=(), cache_dir=tmp_path, timeout_s=5, memory_mb=0,
                reject_spills=True)
    assert [r.hash for r in done.compile_many([("a", "sm_80"), ("b", "sm_80")], jobs=2)] == ["a", "b"]


def test_a_cancelled_nvcc_is_killed_and_nothing_is_cached(tmp_path, naive_source):
    import threading
    import time

    from evo.compile import CANCELLED

    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\nsleep 30 &\nsleep 30\n")  # a compile that would run 30 s, with a child of its own
    nvcc.chmod(0o755)
    comp = Compiler(nvcc=str(nvcc), flags=(), include_dirs=(), cache_dir=tmp_path / "cache", timeout_s=60,
                    memory_mb=0, reject_spills=True, ptx_checks=False)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    r = comp.compile(KernelSource.parse(naive_source), "sm_80", cancel=cancel)
    assert not r.ok and r.error == CANCELLED and time.monotonic() - t0 < 5
    assert not list((tmp_path / "cache").rglob("*.json")) and not list((tmp_path / "cache").rglob("*.cubin"))
    # a compile asked for after the cancel does not start at all
    assert comp.compile(KernelSource.parse(naive_source), "sm_80", cancel=cancel).error == CANCELLED


def test_an_interrupted_compile_many_returns_without_compiling_the_rest(tmp_path):
    # Ctrl-C while a search's generation compiles: the queue is dropped and the running compiles are killed, so the
    # search ends (and saves what it has) at once instead of after the slowest compile of the generation
    import time

    from evo.compile import CANCELLED, CompileResult

    started = []

    class Staged(Compiler):
        def compile(self, ks, arch, cancel=None):
            started.append(ks)
            if ks != "quick":
                assert cancel.wait(10)
                return CompileResult(ks, arch, False, error=CANCELLED)
            return CompileResult(ks, arch, True)

    def interrupt(r):
        raise KeyboardInterrupt

    comp = Staged(nvcc="/bin/false", flags=(), include_dirs=(), cache_dir=tmp_path, timeout_s=5, memory_mb=0,
                  reject_spills=True)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        comp.compile_many([("quick", "sm_90a"), ("slow1", "sm_90a"), ("slow2", "sm_90a"), ("queued", "sm_90a")],
                          jobs=2, on_done=interrupt, stop=lambda: False)
    assert time.monotonic() - t0 < 5 and "queued" not in started


def test_code_on_cutlass_headers_is_keyed_by_where_they_are_and_their_release(tmp_path):
    """A compile that failed because the CUTLASS headers were missing ("cute/tensor.hpp: No such file") is not
    replayed from the cache once they are installed, nor a result built on another release; code that includes no
    CUTLASS header keeps one key whatever the include dirs."""
    from evo.compile import Compiler
    from evo.kernel import KernelSource

    nvcc = tmp_path / "nvcc"  # fails without an -I, as nvcc does on a machine without the nvidia-cutlass wheel
    nvcc.write_text("#!/usr/bin/env python3\nimport sys\na = sys.argv[1:]\n"
                    "if not any(x.startswith('-I') for x in a):\n"
                    "    print('k.cu:35:10: fatal error: cute/tensor.hpp: No such file or directory'); sys.exit(1)\n"
                    "open(a[a.index('-o') + 1], 'wb').write(b'cubin')\n")
    nvcc.chmod(0o755)
    src = (Path(__file__).parent / "data" / "naive.cu").read_text()
    cute = KernelSource.parse(src.replace("extern \"C\"", "#include \"cute/tensor.hpp\"\nextern \"C\"", 1))
    plain = KernelSource.parse(src)
    assert cute.code_hash != plain.code_hash

    def comp(dirs, release):
        return Compiler(nvcc=str(nvcc), flags=(), include_dirs=dirs, cache_dir=tmp_path / "cache", timeout_s=30,
                        memory_mb=0, reject_spills=False, ptx_checks=False, headers=release)

    bare, inc, newer = comp((), ""), comp((str(tmp_path),), "4.2.0.0"), comp((str(tmp_path),), "4.3.0.0")
    first = bare.compile(cute, "sm_80")
    assert not first.ok and "No such file" in first.error
    assert bare.compile(cute, "sm_80").cached                     # the failure is cached for the same headers...
    again = inc.compile(cute, "sm_80")
    assert again.ok and not again.cached                          # ...and not replayed once they are there
    assert len({bare.key(cute, "sm_80"), inc.key(cute, "sm_80"), newer.key(cute, "sm_80")}) == 3
    assert bare.key(plain, "sm_80") == inc.key(plain, "sm_80") == newer.key(plain, "sm_80")
