// llmc/gpt/axes.cuh: what each parallel axis, and the fp8 path, adds to the CUDA trainer's struct GPT (train_gpt.cu):
// one sub-struct each. On one GPU they hold groups of one rank and zero counts. The code that reads and writes them
// lives beside the axis: llmc/gpt/tensor_parallel.cuh (TensorParallel), llmc/gpt/data_parallel.cuh (DataParallel),
// llmc/gpt/pipeline.cuh (Pipeline), llmc/gpt/fp8_linear.cuh (Fp8Linears); the buffer-table rows they own are in
// llmc/gpt/memory.cuh.
#pragma once

#include <vector>
#include <cuda_fp8.h>
#include "llmc/adamw.cuh"
#include "llmc/fp8.cuh"
#include "llmc/precision.cuh"
#include "llmc/parallel/zero.h"

// fp8 (--fp8; docs/fp8.md): the four linear layers k of layer l (LINEAR_QKV ...) are tensor i = 4 l + k (l of the
// whole model) of each scaling state.
struct Fp8Linears {
    Fp8Options opt;             // --fp8, --fp8-history, --fp8-margin
    Fp8Meta w;                  // E4M3: the weights, scaled by their own amax after every update
    Fp8Meta x;                  // E4M3: the GEMM inputs (ln1, attention output, ln2, MLP activation)
    Fp8Meta dy;                 // E5M2: the GEMM output gradients
    __nv_fp8_e4m3* w8 = nullptr;  // ZeRO < 3: [2, Pw] the step's fp8 weights, then their transposes; ZeRO 3: [2, one
                                  // layer's] cast after each gather
    size_t w8_half = 0;           // Pw (ZeRO 3: the largest layer's linear weights): where the transposes start
    std::vector<size_t> w8_off;   // [4 L] tensor i's offset in each half (SIZE_MAX: not on this stage)
    __nv_fp8_e4m3* x8 = nullptr;  // [N, max IC] a GEMM input (forward), or [max IC, N] its transpose (backward)
    __nv_fp8_e5m2* dy8 = nullptr; // [N, max OC] an output gradient
    __nv_fp8_e5m2* dyt8 = nullptr;  // [max OC, N] its transpose
};
