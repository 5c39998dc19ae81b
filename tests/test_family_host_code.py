"""Which launch: host candidates keep the host-code sandbox: every one whose host code is not its family's own.

evo.families.is_family_rendering says whether a text is its family's template rendered with its parameters, byte for
byte; evo.gpu.session.Session._launcher (cupy faked) sandboxes a candidate unless both its text and the text its
compile came from (the cache's <key>.cu) are such a rendering."""
from __future__ import annotations

import types
from pathlib import Path

import pytest

from test_runoff_placements import session_module  # noqa: F401  (the fixture: evo.gpu.session against a mock cupy)

from evo.families import is_family_rendering, load_families
from evo.kernel import KernelSource
from evo.problem import parse_shape

DATA = Path(__file__).parent / "data"
SHAPE = parse_shape("1024x1024x1024")


def cutlass(fams, **params) -> KernelSource:
    fam = next(f for f in fams if f.name == "cutlass_sm90")
    return fam.render(dict(fam.start_instances()[0], **params))


@pytest.fixture(scope="module")
def fams():
    return load_families()


def test_a_rendered_instance_is_its_familys_code(fams):
    assert is_family_rendering(cutlass(fams), fams, SHAPE)
    wgmma = next(f for f in fams if f.name == "wgmma_sm90")
    assert is_family_rendering(wgmma.render(wgmma.default_params()), fams, SHAPE)


@pytest.mark.parametrize("change", ["comment", "host code", "parameters", "family"])
def test_any_change_to_the_text_makes_it_a_candidates_own(fams, change):
    ks = cutlass(fams)
    text = ks.text
    if change == "comment":
        text = text + "\n// a comment\n"
    elif change == "host code":  # the host side's failure message changed: not what the family wrote
        assert "this shape is not supported" in text
        text = text.replace("this shape is not supported", "unsupported")
    elif change == "parameters":  # another instance's front matter over this instance's code
        other = cutlass(fams, STAGES=0 if ks.meta.params.get("STAGES") else 4)
        assert other.text != text
        text = other.text.split("---*/", 1)[0] + "---*/" + text.split("---*/", 1)[1]
    else:
        text = text.replace("family: cutlass_sm90", "family: no_such_family", 1)
    assert text != ks.text
    assert not is_family_rendering(KernelSource.parse(text), fams, SHAPE)


@pytest.fixture()
def session(session_module, tmp_path):  # noqa: F811
    """A Session built without a GPU; load_kernel records whether each launch would sandbox the host code."""
    sm = session_module
    s = sm.Session.__new__(sm.Session)
    s.cfg = types.SimpleNamespace(paths=types.SimpleNamespace(templates=""))
    s.info = types.SimpleNamespace(sm_count=132, smem_per_block_optin=232448)
    s.off, s.sandboxes, s._families, s._renderings = set(), None, None, {}
    s.isolated = []
    sm.load_kernel = lambda ks, cubin, problem, *a, isolate_host, **kw: s.isolated.append(isolate_host)
    s.cache = tmp_path
    return s


def launch(session, ks: KernelSource, compiled: str | None = None) -> bool:
    """Launch ks as compiled from `compiled` (default: its own text) in the fake cache; True where sandboxed."""
    cubin = session.cache / f"{ks.hash}.cubin"
    cubin.with_suffix(".cu").write_text(ks.text if compiled is None else compiled)
    session._launcher(ks, str(cubin), SHAPE)
    return session.isolated[-1]


def test_the_familys_own_host_code_runs_in_the_worker(session, fams):
    assert launch(session, cutlass(fams)) is False


def test_a_compile_that_came_from_another_text_is_sandboxed(session, fams):
    ks = cutlass(fams)
    # the same code but for spacing: one compile key, and the cached shared object is that text's
    spaced = ks.text.replace("\nstatic int fail(", "\n\nstatic int fail(")
    assert spaced != ks.text
    assert launch(session, ks, compiled=spaced) is True


def test_a_copy_that_shares_the_familys_compile_is_sandboxed(session, fams):
    """A comment added: the same compile (its key and the candidate hash leave comments out), another text."""
    ks = cutlass(fams)
    cubin = session.cache / "shared.cubin"
    cubin.with_suffix(".cu").write_text(ks.text)
    session._launcher(ks, str(cubin), SHAPE)
    copy = KernelSource.parse(ks.text + "\n// a candidate's own copy\n")
    assert copy.hash == ks.hash
    session._launcher(copy, str(cubin), SHAPE)
    assert session.isolated == [False, True]


def test_the_compiles_text_is_read_at_every_load(session, fams):
    """Another text compiled into the same cache entry after the first load: the next load is sandboxed."""
    ks = cutlass(fams)
    cubin = session.cache / "entry.cubin"
    cubin.with_suffix(".cu").write_text(ks.text)
    session._launcher(ks, str(cubin), SHAPE)
    cubin.with_suffix(".cu").write_text(ks.text + "\n// compiled since\n")
    session._launcher(ks, str(cubin), SHAPE)
    assert session.isolated == [False, True]


def test_a_missing_compile_source_is_sandboxed(session, fams):
    ks = cutlass(fams)
    session._launcher(ks, str(session.cache / "missing.cubin"), SHAPE)
    assert session.isolated[-1] is True


def test_a_candidates_own_host_code_is_sandboxed_unless_the_defence_is_off(session):
    ks = KernelSource.parse((DATA / "hostile_host.cu").read_text())
    assert launch(session, ks) is True
    session.off = {"host_sandbox"}
    assert launch(session, ks) is False


def test_a_device_launched_kernel_has_no_host_code_to_sandbox(session, fams):
    wgmma = next(f for f in fams if f.name == "wgmma_sm90")
    assert launch(session, wgmma.render(wgmma.default_params())) is False
