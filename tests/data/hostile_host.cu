/*---evo
family: hostile_host
archs: [sm_80, sm_90a]
launch: host                      # the host functions below build the parameter block and the geometry
host_args: ["TILE", "MODE"]       # MODE: how the host code misbehaves
params: {TILE: 16, MODE: 0}
block: [16, 16, 1]                # estimates only (the prior reads them); evo_host_params is authoritative
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
---*/
// naive_host.cu whose host code misbehaves on request (tests of evo.gpu.host_sandbox): host_args[1] picks it.
// 0 honest; 1 segfault; 2 hang; 3 print to stdout; 4 refuse with its process id; 5 start a thread that keeps
// counting (a stand-in for work the host code would run beside the timed calls); 6 refuse with the count;
// 7 fork a child that leaves the session (setsid) and lives on, and refuse with what fork returned;
// 8 run a shell command (system), and refuse with what it returned; 9 create a file in the directory
// EVO_HOSTILE_DIR names and open its parent's /proc/<pid>/mem for writing, and refuse with both results;
// 10 read 8 bytes of its parent's memory (process_vm_readv at the parent's first mapping) and ptrace-attach a
// process that does not exist (ESRCH where ptrace is allowed at all), and refuse with both results.
#include <cuda_fp16.h>
#include <fcntl.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>


// ---- the host-launch ABI (README, "Host-launched kernels"); layout mirrored by evo/gpu/host_launch.py ----
struct EvoHostLaunch {
    int abi;                   // 1
    int params_bytes;          // size of the kernel's single by-value argument
    unsigned grid[3];
    unsigned block[3];
    unsigned cluster[3];       // {1,1,1}: no cluster
    int smem;                  // dynamic shared memory, bytes
    int pdl;                   // 1: may be launched with programmatic dependent launch
    long long workspace;       // bytes of device workspace the kernel needs
    int n_fills;               // workspace ranges to fill on the stream before every call
    int fill_elem[4];          // element size of each fill: 1, 2 or 4 bytes
    long long fill_offset[4];  // byte offset into the workspace
    long long fill_count[4];   // number of elements
    unsigned fill_value[4];
    char message[160];         // why a call returned non-zero
};

struct NaiveParams {
    const __half* A;
    const __half* B;
    __half* C;
    int M, N, K;
};

extern "C" __global__ void evo_gemm(const __grid_constant__ NaiveParams p) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= p.M || col >= p.N) return;
    float acc = 0.f;
    for (int k = 0; k < p.K; ++k)
        acc += __half2float(p.A[(size_t)row * p.K + k]) * __half2float(p.B[(size_t)col * p.K + k]);
    p.C[(size_t)row * p.N + col] = __float2half_rn(acc);
}

static volatile unsigned long long evo_ticks = 0;
static void* evo_counter(void*) {
    for (;;) ++evo_ticks;
    return nullptr;
}

static int misbehave(const long long* args, int nargs, EvoHostLaunch* out) {
    int mode = nargs > 1 ? (int)args[1] : 0;
    if (mode == 1) *(volatile int*)nullptr = 1;
    if (mode == 2) for (;;) sleep(1);
    if (mode == 3) { printf("EVOH garbage on stdout\n"); fflush(stdout); }
    if (mode == 4) { memset(out, 0, sizeof(*out)); sprintf(out->message, "pid %d", (int)getpid()); return 9; }
    if (mode == 5) {  // returns once the thread has counted: on a loaded machine it might not run before the stop
        pthread_t t;
        pthread_create(&t, nullptr, evo_counter, nullptr);
        while (evo_ticks == 0) usleep(100);
    }
    if (mode == 6) { memset(out, 0, sizeof(*out)); sprintf(out->message, "ticks %llu", evo_ticks); return 9; }
    if (mode == 7) {
        int ready[2];
        if (pipe(ready) != 0) return 8;
        pid_t child = fork();
        if (child == 0) { setsid(); char c = 1; (void)!write(ready[1], &c, 1); for (;;) sleep(1); }
        int err = child < 0 ? errno : 0;
        char c;
        if (child > 0) (void)!read(ready[0], &c, 1);  // it has left the session before the caller stops ours
        close(ready[0]);
        close(ready[1]);
        memset(out, 0, sizeof(*out));
        sprintf(out->message, "fork %d errno %d", (int)child, err);
        return 9;
    }
    if (mode == 8) {
        int r = system("exit 3");
        memset(out, 0, sizeof(*out));
        sprintf(out->message, "system %d", r);
        return 9;
    }
    if (mode == 9) {
        char path[512];
        const char* dir = getenv("EVO_HOSTILE_DIR");
        snprintf(path, sizeof(path), "%s/written", dir ? dir : "/tmp");
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = fd < 0 ? errno : 0;
        if (fd >= 0) close(fd);
        snprintf(path, sizeof(path), "/proc/%d/mem", (int)getppid());
        int mem = open(path, O_RDWR);
        int merr = mem < 0 ? errno : 0;
        if (mem >= 0) close(mem);
        memset(out, 0, sizeof(*out));
        sprintf(out->message, "write %d errno %d mem %d errno %d", fd >= 0, err, mem >= 0, merr);
        return 9;
    }
    if (mode == 10) {
        char path[64], line[256];
        unsigned long long lo = 0;
        snprintf(path, sizeof(path), "/proc/%d/maps", (int)getppid());
        FILE* maps = fopen(path, "r");
        if (maps && fgets(line, sizeof(line), maps)) sscanf(line, "%llx", &lo);
        if (maps) fclose(maps);
        unsigned long long word = 0;
        struct iovec here = {&word, sizeof(word)}, there = {(void*)lo, sizeof(word)};
        long got = lo ? (long)process_vm_readv(getppid(), &here, 1, &there, 1, 0) : -2;
        int err = got < 0 ? errno : 0;
        long traced = ptrace(PTRACE_ATTACH, 0x3fffffff, nullptr, nullptr);  // no such process: ESRCH if allowed at all
        int terr = traced < 0 ? errno : 0;
        memset(out, 0, sizeof(*out));
        sprintf(out->message, "peek %ld errno %d trace %ld errno %d", got, err, traced, terr);
        return 9;
    }
    return 0;
}

static int fill_geometry(int M, int N, const long long* args, int nargs, EvoHostLaunch* out) {
    memset(out, 0, sizeof(*out));
    out->abi = 1;
    out->params_bytes = (int)sizeof(NaiveParams);
    int tile = nargs > 0 ? (int)args[0] : 16;
    if (tile < 1 || tile > 32) {
        strcpy(out->message, "TILE must be 1..32");
        return 1;
    }
    out->block[0] = out->block[1] = (unsigned)tile;
    out->block[2] = 1;
    out->grid[0] = (unsigned)((N + tile - 1) / tile);
    out->grid[1] = (unsigned)((M + tile - 1) / tile);
    out->grid[2] = 1;
    out->cluster[0] = out->cluster[1] = out->cluster[2] = 1;
    return 0;
}

extern "C" int evo_host_query(int M, int N, int K, int num_sms, const long long* args, int nargs,
                              EvoHostLaunch* out) {
    (void)K;
    (void)num_sms;
    if (int rc = misbehave(args, nargs, out)) return rc;
    return fill_geometry(M, N, args, nargs, out);
}

extern "C" int evo_host_params(int M, int N, int K, int num_sms, const long long* args, int nargs,
                               const void* A, const void* B, void* C, void* workspace,
                               EvoHostLaunch* out, void* params, int params_cap) {
    (void)num_sms;
    (void)workspace;
    if (int rc = fill_geometry(M, N, args, nargs, out)) return rc;
    if (params_cap < (int)sizeof(NaiveParams)) {
        strcpy(out->message, "parameter buffer too small");
        return 2;
    }
    NaiveParams p{(const __half*)A, (const __half*)B, (__half*)C, M, N, K};
    memcpy(params, &p, sizeof(p));
    return 0;
}
