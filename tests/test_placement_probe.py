"""bench.placement_probe: one-line errors before the GPU (its gaps are evo.placements.pad_bytes, tested in test_bench_compare)."""
import pytest

from bench.placement_probe import main


@pytest.mark.parametrize("argv, says", [
    (["--shape", "512x2048x4096", "--sets", "1"], "--sets must be 2 to 11"),
    (["--shape", "512x2048"], "malformed shape"),
])
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err


def test_without_a_gpu_one_line(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main(["--shape", "512x2048x4096"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error:")
