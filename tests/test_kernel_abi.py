import pytest

from evo import expr
from evo.errors import EvoError
from evo.kernel import KernelSource, normalize
from evo.problem import parse_shape


def test_parse_naive(naive_source):
    ks = KernelSource.parse(naive_source)
    assert ks.meta.family == "naive"
    spec = ks.launch(parse_shape("1000x77x5"), 132)
    assert spec.grid == (5, 63, 1) and spec.block == (16, 16, 1) and spec.smem == 0
    assert ks.accepts(parse_shape("1x1x1"))


def test_hash_ignores_comments_and_whitespace(naive_source):
    a = KernelSource.parse(naive_source)
    b = KernelSource.parse(naive_source.replace("float acc = 0.f;", "float   acc = 0.f;  // sum"))
    c = KernelSource.parse(naive_source.replace("float acc = 0.f;", "float acc = 1.f;"))
    assert a.hash == b.hash and a.hash != c.hash
    assert normalize("a /* x */ b // y\n c") == "a b c"


def test_launch_params_change_hash(naive_source):
    a = KernelSource.parse(naive_source)
    b = KernelSource.parse(naive_source.replace('block: [16, 16, 1]', 'block: [32, 8, 1]'))
    assert a.hash != b.hash


@pytest.mark.parametrize("mutate,msg", [
    (lambda s: s.replace("/*---evo", "/*---nope"), "front-matter"),
    (lambda s: s.replace("evo_gemm(", "my_gemm("), "entry point"),
    (lambda s: s.replace("family: naive\n", ""), "lacks family"),
    (lambda s: s.replace("grid: [", "grid: [[["), "not valid YAML"),
    (lambda s: s.replace('extern "C" ', ""), "entry point"),
])
def test_abi_violations(naive_source, mutate, msg):
    with pytest.raises(EvoError, match=msg):
        KernelSource.parse(mutate(naive_source))


def test_requires_and_tensor_maps(naive_source):
    src = naive_source.replace("workspace: 0\n", "workspace: 0\nrequires: \"K % 8 == 0\"\n"
                               "tensor_maps:\n  - {operand: A, box: [64, 64], swizzle: 128}\n")
    ks = KernelSource.parse(src)
    assert ks.accepts(parse_shape("64x64x64")) and not ks.accepts(parse_shape("64x64x60"))
    spec = ks.launch(parse_shape("64x64x64"), 132)
    assert spec.tensor_maps[0].operand == "A" and spec.tensor_maps[0].swizzle == 128
    with pytest.raises(EvoError, match="tensor map"):
        KernelSource.parse(src.replace("operand: A", "operand: D"))


def test_serves_needs_the_arch_the_requires_and_a_launch(naive_source):
    src = naive_source.replace("workspace: 0\n", "workspace: 0\nrequires: \"K % 8 == 0\"\n")
    ks = KernelSource.parse(src)
    assert ks.serves(parse_shape("64x64x64"), "sm_90a", 132) and ks.serves(parse_shape("64x64x64"), "", 132)
    assert not ks.serves(parse_shape("64x64x64"), "sm_100a", 132)  # an arch it does not claim
    assert not ks.serves(parse_shape("64x64x60"), "sm_90a", 132)  # its requires refuse the shape
    empty = KernelSource.parse(src.replace('grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]', 'grid: ["cdiv(N, 16) - 4", "cdiv(M, 16)", 1]'))
    assert not empty.serves(parse_shape("64x64x64"), "sm_90a", 132)  # an empty grid there
    assert empty.serves(parse_shape("64x128x64"), "sm_90a", 132)


def test_expr_safe():
    env = {"M": 100, "BM": 64, "NUM_SMS": 132}
    assert expr.evaluate("cdiv(M, BM) * 2", env) == 4
    assert expr.evaluate("min(NUM_SMS, cdiv(M, BM))", env) == 2
    assert expr.evaluate("1 if M > 64 else 0", env) == 1
    for bad in ("__import__('os')", "M.real", "open('x')", "[1][0]", "Q + 1"):
        with pytest.raises(EvoError):
            expr.evaluate(bad, env)


def test_cooperative_launch_is_declared_per_instance(naive_source):
    """`cooperative` (an expression) says which instances launch with the whole grid resident; a kernel that
    declares none keeps its hash, one that declares it gets another (its launch differs)."""
    plain = KernelSource.parse(naive_source)
    assert plain.launch(parse_shape("64x64x64"), 132).cooperative is False
    src = naive_source.replace("workspace: 0\n", 'workspace: 0\ncooperative: "K > 128"\n')
    ks = KernelSource.parse(src)
    assert ks.hash != plain.hash and ks.code_hash == plain.code_hash  # one compile serves both
    assert ks.launch(parse_shape("64x64x256"), 132).cooperative is True
    assert ks.launch(parse_shape("64x64x64"), 132).cooperative is False
    assert ks.cooperative(parse_shape("64x64x256"), 132) and not ks.cooperative(parse_shape("64x64x128"), 132)
    off = KernelSource.parse(naive_source.replace("workspace: 0\n", "workspace: 0\ncooperative: false\n"))
    assert off.hash == plain.hash
    with pytest.raises(EvoError, match="cooperative"):
        KernelSource.parse(naive_source.replace("workspace: 0\n", "workspace: 0\ncooperative: [1]\n"))
