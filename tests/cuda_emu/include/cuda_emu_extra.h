// tests/cuda_emu/include/cuda_emu_extra.h: the CUDA runtime calls of a second stream that cuda_emu.h does not have
// yet, for the CUDA trainer's reduce-scatter overlapped with the backward: streams and events made with flags,
// cudaStreamWaitEvent and cudaEventQuery. In the emulation every kernel, copy and collective has finished when its
// call returns (cuda_emu.h, nccl.h), so an event is complete once recorded and a wait on it returns at once; the
// flags and priorities are accepted and change nothing. Included by nccl.h; these belong in cuda_emu.h, where they
// can move unchanged.
#pragma once
#include "cuda_emu.h"

enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
enum { cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2 };

static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) { return cudaStreamCreate(s); }
static inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int, int) { return cudaStreamCreate(s); }
static inline cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = 0;
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }
static inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int = 0) { return cudaSuccess; }
