// llmc/parallel/comm.cuh: the CUDA programs' Comm (groups of ranks, their collectives and sends on device buffers):
// llmc/parallel/comm_nccl.cuh in a build that found NCCL (USE_NCCL), else llmc/parallel/comm_one_rank.cuh, the same
// interface for one rank.
#pragma once

#ifdef USE_NCCL
#include "llmc/parallel/comm_nccl.cuh"
#else
#include "llmc/parallel/comm_one_rank.cuh"  // built without NCCL: one rank
#endif
