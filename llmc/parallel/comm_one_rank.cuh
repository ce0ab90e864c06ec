// llmc/parallel/comm_one_rank.cuh: the Comm interface of llmc/parallel/comm_nccl.cuh for a build without NCCL (the
// Makefile found no nccl.h): one rank only. Every group is that one rank: nothing to reduce, a gather or scatter is
// a copy on the group's stream, and a send or receive (which needs a peer) stops the run.
#pragma once

#include <vector>
#include "llmc/cuda_common.cuh"
#include "llmc/utils.h"
#include "llmc/parallel/launch.h"

struct Comm {
    int size = 1, rank = 0;
    cudaStream_t stream = nullptr;
};
static Comm comm_init(int*, char***) {
    const LaunchInfo li = launch_info();
    if (li.world > 1)
        die("%d ranks were started (%s), but this train_gpt was built without NCCL: rebuild it where nccl.h is found "
            "(make train_gpt NCCL_HOME=<dir with include/nccl.h and lib/>), or start one rank", li.world, li.source);
    cuda_require_device();
    cudaCheck(cudaSetDevice(0));
    Comm c;
    cudaCheck(cudaStreamCreate(&c.stream));
    return c;
}
static void comm_finalize() {}
static Comm comm_group(const Comm& parent, const std::vector<int>&, const char* = "") { return parent; }
template <typename T> static void comm_all_reduce_sum(const Comm&, T*, size_t) {}
template <typename T> static void comm_all_reduce_max(const Comm&, T*, size_t) {}
template <typename T> static void comm_reduce_scatter(const Comm& c, const T* send, T* recv, size_t n) {
    if (recv != send && n) cudaCheck(cudaMemcpyAsync(recv, send, n * sizeof(T), cudaMemcpyDeviceToDevice, c.stream));
}
template <typename T> static void comm_all_gather(const Comm& c, const T* send, T* recv, size_t n) {
    if (recv != send && n) cudaCheck(cudaMemcpyAsync(recv, send, n * sizeof(T), cudaMemcpyDeviceToDevice, c.stream));
}
static void comm_set_stream(Comm* c, cudaStream_t s) { c->stream = s; }
static void comm_warm_up(const Comm&, bool) {}
static void comm_host_sum(const Comm&, double*, size_t) {}
static void comm_host_max(const Comm&, double*, size_t) {}
static void comm_barrier(const Comm& c) { cudaCheck(cudaStreamSynchronize(c.stream)); }
static void comm_stream_sync(const Comm& c, const char*) { cudaCheck(cudaStreamSynchronize(c.stream)); }
static void comm_wait_stream(const Comm&, cudaStream_t s, const char*) { cudaCheck(cudaStreamSynchronize(s)); }
// point to point needs a peer: never called with one rank (a pipeline needs --pp ranks)
struct CommRequest {};
template <typename T> static void comm_send(const Comm&, const T*, size_t, int peer, int, CommRequest*) {
    die("comm_send to rank %d: this train_gpt was built without NCCL", peer);
}
template <typename T> static void comm_recv(const Comm&, T*, size_t, int peer, int) {
    die("comm_recv from rank %d: this train_gpt was built without NCCL", peer);
}
static void comm_wait(CommRequest*) {}
static void comm_group_start() {}
static void comm_group_end() {}
