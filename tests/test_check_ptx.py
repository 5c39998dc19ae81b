"""The static PTX gate (evo/ptx_checks.py): publication without release ordering, module-scope state."""
from pathlib import Path

import pytest

from evo.ptx_checks import check_ptx, gate_message, module_state, publication_races

CHEATS = Path(__file__).parent / "data" / "cheats"


def _fn(body: str, decls: str = "") -> str:
    return f""".version 8.0
.target sm_90a
.address_size 64
{decls}
.visible .entry evo_gemm(
\t.param .u64 evo_gemm_param_0
)
{{
\t.reg .b32 %r<9>;
\t.reg .b64 %rd<9>;
{body}
\tret;
}}
"""


RACE = """\tst.global.f32 \t[%rd1], %f1;
\tbar.sync \t0;
\tatom.global.add.u32 \t%r1, [%rd2], 1;
"""


def test_store_then_relaxed_arrival_is_a_race():
    f = publication_races(_fn(RACE))
    assert len(f) == 1 and f[0].function == "evo_gemm" and "atom.global.add.u32" in f[0].detail
    assert "publication race" in gate_message(f)


@pytest.mark.parametrize("between", ["\tmembar.gl;\n", "\tfence.acq_rel.gpu;\n", "\tfence.sc.gpu;\n", "\tmembar.sys;\n"])
def test_a_fence_between_orders_it(between):
    body = RACE.replace("\tbar.sync \t0;\n", "\tbar.sync \t0;\n" + between)
    assert publication_races(_fn(body)) == []


@pytest.mark.parametrize("atom", ["atom.add.acq_rel.gpu.global.u32 \t%r1, [%rd2], 1;",
                                  "atom.release.gpu.global.add.u32 \t%r1, [%rd2], 1;",
                                  "red.release.gpu.global.add.u32 \t[%rd2], 1;"])
def test_a_release_atomic_orders_it(atom):
    assert publication_races(_fn(RACE.replace("atom.global.add.u32 \t%r1, [%rd2], 1;", atom))) == []


@pytest.mark.parametrize("atom", ["atom.release.cta.global.add.u32 \t%r1, [%rd2], 1;",
                                  "atom.acq_rel.cluster.global.add.u32 \t%r1, [%rd2], 1;",
                                  "red.release.cta.global.add.u32 \t[%rd2], 1;"])
def test_a_cta_or_cluster_scope_release_atomic_is_not_enough(atom):
    # a release another CTA's acquire never pairs with: the partials may still be unseen at the arrival
    assert len(publication_races(_fn(RACE.replace("atom.global.add.u32 \t%r1, [%rd2], 1;", atom)))) == 1
    store = "\tst.release.cta.global.u32 \t[%rd3], %r2;\n\tatom.global.add.u32 \t%r1, [%rd2], 1;\n"
    assert len(publication_races(_fn("\tst.global.f32 \t[%rd1], %f1;\n" + store))) == 1
    # nor a release on the CTA's own shared memory
    shared = "\tatom.release.gpu.shared::cta.add.u32 \t%r3, [%r4], 1;\n\tatom.global.add.u32 \t%r1, [%rd2], 1;\n"
    assert len(publication_races(_fn("\tst.global.f32 \t[%rd1], %f1;\n" + shared))) == 1


def test_cta_scope_fence_is_not_enough():
    body = RACE.replace("\tbar.sync \t0;\n", "\tmembar.cta;\n")
    assert len(publication_races(_fn(body))) == 1


def test_float_atomics_and_shared_stores_are_not_publications():
    assert publication_races(_fn("\tst.global.f32 \t[%rd1], %f1;\n\tred.global.add.f32 \t[%rd2], %f2;\n")) == []
    assert publication_races(_fn("\tst.shared.u32 \t[%r1], %r2;\n\tatom.global.add.u32 \t%r1, [%rd2], 1;\n")) == []
    assert publication_races(_fn("\tatom.global.add.u32 \t%r1, [%rd2], 1;\n\tst.global.f32 \t[%rd1], %f1;\n")) == []


def test_generic_store_counts_and_tma_store_counts():
    assert len(publication_races(_fn("\tst.u32 \t[%rd1], %r1;\n\tatom.add.u32 \t%r2, [%rd2], 1;\n"))) == 1
    tma = "\tcp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r1, %r2}], [%r3];\n"
    assert len(publication_races(_fn(tma + "\tred.global.add.u32 \t[%rd2], 1;\n"))) == 1


def test_module_state_written_or_address_taken_is_refused():
    decl = ".global .align 4 .u32 launches;\n.global .align 1 .b8 $str[4] = {104, 105, 10, 0};\n"
    assert len(module_state(_fn("\tst.global.u32 \t[launches], %r1;\n", decl))) == 1
    f = module_state(_fn("\tmov.u64 \t%rd1, launches;\n\tld.global.u32 \t%r1, [%rd1];\n", decl))
    assert len(f) == 1 and "launches" in f[0].detail
    assert module_state(_fn("\tmov.u64 \t%rd1, $str;\n", decl)) == []  # printf strings are exempt
    assert len(module_state(_fn("\tcall.uni (retval0), malloc, (param0);\n"))) == 1
    assert "module-scope state" in gate_message(check_ptx(_fn("\tst.global.u32 \t[launches], %r1;\n", decl)))


def test_clean_kernel_has_no_findings():
    assert check_ptx(_fn("\tld.global.nc.u16 \t%rs1, [%rd1];\n\tst.global.u16 \t[%rd2], %rs1;\n")) == []
    assert gate_message([]) == ""


@pytest.mark.nvcc
@pytest.mark.parametrize("name,words", [("splitk_no_fence.cu", "publication race"),
                                        ("state_in_globals.cu", "module-scope state")])
def test_compile_gate_rejects_the_cheats(tmp_path, name, words, monkeypatch):
    from evo.compile import Compiler
    from evo.config import load_config
    from evo.kernel import KernelSource

    monkeypatch.delenv("EVO_TEST_DEFENCES_OFF", raising=False)
    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp_path)}}).compile)
    r = comp.compile(KernelSource.parse((CHEATS / name).read_text()), "sm_90a")
    assert not r.ok and words in r.error, r.error
    assert not list(tmp_path.rglob("*.keep")), "nvcc -keep intermediates left behind"
    monkeypatch.setenv("EVO_TEST_DEFENCES_OFF", "ptx_checks")  # the defence off: the same kernel builds
    off = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp_path)}}).compile)
    assert off.key(KernelSource.parse((CHEATS / name).read_text()), "sm_90a") != \
        comp.key(KernelSource.parse((CHEATS / name).read_text()), "sm_90a")
    r = off.compile(KernelSource.parse((CHEATS / name).read_text()), "sm_90a")
    assert r.ok, r.error
