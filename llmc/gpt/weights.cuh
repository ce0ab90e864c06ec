// llmc/gpt/weights.cuh: weights in and out of the CUDA trainer: fp32 weights and moments uploaded into a rank's
// params, master and moments (its stage, its tp slices, its ZeRO pieces) from the init or a checkpoint of any layout,
// a rank's share written into a checkpoint, and whole tensors sent one at a time to rank 0 for exports.
#pragma once

#include <chrono>
#include <string>
#include <vector>
#include "llmc/gpt/model.cuh"
#include "llmc/init.h"
#include "llmc/run/assemble.h"
#include "llmc/run/weights_io.h"
#include "llmc/parallel/comm_timeout.h"
#include "llmc/run/checkpoint.h"
#include "llmc/run/test_hooks.h"

// params[i] = floatX(master[i])
__global__ void floatX_from_f32_kernel(floatX* dst, const float* src, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_floatX(src[i]);
}


// params = floatX(master) for what this rank holds: everything (ZeRO 0), its pieces of every bucket then
// all-gathered (ZeRO 1, 2), its shard (ZeRO 3, where the gather buffers no longer hold current weights).
static void params_from_master(GPT* g) {
    const int zero = g->L.zero, dp = g->L.topo.dp;
    if (zero == 0 || zero >= 3) {
        const size_t n = zero >= 3 ? g->dp.shard : g->table.total;
        floatX_from_f32_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g->stream>>>(g->params, g->master, n);
        cudaCheck(cudaGetLastError());
        for (int& h : g->dp.gather_holds) h = -1;
        return;
    }
    for (const Bucket& b : g->dp.buckets) {
        const Range piece = zero_piece(b, dp, g->L.topo.dp_rank);
        floatX_from_f32_kernel<<<(unsigned)ceil_div(piece.size(), 256), 256, 0, g->stream>>>(
            g->params + piece.lo, g->master + zero_shard_offset(b, dp), piece.size());
        cudaCheck(cudaGetLastError());
    }
    dp_params_updated(g->dp, g->params, g->stream);  // ZeRO 1/2: every rank's pieces to every rank
}

// Uploads this rank's fp32 weights (and moments, or zeros when m is null); params = floatX(master). Given whole over
// the rank's table [P] (g->table's layout, part_of_full of llmc/run/assemble.h: its stage's tensors, its tp
// slices), under ZeRO >= 1 each rank keeps its pieces (zero_take_shard); or, with `shards`, already as this rank's
// elements (its ZeRO shard under ZeRO >= 1: part_read). Every rank calls it (ZeRO 1/2 all-gather the params).
static void gpt_set_weights(GPT* g, const float* p, const float* m, const float* v, bool shards = false) {
    const int zero = g->L.zero;
    const size_t n = zero >= 1 ? g->dp.shard : g->table.total;  // master and moments: this rank's elements
    std::vector<float> pieces[3];
    const float* src[3] = {p, m, v};
    for (int i = 0; i < 3 && zero >= 1 && !shards; i++) {
        if (!src[i]) continue;
        pieces[i].resize(n);
        zero_take_shard(g->dp.buckets, g->L.topo.dp, g->L.topo.dp_rank, src[i], pieces[i].data());
        src[i] = pieces[i].data();
    }
    cudaCheck(cudaMemcpy(g->master, src[0], n * sizeof(float), cudaMemcpyHostToDevice));
    params_from_master(g);
    const size_t msz = g->bf16_moments ? 2 : 4;
    if (!m) {
        cudaCheck(cudaMemset(g->m, 0, n * msz));
        cudaCheck(cudaMemset(g->v, 0, n * msz));
    } else if (!g->bf16_moments) {
        cudaCheck(cudaMemcpy(g->m, src[1], n * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(g->v, src[2], n * 4, cudaMemcpyHostToDevice));
    } else {
        std::vector<__nv_bfloat16> h(n);
        for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16(src[1][i]);
        cudaCheck(cudaMemcpy(g->m, h.data(), n * 2, cudaMemcpyHostToDevice));
        for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16(src[2][i]);
        cudaCheck(cudaMemcpy(g->v, h.data(), n * 2, cudaMemcpyHostToDevice));
    }
    comm_wait_stream(g->world, g->stream, "the weights' upload (ZeRO 1/2: their all-gather)");
}

// out[P] = the whole of a device buffer of T (float or bf16) that this rank holds whole (sharded false) or as its
// shard: then every bucket is all-gathered over dp into grad32 (idle between steps, at least a bucket of floats)
// and copied out. Every rank of the dp group calls it.
template <typename T>
static void download_whole(GPT* g, const T* src, bool sharded, std::vector<float>* out) {
    const size_t P = g->table.total;
    const int dp = g->L.topo.dp;
    std::vector<T> h(P);
    if (!sharded) {
        cudaCheck(cudaMemcpy(h.data(), src, P * sizeof(T), cudaMemcpyDeviceToHost));
    } else {
        for (const Bucket& b : g->dp.buckets) {
            comm_all_gather(g->dp.comm, src + zero_shard_offset(b, dp), (T*)g->dp.grad32, b.range.size() / dp);
            cudaCheck(cudaMemcpyAsync(h.data() + b.range.lo, g->dp.grad32, b.range.size() * sizeof(T),
                                      cudaMemcpyDeviceToHost, g->dp.comm.stream));
            comm_stream_sync(g->dp.comm, "all-gather of a checkpoint's shards");
        }
    }
    out->resize(P);
    for (size_t i = 0; i < P; i++) (*out)[i] = to_float(h[i]);
}

// Downloads the fp32 master weights and the moments (as fp32) of this rank's part: buffers [P] in g->table's layout
// (ZeRO >= 1: gathered from the shards; every rank of the dp group calls it).
static void gpt_get_weights(GPT* g, std::vector<float>* p, std::vector<float>* m, std::vector<float>* v) {
    const bool sharded = g->L.zero >= 1;
    comm_wait_stream(g->world, g->stream, "the work before a download of the weights");
    download_whole(g, g->master, sharded, p);
    if (!m) return;
    if (!g->bf16_moments) {
        download_whole(g, (const float*)g->m, sharded, m);
        download_whole(g, (const float*)g->v, sharded, v);
    } else {
        download_whole(g, (const __nv_bfloat16*)g->m, sharded, m);
        download_whole(g, (const __nv_bfloat16*)g->v, sharded, v);
    }
}

// The weights as a Hugging Face file (--save-safetensors), one whole tensor at a time on world rank 0: every rank
// downloads its part (gathered over dp under ZeRO: gpt_get_weights); the dp-rank-0 member of every other (stage, tp
// rank) sends its slices (assemble_export, llmc/run/assemble.h) through grad32 (idle between steps), in pieces
// that fit every rank's grad32. Every rank calls it. A sender's wait covers rank 0's writing of the tensors before:
// under --io-timeout.
static void gpt_export(GPT* g, const ParamTable& full, const std::string& path) {
    const Topology& me = g->L.topo;
    std::vector<float> mine;
    gpt_get_weights(g, &mine, nullptr, nullptr);
    double piece = 0;  // the smallest grad32 of the ranks (minus the largest negative)
    if (me.world > 1) {
        piece = -(double)g->dp.n_grad32;
        comm_host_max(g->world, &piece, 1);
        piece = -piece;
    }
    AssembleTransport<float> io;
    io.send = [&](int k, const float* data, size_t n) {
        CommRequest req;
        cudaCheck(cudaMemcpy(g->dp.grad32, data, n * sizeof(float), cudaMemcpyHostToDevice));
        comm_send(g->world, (const float*)g->dp.grad32, n, 0, k, &req);
        comm_wait(&req);
    };
    io.recv = [&](int k, int from, float* data, size_t n) {
        comm_recv(g->world, g->dp.grad32, n, from, k);
        cudaCheck(cudaMemcpyAsync(data, g->dp.grad32, n * sizeof(float), cudaMemcpyDeviceToHost, g->world.stream));
        comm_stream_sync(g->world, "receive of an export's tensor");
    };
    comm_io_wait([&] {
        if (me.rank == 0) test_hooks_write_delay();  // tests only: slow storage (llmc/run/test_hooks.h)
        assemble_export(path, g->cfg, full, g->L, mine.data(), (size_t)piece, io);
    });
}

// The weights at the start of a run: a fresh run makes its part one whole tensor at a time (the seeded init, or
// --init-from's file: part_init, llmc/run/assemble.h); a resumed one reads its own elements from the checkpoint resume_dir of any layout
// (part_read, llmc/run/assemble.h), with AdamW's moments and the run's state into *state; --fp8: the weights'
// scales and fp8 copies, and delayed scaling's state from the checkpoint when it holds one of this history.
static void gpt_load(GPT* g, const ParamTable& table, const TrainConfig& tc, const std::string& resume_dir,
                     TrainState* state) {
    const ModelConfig& mc = g->cfg;
    const bool rank0 = g->world.rank == 0;
    Fp8State fp8_state;
    if (resume_dir.empty()) {
        SafeTensors hf;
        if (!tc.init_from.empty()) hf_open(&hf, tc.init_from, mc);
        std::vector<float> part(g->table.total, 0.0f);  // this rank's part: its stage's tensors, its tp slices
        const auto t0 = std::chrono::steady_clock::now();
        const int64_t n = part_init(mc, table, g->table, g->global, g->slice, tc.seed, tc.init_from.empty() ? nullptr : &hf, part.data());
        st_close(&hf);
        if (rank0 && tc.init_from.empty()) print_init_time(n, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        comm_io_wait([&] { comm_barrier(g->world); });  // the slowest rank's reading, under --io-timeout
        gpt_set_weights(g, part.data(), nullptr, nullptr);
    } else {
        const bool sharded = g->L.zero >= 1;  // master and moments: the ZeRO shard, or the whole table
        const size_t n = sharded ? g->dp.shard : g->table.total;
        std::vector<float> w[3] = {std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
        const char* kinds[3] = {"p", "m", "v"};
        CkptReader R;
        ckpt_open(&R, resume_dir, mc, table, state, &fp8_state);
        for (int i = 0; i < 3; i++) part_read(&R, kinds[i], table, g->table, g->global, g->slice, g->dp.buckets, g->L, sharded, w[i].data());
        ckpt_close(&R);
        if (rank0) printf("resumed from %s at step %d\n", resume_dir.c_str(), state->step);
        comm_io_wait([&] { comm_barrier(g->world); });  // the slowest rank's reading, under --io-timeout
        gpt_set_weights(g, w[0].data(), w[1].data(), w[2].data(), true);
    }
    fp8_weights_update(g->fp8, g->stream, g->table, g->dp.buckets, g->params);  // --fp8: the weights' scales, copies
    if (g->fp8.opt.recipe == FP8_DELAYED && !resume_dir.empty()) {
        const bool taken = fp8_state_set(g->fp8, fp8_state);
        if (rank0 && taken)
            printf("fp8: delayed scaling goes on from the checkpoint's state (history %d, next row %d)\n",
                   fp8_state.history, fp8_state.pos);
        else if (rank0)
            printf("fp8: the checkpoint holds no delayed-scaling state of history %d: the scales start at 1\n",
                   g->fp8.opt.history);
    }
}

// A checkpoint of the run at state.step into tc.out_dir (llmc/run/checkpoint.h): every rank downloads and writes the
// parts it owns (part_write: its ZeRO piece of its stage's tp slices, replicated tensors once), all at once, a tensor
// part at a time; --fp8: the ranks agree on their scaling state first, which rank 0 writes.
static void gpt_save_checkpoint(GPT* g, const ParamTable& table, const TrainConfig& tc, const TrainState& state) {
    const Fp8State fp8_state = fp8_state_gather(g->fp8, g->stream);  // --fp8: the ranks agree; delayed: its state
    comm_wait_stream(g->world, g->stream, "the work before a checkpoint");
    const bool sharded = g->L.zero >= 1;
    const void* src[3] = {g->master, g->m, g->v};
    const char* kinds[3] = {"p", "m", "v"};
    std::vector<float> host;
    std::vector<__nv_bfloat16> h16;
    auto barrier = [&] { comm_io_wait([&] { comm_barrier(g->world); }); };  // another rank's disk work: --io-timeout
    checkpoint_save(tc.out_dir, g->cfg, table, layout_json(g->L), g->world.rank, g->world.size, state, tc.keep_last, &fp8_state, barrier,
                    [&](CkptShardWriter* w) {
                        if (g->world.rank == 0) test_hooks_write_delay();  // tests only: slow storage (llmc/run/test_hooks.h)
                        for (int i = 0; i < 3; i++)
                            part_write(w, kinds[i], table, g->table, g->global, g->slice, g->dp.buckets, g->L, sharded,
                                       [&](size_t pos, size_t n) {
                                           host.resize(n);
                                           if (i == 0 || !g->bf16_moments) {
                                               cudaCheck(cudaMemcpy(host.data(), (const float*)src[i] + pos, n * 4, cudaMemcpyDeviceToHost));
                                           } else {
                                               h16.resize(n);
                                               cudaCheck(cudaMemcpy(h16.data(), (const __nv_bfloat16*)src[i] + pos, n * 2, cudaMemcpyDeviceToHost));
                                               for (size_t e = 0; e < n; e++) host[e] = __bfloat162float(h16[e]);
                                           }
                                           return (const float*)host.data();
                                       });
                    });
}
