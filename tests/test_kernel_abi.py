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


def test_the_compile_is_of_the_exact_code(naive_source):
    """The candidate hash leaves spacing and comments out; the compile key does not: a line break that ends a #define
    (here, whether the next declaration belongs to the macro) is a different program under one candidate hash."""
    head, code = naive_source.split("---*/", 1)
    a = KernelSource.parse(head + "---*/\n#define UNUSED\nstatic const int kept = 1;" + code)
    b = KernelSource.parse(head + "---*/\n#define UNUSED static const int kept = 1;" + code)
    assert a.hash == b.hash and a.code_hash != b.code_hash
    runtime = KernelSource.parse(naive_source.replace("block: [16, 16, 1]", "block: [16, 16, 1]  # a comment"))
    assert runtime.code_hash == KernelSource.parse(naive_source).code_hash  # the front matter is not compiled


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
    (lambda s: s.replace("family: naive\n", "family: naive\nnote: '*/ int smuggled; /*'\n"), "must not contain"),
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


def test_expr_evaluates_as_the_tree_reads():
    """Compiled once per text, evaluated as written: every operand of and/or (a failing one still fails), comparisons
    chained, only the taken branch of a conditional, names looked up at evaluation."""
    env = {"M": 100, "BM": 64, "Z": 0}
    assert expr.evaluate("M > 64 and BM == 64", env) == 1 and expr.evaluate("M < 64 or BM < 64", env) == 0
    assert expr.evaluate("not M", env) == 0 and expr.evaluate("-BM + 1", env) == -63
    assert expr.evaluate("0 < BM < M", env) == 1 and expr.evaluate("0 < M < BM", env) == 0
    assert expr.evaluate("64 <= BM <= 64 == BM", env) == 1
    assert expr.evaluate("1 if Z == 0 else Q", env) == 1  # the branch not taken is not evaluated
    with pytest.raises(ZeroDivisionError):
        expr.evaluate("Z == 1 and M // Z", env)  # and/or evaluate every operand
    with pytest.raises(EvoError, match="unknown name 'Q'"):
        expr.evaluate("0 if Z == 0 else Q", {"Z": 1})
    with pytest.raises(EvoError, match="unsupported"):
        expr.evaluate("M in (1, 2)", env)
    assert expr.evaluate("(round_up(M, BM) + max(M, BM) - min(M, BM) + cdiv(M, BM) % 3 ** 2 << 2 >> 1) | 1 & 3", env) == 333


def test_expr_agrees_with_python_on_every_family_rule():
    """Every launch rule of every family (grid, block, smem, workspace, requires, cooperative), for every start on
    shapes of each class, evaluates as Python evaluates the same text (rules as booleans, sizes as ints)."""
    from evo.families import load_families
    from evo.kernel import parse_meta

    funcs = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max, "round_up": lambda a, b: -(-a // b) * b}
    checked = 0
    for fam in load_families():
        front = fam.template[: fam.template.find("---*/") + 5].replace("{{PARAMS}}", "{}")
        for shape in ("64x64x64", "4096x4096x1024", "256x1024x8192", "16x8192x128"):
            p = parse_shape(shape)
            meta = parse_meta(front.replace("{{M}}", str(p.m)).replace("{{N}}", str(p.n)).replace("{{K}}", str(p.k)) + "\n")
            rules = [(r, bool) for r in (meta.requires, meta.cooperative)] + [(r, int) for r in (*meta.grid, *meta.block, meta.smem, meta.workspace)]
            for params in fam.start_instances():
                env = {k: int(v) for k, v in {**fam.default_params(), **params}.items() if isinstance(v, (int, bool))}
                env.update(M=p.m, N=p.n, K=p.k, NUM_SMS=132)
                for rule, kind in rules:
                    if isinstance(rule, (bool, int)):
                        continue
                    try:
                        want = kind(eval(str(rule), {"__builtins__": {}}, {**funcs, **env}))  # noqa: S307 (our own front matter)
                    except ZeroDivisionError:
                        continue
                    assert kind(expr.evaluate(rule, env)) == want, (fam.name, shape, params, rule)
                    checked += 1
    assert checked > 1000


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
