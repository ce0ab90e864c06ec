// llmc/cuda_common.cuh: CUDA helpers shared by every CUDA program of the project.
//   cudaCheck(call)    CUDA runtime status; prints file:line and the error string, exits 1
//   cublasCheck(call)  cuBLAS or cuBLASLt status (both return cublasStatus_t), same behaviour
//   ncclCheck(call)    NCCL status (only when USE_NCCL is defined), same behaviour
//   cuda_require_device()   dies with a clear message when no CUDA device is usable
//   EventTimer              CUDA event pair timing work on one stream, in milliseconds
//   print_device_info(dev)  name, compute capability, SMs, memory, L2, clocks, driver/runtime
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <cublasLt.h>
#ifdef USE_NCCL
#include <nccl.h>
#endif

static inline void cuda_check_(cudaError_t err, const char* call, const char* file, int line) {
    if (err == cudaSuccess) return;
    fflush(stdout);
    fprintf(stderr, "CUDA error %s (%s) in %s [%s:%d]\n", cudaGetErrorName(err), cudaGetErrorString(err),
            call, file, line);
    exit(1);
}
#define cudaCheck(call) cuda_check_((call), #call, __FILE__, __LINE__)

static inline void cublas_check_(cublasStatus_t status, const char* call, const char* file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    fflush(stdout);
    fprintf(stderr, "cuBLAS error %s (%s) in %s [%s:%d]\n", cublasLtGetStatusName(status),
            cublasLtGetStatusString(status), call, file, line);
    exit(1);
}
#define cublasCheck(call) cublas_check_((call), #call, __FILE__, __LINE__)

#ifdef USE_NCCL
static inline void nccl_check_(ncclResult_t result, const char* call, const char* file, int line) {
    if (result == ncclSuccess) return;
    fflush(stdout);
    fprintf(stderr, "NCCL error %d (%s) in %s [%s:%d]; last NCCL message: %s\n"
            "  (rerun with NCCL_DEBUG=WARN or NCCL_DEBUG=INFO for NCCL's own log)\n",
            (int)result, ncclGetErrorString(result), call, file, line, ncclGetLastError(nullptr));
    exit(1);
}
#define ncclCheck(call) nccl_check_((call), #call, __FILE__, __LINE__)
#endif

// Returns the number of CUDA devices; dies with what to do when there is none (no driver, no GPU,
// or CUDA_VISIBLE_DEVICES hiding them all).
static inline int cuda_require_device() {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        fflush(stdout);
        fprintf(stderr, "error: no usable CUDA device (cudaGetDeviceCount: %s, count %d). This program needs an "
                "NVIDIA GPU and its driver; check nvidia-smi and CUDA_VISIBLE_DEVICES.\n",
                err == cudaSuccess ? "no error" : cudaGetErrorString(err), count);
        exit(1);
    }
    return count;
}

// Times GPU work between start and stop on one stream. Usage:
//   EventTimer t = event_timer_create();
//   event_timer_start(&t, stream); ...launch work...; float ms = event_timer_stop(&t, stream);
struct EventTimer {
    cudaEvent_t start;
    cudaEvent_t stop;
};

static inline EventTimer event_timer_create() {
    EventTimer t;
    cudaCheck(cudaEventCreate(&t.start));
    cudaCheck(cudaEventCreate(&t.stop));
    return t;
}

static inline void event_timer_destroy(EventTimer* t) {
    cudaCheck(cudaEventDestroy(t->start));
    cudaCheck(cudaEventDestroy(t->stop));
}

static inline void event_timer_start(EventTimer* t, cudaStream_t stream) {
    cudaCheck(cudaEventRecord(t->start, stream));
}

// Records the stop event, waits for it, and returns the elapsed milliseconds.
static inline float event_timer_stop(EventTimer* t, cudaStream_t stream) {
    cudaCheck(cudaEventRecord(t->stop, stream));
    cudaCheck(cudaEventSynchronize(t->stop));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, t->start, t->stop));
    return ms;
}

// Prints the properties that matter for performance figures, one "key: value" per line.
static inline void print_device_info(int device) {
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    int driver = 0, runtime = 0, sm_clock_khz = 0, mem_clock_khz = 0, bus_bits = 0;
    cudaCheck(cudaDriverGetVersion(&driver));
    cudaCheck(cudaRuntimeGetVersion(&runtime));
    cudaCheck(cudaDeviceGetAttribute(&sm_clock_khz, cudaDevAttrClockRate, device));
    cudaCheck(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device));
    cudaCheck(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
    // DDR: two transfers per memory clock; bytes/s = clock * 2 * bus width / 8.
    double mem_bw_gbs = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    printf("device %d: %s\n", device, prop.name);
    printf("  compute capability: %d.%d\n", prop.major, prop.minor);
    printf("  SMs: %d\n", prop.multiProcessorCount);
    printf("  global memory: %.1f GiB\n", prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    printf("  L2 cache: %.1f MiB\n", prop.l2CacheSize / (1024.0 * 1024.0));
    printf("  SM clock (max): %d MHz\n", sm_clock_khz / 1000);
    printf("  memory: %d-bit bus, %d MHz, theoretical %.0f GB/s\n", bus_bits, mem_clock_khz / 1000, mem_bw_gbs);
    printf("  driver CUDA version: %d.%d, runtime: %d.%d\n", driver / 1000, (driver % 1000) / 10,
           runtime / 1000, (runtime % 1000) / 10);
}
