"""Which launch: host candidates keep the host-code sandbox: every one whose host code is not its family's own.

evo.families.is_family_rendering says whether a text is its family's template rendered with its parameters, byte for
byte; evo.gpu.session.Session._launcher (cupy faked) sandboxes a candidate's host code unless its text is such a
rendering (its compile is of that code exactly: evo.kernel.KernelSource.code_hash)."""
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
def session(session_module):  # noqa: F811
    """A Session built without a GPU; load_kernel records whether each launch would sandbox the host code."""
    sm = session_module
    s = sm.Session.__new__(sm.Session)
    s.cfg = types.SimpleNamespace(paths=types.SimpleNamespace(templates=""))
    s.info = types.SimpleNamespace(sm_count=132, smem_per_block_optin=232448)
    s.off, s.sandboxes, s._families, s._renderings = set(), None, None, {}
    s.isolated = []
    sm.load_kernel = lambda ks, cubin, problem, *a, isolate_host, **kw: s.isolated.append(isolate_host)
    return s


def launch(session, ks: KernelSource) -> bool:
    """True where the launch would run ks's host code in the sandbox."""
    session._launcher(ks, f"{ks.code_hash}.cubin", SHAPE)
    return session.isolated[-1]


def test_the_familys_own_host_code_runs_in_the_worker(session, fams):
    ks, other = cutlass(fams), cutlass(fams, RASTER=2 if cutlass(fams).meta.params["RASTER"] != 2 else 1)
    assert other.text != ks.text and other.code_hash == ks.code_hash  # a runtime argument: one compile serves both
    assert [launch(session, ks), launch(session, other)] == [False, False]


def test_a_copy_with_a_comment_added_is_sandboxed(session, fams):
    """One candidate hash with the rendering (it leaves comments out), its own compile, and host code that is not
    the family's text: the sandbox, even after the rendering ran in the worker."""
    ks = cutlass(fams)
    copy = KernelSource.parse(ks.text + "\n// a candidate's own copy\n")
    assert copy.hash == ks.hash and copy.code_hash != ks.code_hash
    assert [launch(session, ks), launch(session, copy)] == [False, True]


def test_a_candidates_own_host_code_is_sandboxed_unless_the_defence_is_off(session):
    ks = KernelSource.parse((DATA / "hostile_host.cu").read_text())
    assert launch(session, ks) is True
    session.off = {"host_sandbox"}
    assert launch(session, ks) is False


def test_a_device_launched_kernel_has_no_host_code_to_sandbox(session, fams):
    wgmma = next(f for f in fams if f.name == "wgmma_sm90")
    assert launch(session, wgmma.render(wgmma.default_params())) is False
