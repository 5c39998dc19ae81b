"""Bad input is refused with one clear line on stderr, exit code 2 and no traceback, through the real CLIs."""
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HAVE_GPU

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"


def run(*args, cwd=ROOT, timeout=120):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def one_line(res, *words):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout, res.stderr
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, res.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("shape, words", [
    ("4096x4096", ["malformed shape", "MxNxK"]),
    ("0x1x1", ["at least 1"]),
    ("-1x2x3", ["not a positive integer"]),
    ("1e9x1x1", ["not a positive integer"]),
    ("x", ["malformed shape"]),
    ("200000x200000x1024", ["GiB", "limit"]),     # fits the dimension limit, not memory
    ("2000000x1x1", ["dimension over"]),
])
@pytest.mark.parametrize("cli", ["evo.search", "evo.evaluate"])
def test_malformed_shapes(tmp_path, cli, shape, words):
    extra = [] if cli == "evo.search" else [str(DATA / "naive.cu")]
    one_line(run(cli, *extra, f"--shape={shape}", "--db", str(tmp_path / "e.db")), *words)


def test_unknown_family_before_any_gpu(tmp_path):
    one_line(run("evo.search", "--shape", "64x64x64", "--families", "nope", "--db", str(tmp_path / "e.db")),
             "unknown family nope")


def test_unknown_proposer(tmp_path):
    one_line(run("evo.search", "--shape", "64x64x64", "--proposer", "magic", "--db", str(tmp_path / "e.db")),
             "unknown proposer")


@pytest.mark.parametrize("text, words", [
    ("search: [unclosed\n", ["not valid YAML"]),
    ("search:\n  budget_minutes: fast\n", ["search.budget_minutes", "number"]),
    ("serch:\n  seed: 1\n", ["unknown config key serch"]),
    ("- 1\n- 2\n", ["mapping"]),
    ("check:\n  sanitize: maybe\n", ["check.sanitize", "true or false"]),
])
def test_malformed_config(tmp_path, text, words):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    one_line(run("evo.search", "--shape", "64x64x64", "--config", str(cfg), "--db", str(tmp_path / "e.db")), *words)


def test_missing_config_file(tmp_path):
    one_line(run("evo.search", "--shape", "64x64x64", "--config", str(tmp_path / "nope.yaml")), "cannot read config")


@pytest.mark.parametrize("text, words", [
    ("__global__ void f() {}\n", []),                                             # no front matter
    ((DATA / "naive.cu").read_text().replace("evo_gemm", "my_gemm"), []),          # no evo_gemm entry
    ((DATA / "naive.cu").read_text().replace("block: [16, 16, 1]", "block: [16, 16]"), []),
])
def test_kernel_not_following_the_abi(tmp_path, text, words):
    k = tmp_path / "k.cu"
    k.write_text(text)
    one_line(run("evo.evaluate", str(k), "--shape", "64x64x64", "--db", str(tmp_path / "e.db")), *words)


def test_kernel_file_missing(tmp_path):
    one_line(run("evo.evaluate", str(tmp_path / "none.cu"), "--shape", "64x64x64"), "cannot read")


def test_sanitize_cli_bad_input(tmp_path):
    one_line(run("evo.sanitize", str(DATA / "naive.cu"), "--shape", "4096x4096"), "malformed shape")
    one_line(run("evo.sanitize", str(DATA / "naive.cu"), "--shape", "64x64x64", "--tools", "nope"), "unknown sanitizer tool")


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is visible here")
@pytest.mark.parametrize("cli", ["evo.search", "evo.evaluate", "evo.sanitize"])
def test_no_gpu_is_one_line(tmp_path, cli):
    extra = [] if cli == "evo.search" else [str(DATA / "naive.cu")]
    res = run(cli, *extra, "--shape", "64x64x64", "--db", str(tmp_path / "e.db")) if cli != "evo.sanitize" else \
        run(cli, *extra, "--shape", "64x64x64")
    if cli == "evo.sanitize" and "compute-sanitizer not available" in res.stderr:
        one_line(res, "compute-sanitizer not available")  # reported gracefully where the tool is absent
        return
    line = one_line(res, "no CUDA GPU is visible")
    assert res.stdout == "", res.stdout  # nothing printed before the error
    assert line.startswith("error: no CUDA GPU is visible")


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is visible here")
def test_no_gpu_hidden_by_cuda_visible_devices(tmp_path):
    import os

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    res = subprocess.run([sys.executable, "-m", "evo.search", "--shape", "64x64x64", "--db", str(tmp_path / "e.db")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    one_line(res, "no CUDA GPU is visible")


def test_hook_probe_refuses_a_bad_shape_before_looking_for_a_gpu():
    one_line(run("bench.hook_probe", "--shape", "64x64"), "malformed shape")


@pytest.mark.skipif(HAVE_GPU, reason="the no-GPU refusal")
def test_hook_probe_without_a_gpu():
    one_line(run("bench.hook_probe", "--shape", "64x64x64"), "no CUDA GPU")


def test_phase_trace_refuses_bad_input_before_looking_for_a_gpu():
    one_line(run("bench.phase_trace", "--family", "wgmma_sm90", "--shape", "64x64", "{}"), "malformed shape")
    one_line(run("bench.phase_trace", "--family", "wgmma_sm90", "--shape", "64x64x64", "{BM"), "not a JSON object")
    one_line(run("bench.phase_trace", "--family", "wgmma_sm90", "--shape", "64x64x64", "[1]"), "must be a JSON object")
    one_line(run("bench.phase_trace", "--family", "wgmma_skinny_sm90", "--shape", "64x64x64", "--waits", "{}"),
             "--waits is wgmma_sm90's")


@pytest.mark.skipif(HAVE_GPU, reason="the no-GPU refusal")
def test_phase_trace_and_cluster_placement_without_a_gpu():
    one_line(run("bench.phase_trace", "--family", "wgmma_sm90", "--shape", "64x64x64", "{}"), "no CUDA GPU")
    one_line(run("bench.cluster_placement", "--policy", "1"), "no CUDA GPU")
    one_line(run("bench.cluster_placement", "--policy", "7"), "--policy takes a comma list")
    one_line(run("bench.cluster_placement", "--grid2d", "7"), "--grid2d takes a comma list")
    one_line(run("bench.cluster_placement", "--grid2d", "132"), "--grid2d takes a comma list")
