// dev/cuda/ceilings.h: the copy-bandwidth ceiling, shared by dev/probe/ceilings.cu and the dev/cuda harness.
//   fill_random_bits / fill_random_bf16 / fill_random_fp8   hashed uniform data on the device
//   copy_kernel, count_mismatches                          vectorized device copy and its exactness check
//   measure_copy(copy_mib, warmup, reps, sms, stream)      GB/s of the copy kernel and of cudaMemcpyAsync D2D,
//                                                          (bytes read + bytes written) / median time
//   median(times), grid_for(sms)
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include "llmc/utils.h"
#include "llmc/cuda_common.cuh"

// ----------------------------------------------------------------------------------------------
// random data and the copy kernels

__device__ __forceinline__ uint64_t hash64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

// uniform in [-1, 1) from the index and a seed
__device__ __forceinline__ float uniform_pm1(size_t i, uint64_t seed) {
    uint64_t h = hash64(i * 0x9e3779b97f4a7c15ull + seed);
    return (float)(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_random_bits(uint4* x, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t a = hash64(2 * i + seed), b = hash64(2 * i + 1 + seed);
        x[i] = make_uint4((uint32_t)a, (uint32_t)(a >> 32), (uint32_t)b, (uint32_t)(b >> 32));
    }
}

__global__ void fill_random_bf16(__nv_bfloat16* x, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16(uniform_pm1(i, seed));
}

__global__ void fill_random_fp8(__nv_fp8_e4m3* x, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __nv_fp8_e4m3(uniform_pm1(i, seed));
}

// dst[i] = src[i] for n 16-byte words; each thread moves four words per iteration so that four loads
// are in flight before the stores.
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}

__global__ void count_mismatches(const uint4* a, const uint4* b, size_t n, unsigned long long* count) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 x = a[i], y = b[i];
        if (x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w) atomicAdd(count, 1ull);
    }
}

static int grid_for(int sms) { return sms * 8; }  // 8 blocks of 256 threads = 2048 threads per SM

static double median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}


struct CopyResult {
    std::string method;
    size_t bytes;     // size of the buffer copied
    double ms;        // median time of one copy
    double gbs;       // (read + written bytes) / time
};

// Copies a buffer of copy_mib MiB (shrunk to fit free memory) `warmup` + `reps` times with each method; the copy
// must be exact. Returns one result per method: the copy kernel, then cudaMemcpyAsync.
static std::vector<CopyResult> measure_copy(size_t copy_mib, int warmup, int reps, int sms, cudaStream_t stream) {
    size_t bytes = copy_mib << 20;
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    size_t reserve = 512ull << 20;
    if (2 * bytes + reserve > free_b) {
        size_t fit = free_b > reserve ? ((free_b - reserve) / 2) & ~((1ull << 20) - 1) : 0;
        if (fit < (64ull << 20)) die("not enough free GPU memory for the copy test (%zu MiB free)", free_b >> 20);
        printf("note: %zu MiB copy buffers do not fit in %zu MiB free; using %zu MiB\n",
               copy_mib, free_b >> 20, fit >> 20);
        bytes = fit;
    }
    size_t n16 = bytes / 16;
    uint4 *src = nullptr, *dst = nullptr;
    unsigned long long* d_count = nullptr;
    cudaCheck(cudaMalloc(&src, bytes));
    cudaCheck(cudaMalloc(&dst, bytes));
    cudaCheck(cudaMalloc(&d_count, sizeof(unsigned long long)));
    fill_random_bits<<<grid_for(sms), 256, 0, stream>>>(src, n16, 1234);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaMemsetAsync(dst, 0, bytes, stream));

    std::vector<CopyResult> results;
    EventTimer timer = event_timer_create();
    for (int method = 0; method < 2; method++) {
        const char* name = method == 0 ? "copy kernel (uint4)" : "cudaMemcpyAsync D2D";
        std::vector<float> times;
        for (int r = 0; r < warmup + reps; r++) {
            event_timer_start(&timer, stream);
            if (method == 0) {
                copy_kernel<<<grid_for(sms), 256, 0, stream>>>(src, dst, n16);
                cudaCheck(cudaGetLastError());
            } else {
                cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
            }
            float ms = event_timer_stop(&timer, stream);
            if (r >= warmup) times.push_back(ms);
        }
        // the copy must be exact, or its bandwidth means nothing
        unsigned long long mismatches = 0;
        cudaCheck(cudaMemsetAsync(d_count, 0, sizeof(unsigned long long), stream));
        count_mismatches<<<grid_for(sms), 256, 0, stream>>>(src, dst, n16, d_count);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaMemcpyAsync(&mismatches, d_count, sizeof(mismatches), cudaMemcpyDeviceToHost, stream));
        cudaCheck(cudaStreamSynchronize(stream));
        if (mismatches != 0) die("%s: destination differs from source in %llu of %zu 16-byte words", name, mismatches, n16);
        cudaCheck(cudaMemsetAsync(dst, 0, bytes, stream));
        double ms = median(times);
        results.push_back({name, bytes, ms, 2.0 * bytes / (ms * 1e-3) / 1e9});
    }
    event_timer_destroy(&timer);
    cudaCheck(cudaFree(src));
    cudaCheck(cudaFree(dst));
    cudaCheck(cudaFree(d_count));
    return results;
}
