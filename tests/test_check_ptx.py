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
                                        ("splitk_arrive_next_turn.cu", "publication race"),  # along a back edge
                                        ("splitk_arrive_in_call.cu", "publication race"),    # inside a callee
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


def test_a_store_at_a_loops_end_reaches_the_arrival_at_its_top():
    # a persistent loop that arrives for the last unit's partial at the top of the next iteration: the store comes
    # after the arrival in the text, before it along the back edge
    loop = """$L__BB0_1:
\tatom.global.add.u32 \t%r1, [%rd2], 1;
\tst.global.f32 \t[%rd1], %f1;
\t@%p1 bra \t$L__BB0_1;
"""
    f = publication_races(_fn(loop))
    assert len(f) == 1 and "atom.global.add.u32" in f[0].detail
    fenced = loop.replace("\t@%p1 bra", "\tfence.acq_rel.gpu;\n\t@%p1 bra")
    assert publication_races(_fn(fenced)) == []
    # a branch that skips the fence is a path without it
    skip = """\tst.global.f32 \t[%rd1], %f1;
\t@%p1 bra \t$L__BB0_2;
\tmembar.gl;
$L__BB0_2:
\tred.global.add.u32 \t[%rd2], 1;
"""
    assert len(publication_races(_fn(skip))) == 1
    assert publication_races(_fn(skip.replace("\t@%p1 bra \t$L__BB0_2;\n", ""))) == []
    # a return before the arrival ends that path
    ret = "\tst.global.f32 \t[%rd1], %f1;\n\tret;\n$L__BB0_3:\n\tatom.global.add.u32 \t%r1, [%rd2], 1;\n"
    assert publication_races(_fn(ret)) == []


def test_labels_of_inlined_asm_resolve_in_their_own_braces():
    # two inlined copies of an asm block with the same local label: each branch loops in its own copy. Resolved to the
    # other copy's label, the first loop's store would reach the second loop's arrival without the fence between.
    body = """\t{
\tWAIT:
\tmembar.gl;
\tst.global.f32 \t[%rd1], %f1;
\t@%p1 bra \tWAIT;
\t}
\tmembar.gl;
\t{
\tWAIT:
\tatom.global.add.u32 \t%r1, [%rd2], 1;
\t@%p2 bra \tWAIT;
\t}
\tst.shared.v4.u32 \t[%r1], {%r2, %r3, %r4, %r5};
"""
    assert publication_races(_fn(body)) == []
    assert len(publication_races(_fn(body.replace("\t}\n\tmembar.gl;\n\t{", "\t}\n\t{")))) == 1
    # a label with its instruction on the same line
    same_line = body.replace("\tWAIT:\n\tatom.global", "\tWAIT: atom.global")
    assert publication_races(_fn(same_line)) == []
    looped = "$L__BB0_1: atom.global.add.u32 \t%r1, [%rd2], 1;\n\tst.global.f32 \t[%rd1], %f1;\n\t@%p1 bra \t$L__BB0_1;\n"
    assert len(publication_races(_fn(looped))) == 1


_CALLEES = """.func arrive(
\t.param .b64 arrive_param_0
)
{
\t.reg .b32 %r<3>;
\t.reg .b64 %rd<3>;
\tatom.global.add.u32 \t%r1, [%rd1], 1;
\tret;
}
.func publish(
\t.param .b64 publish_param_0
)
{
\t.reg .b64 %rd<3>;
\tst.global.f32 \t[%rd1], %f1;
\tret;
}
.func release(
\t.param .b64 release_param_0
)
{
\tfence.acq_rel.gpu;
\tret;
}
"""


def _with_callees(body: str) -> str:
    return _fn(body).replace(".visible .entry evo_gemm(", _CALLEES + ".visible .entry evo_gemm(")


def test_calls_count_as_what_the_callee_does():
    # nvcc writes a call over several lines, the callee on the second
    call = "\t{ // callseq 0, 0\n\t.param .b64 param0;\n\tcall.uni \n\t{name}, \n\t(\n\tparam0\n\t);\n\t} // callseq 0\n"
    arrive, publish, release = (call.replace("{name}", n) for n in ("arrive", "publish", "release"))
    store, atom = "\tst.global.f32 \t[%rd1], %f1;\n", "\tatom.global.add.u32 \t%r1, [%rd2], 1;\n"
    f = publication_races(_with_callees(store + arrive))  # the arrival inside the callee
    assert len(f) == 1 and f[0].function == "evo_gemm" and "arrive" in f[0].detail
    assert len(publication_races(_with_callees(publish + atom))) == 1  # the callee's store, the caller's arrival
    assert publication_races(_with_callees(store + release + atom)) == []  # the callee's fence
    assert publication_races(_with_callees(arrive + store)) == []
    assert publication_races(_with_callees(store + "\tfence.acq_rel.gpu;\n" + arrive)) == []
    # an external callee (printf) does nothing to the rule
    ext = ".extern .func  (.param .b32 func_retval0) vprintf\n(\n\t.param .b64 vprintf_param_0\n)\n;\n"
    printf = "\tcall.uni (retval0), \n\tvprintf, \n\t(\n\tparam0\n\t);\n"
    assert len(publication_races(ext + _fn(store + printf + atom))) == 1
    assert publication_races(ext + _fn(store + "\tmembar.gl;\n" + printf + atom)) == []


def test_a_result_cached_under_older_rules_is_not_replayed(tmp_path, monkeypatch):
    # the compile cache's key names the rules' version: a kernel that passed older rules is compiled and gated again
    import evo.compile as compile_mod
    from evo.compile import Compiler
    from evo.config import load_config
    from evo.kernel import KernelSource

    monkeypatch.delenv("EVO_TEST_DEFENCES_OFF", raising=False)
    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp_path)}}).compile)
    ks = KernelSource.parse((CHEATS / "splitk_no_fence.cu").read_text())
    now = comp.key(ks, "sm_90a")
    monkeypatch.setattr(compile_mod, "PTX_RULES", "1")
    assert comp.key(ks, "sm_90a") != now
