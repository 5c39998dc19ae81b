"""How compute-sanitizer output becomes a verdict (no GPU needed: the parsing and classification)."""
from evo.sanitize import parse_output, uses_mbarriers

HEAD = "========= COMPUTE-SANITIZER\n"


def test_clean_run_passes():
    r = parse_output("memcheck", 0, HEAD + "========= ERROR SUMMARY: 0 errors\n", 86)
    assert r.ok and not r.note


def test_kernel_error_fails_with_its_first_line():
    text = HEAD + ("========= Invalid __global__ write of size 2 bytes\n"
                   "=========     at evo_gemm+0x1a0\n"
                   "=========     by thread (3,0,0) in block (0,0,0)\n"
                   "=========     Address 0x7f0000000000 is out of bounds\n"
                   "========= ERROR SUMMARY: 1 error\n")
    r = parse_output("memcheck", 86, text, 86)
    assert not r.ok and r.errors == 1 and r.first_error == "Invalid __global__ write of size 2 bytes"


def test_api_error_only_is_inconclusive():
    text = HEAD + ('========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to "invalid argument" on CUDA API call to cuLaunchKernel.\n'
                   "=========     Saved host backtrace up to driver entry point at error\n"
                   "=========         Host Frame: [0x2f1a3] in libcuda.so.1\n"
                   "========= ERROR SUMMARY: 1 error\n")
    r = parse_output("memcheck", 86, text, 86)
    assert r.ok and r.note == "inconclusive" and "cuLaunchKernel" in r.first_error


def test_kernel_error_beats_api_error():
    text = HEAD + ('========= Program hit CUDA_ERROR_LAUNCH_FAILED (error 719) on CUDA API call to cuCtxSynchronize.\n'
                   "========= Invalid __shared__ read of size 4 bytes\n"
                   "========= ERROR SUMMARY: 2 errors\n")
    r = parse_output("memcheck", 86, text, 86)
    assert not r.ok and r.first_error.startswith("Invalid __shared__ read")


def test_racecheck_hazard_fails():
    text = HEAD + ("========= Error: Potential RAW hazard detected at __shared__ 0x30004a0 in block (95,0,0) :\n"
                   "=========     Write Thread (0,0,0) at evo_gemm+0x1230\n"
                   "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    r = parse_output("racecheck", 86, text, 86)
    assert not r.ok and "RAW hazard" in r.first_error


def test_failed_run_without_errors_fails():
    r = parse_output("initcheck", 1, HEAD + "Traceback (most recent call last):\nImportError: x\n", 86)
    assert not r.ok and "exit code 1" in r.first_error


def test_mbarrier_detection():
    assert uses_mbarriers('asm volatile("mbarrier.try_wait.parity.shared::cta.b64 ...")')
    assert not uses_mbarriers("__syncthreads();")


# --- with the inner run's marker (evo.sanitize.RAN): API errors are a note, never the verdict ----------------
from evo.sanitize import PADDING, RAN, tool_command  # noqa: E402


def test_api_error_with_kernel_run_passes_with_note():
    text = HEAD + ('========= Program hit CUDA_ERROR_NOT_FOUND (error 500) due to "named symbol not found" on CUDA API call '
                   "to cuGetProcAddress_v2.\n" + RAN + "\n========= ERROR SUMMARY: 1 error\n")
    r = parse_output("memcheck", 86, text, 86, ran_marker=True)
    assert r.ok and r.note == "api errors" and "cuGetProcAddress_v2" in r.first_error


def test_clean_run_with_marker_passes_without_note():
    r = parse_output("memcheck", 0, HEAD + RAN + "\n========= ERROR SUMMARY: 0 errors\n", 86, ran_marker=True)
    assert r.ok and not r.note and not r.first_error


def test_kernel_error_with_marker_fails():
    text = HEAD + ("========= Invalid __global__ read of size 2 bytes\n=========     at evo_gemm+0x90\n"
                   + RAN + "\n========= ERROR SUMMARY: 1 error\n")
    r = parse_output("memcheck", 86, text, 86, ran_marker=True)
    assert not r.ok and r.first_error.startswith("Invalid __global__ read")


def test_launch_refused_is_inconclusive_but_broken_run_fails():
    refused = HEAD + "cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_INVALID_VALUE: invalid argument\n"
    r = parse_output("memcheck", 1, refused, 86, ran_marker=True)
    assert r.ok and r.note == "inconclusive"
    broken = HEAD + "Traceback (most recent call last):\nModuleNotFoundError: No module named 'evo'\n"
    r = parse_output("memcheck", 1, broken, 86, ran_marker=True)
    assert not r.ok and "did not run" in r.first_error


def test_memcheck_command_pads_allocations_and_leaves_api_errors_out():
    cmd = tool_command("cs", "memcheck", 86, ["python", "x"])
    assert cmd[cmd.index("--report-api-errors") + 1] == "no"
    assert cmd[cmd.index("--padding") + 1] == str(PADDING) and PADDING >= 64 * 1024
    assert cmd[-2:] == ["python", "x"]
    assert "--padding" not in tool_command("cs", "memcheck", 86, ["x"], padding=False)
    rc = tool_command("cs", "racecheck", 86, ["x"])
    assert "--racecheck-report" in rc and "--padding" not in rc


def test_sanitizer_padding_switched_off_by_the_config_list(tmp_path, monkeypatch):
    """check.defences_off (as vet_champion passes it) reaches the memcheck command, as EVO_TEST_DEFENCES_OFF does."""
    import subprocess
    from pathlib import Path

    import evo.sanitize as sz
    from evo.defences import ENV
    from evo.problem import parse_shape

    src = Path(__file__).parent / "data" / "naive.cu"
    cmds = []

    def fake_run(cmd, **kw):
        cmds.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, RAN + "\n========= ERROR SUMMARY: 0 errors\n", "")

    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(sz, "find_sanitizer", lambda: "cs")
    monkeypatch.setattr(sz.subprocess, "run", fake_run)
    assert sz.sanitize(str(src), "k.cubin", parse_shape("64x64x64"), tools=("memcheck",)).ok
    assert sz.sanitize(str(src), "k.cubin", parse_shape("64x64x64"), tools=("memcheck",), off=["sanitizer_padding"]).ok
    assert "--padding" in cmds[0] and "--padding" not in cmds[1]


def test_toolkit_tools_found_in_cuda_home(tmp_path, monkeypatch):
    """compute-sanitizer and ncu come from one toolkit lookup (evo.compile.toolkit_tool): PATH, then $CUDA_HOME."""
    from evo.compile import toolkit_tool
    from evo.profile import find_ncu
    from evo.sanitize import find_sanitizer

    (tmp_path / "bin").mkdir()
    for name in ("compute-sanitizer", "ncu"):
        exe = tmp_path / "bin" / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("COMPUTE_SANITIZER", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert find_sanitizer() == str(tmp_path / "bin" / "compute-sanitizer")
    assert find_ncu() == str(tmp_path / "bin" / "ncu")
    assert toolkit_tool("no-such-tool") == ""
    monkeypatch.setenv("COMPUTE_SANITIZER", str(tmp_path / "bin" / "ncu"))
    assert find_sanitizer() == str(tmp_path / "bin" / "ncu")
