"""bench.placement_probe: distinct gaps between input sets, one-line errors before the GPU."""
import pytest

from bench.placement_probe import gap_bytes, main


def test_every_set_gets_a_gap_of_its_own_size():
    gaps = [gap_bytes(i) for i in range(11)]
    assert len(set(gaps)) == 11
    assert min(gaps) >= 1 << 20 and max(gaps) <= 11 << 20


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
