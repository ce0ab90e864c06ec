// tests/cuda_emu/include/nvtx3/nvToolsExt.h: the NVTX ranges of llmc/profile.cuh, for the emulation: no tool ever
// attaches to an emulated run, so a range is nothing (the CUDA Toolkit's header does the same when no tool is loaded).
#pragma once
static inline int nvtxRangePushA(const char*) { return 0; }
static inline int nvtxRangePop() { return 0; }
