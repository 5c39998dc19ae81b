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
