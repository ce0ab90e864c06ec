// tests/device_io.h: host <-> device copies of the kernel tests (tests/test_matmul_emu.cu, tests/test_widths.cu),
// through float on the host whatever the device type (floatX, fp32, fp8 codes as their type converts them).
//   upload<T>(h)        a new device buffer of h's values as T
//   download<T>(d, n)   n values of a device buffer of T, as float
#pragma once
#include <vector>
#include "llmc/cuda_common.cuh"

template <typename T>
static T* upload(const std::vector<float>& h) {
    std::vector<T> t(h.size());
    for (size_t i = 0; i < h.size(); i++) t[i] = (T)h[i];
    T* d = nullptr;
    cudaCheck(cudaMalloc(&d, t.size() * sizeof(T)));
    cudaCheck(cudaMemcpy(d, t.data(), t.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T>
static std::vector<float> download(const T* d, size_t n) {
    std::vector<T> t(n);
    cudaCheck(cudaMemcpy(t.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) f[i] = (float)t[i];
    return f;
}
