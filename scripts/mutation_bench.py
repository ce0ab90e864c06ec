#!/usr/bin/env python3
"""scripts/mutation_bench.py: how many realistic one-line bugs do the tests catch?

A benchmark of the test suite, not part of `make test`. Each mutant below replaces one exact
snippet of one source file (the snippet must occur exactly once) with a plausible bug: a wrong
sign, an off-by-one, a missing term, a forgotten barrier, a wrong index, a wrong constant. For each
mutant the script copies the working tree (once, into build/mutation/tree), applies the change,
rebuilds what the chosen check needs, runs the fastest test that should catch it, and restores the
file. The test stops at its first [FAIL] line. A mutant is

  caught   the check printed a [FAIL] line or exited non-zero
  missed   the check passed with the bug in place
  invalid  the mutant did not build (the compiler caught it: not counted)

Before any mutant, every check used runs once on the unchanged tree and must pass (else its
mutants are reported as "baseline failed" and not counted). The reference states the checks
compare against are made once, from the unchanged tree (tests/gpu_cases.sh), so a mutant cannot
change its own oracle.

  usage: python3 scripts/mutation_bench.py [--only ID[,ID...]] [--check NAME] [--list]
                                           [--jobs N] [--timeout S] [--work DIR] [--report FILE]

The table goes to stdout and to DIR/report.md (or --report FILE); DIR, the scratch directory of the tree
copies and states, is build/mutation unless --work names another (two runs side by side need two). Needs what
`make test` needs (g++, /usr/bin/python3 with torch, OpenMPI for the layout checks, node for the
tokenizer check). About 30-45 minutes on 2 cores for the whole list with --jobs 2.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------------------------
# The checks: (build command, test command), run from a copy of the tree. $STATES is the directory of
# the reference states made from the unchanged tree. Each test prints [PASS]/[FAIL] lines.

CHECKS = {
    # the CPU reference against PyTorch on a GPT and a LLaMA (GQA) state; the finite-difference check
    "cpu_ref": ("make -s test_gpt_cpu",
                "./test_gpt_cpu ref $STATES/gpt3_tiny_hd64.safetensors $STATES/llama_tiny_gqa_hd64.safetensors"),
    "cpu_fd": ("make -s test_gpt_cpu", "./test_gpt_cpu fd"),
    # one case of tests/t_reference.sh (the CPU trainer against train_gpt.py): Qwen2's q, k, v biases
    "ref_qwen2": ("make -s test_gpt_cpu train_gpt_cpu", "REF_CASES=qwen2_style bash tests/t_reference.sh"),
    "ref_baichuan2": ("make -s test_gpt_cpu train_gpt_cpu", "REF_CASES=baichuan2_style bash tests/t_reference.sh"),
    # Qwen-1's names (--naming qwen): the reference case, the forward by hand (tests/qwen1_forward.py), the round trip
    "ref_qwen1": ("make -s test_gpt_cpu train_gpt_cpu", "REF_CASES=qwen1_style bash tests/t_reference.sh"),
    # --eval: the CPU trainer against PyTorch, llm.c's file, the layouts, the emulated CUDA trainer, bad input
    "eval": ("make -s train_gpt_cpu build/train_gpt_fp32_emu", "bash tests/t_eval.sh"),
    "ref_qwen3": ("make -s test_gpt_cpu train_gpt_cpu", "REF_CASES=qwen3_style bash tests/t_reference.sh"),
    "ref_baichuan2_13b": ("make -s test_gpt_cpu train_gpt_cpu", "REF_CASES=baichuan2_13b_style bash tests/t_reference.sh"),
    # packed documents: the CPU trainer against train_gpt.py's explicit mask; its layouts against one process; the
    # emulated CUDA trainer against PyTorch
    "ref_docs": ("make -s test_gpt_cpu train_gpt_cpu", "REF_CASES='gpt3_documents llama_documents' bash tests/t_reference.sh"),
    "parallel_docs": ("make -s train_gpt_cpu build/test_parallel build/ckpt_convert",
                      "PAR_MODELS='gpt_docs llama_docs' bash tests/t_parallel.sh"),
    "emu_docs": ("make -s train_gpt_cpu", "EMU_STATES_DIR=$STATES EMU_CASES='gpt_documents llama_documents' EMU_PASSES=bf16 bash tests/t_gpu_emulated.sh"),
    "cpu_units": ("make -s test_gpt_cpu build/test_parallel", "./test_gpt_cpu units && ./build/test_parallel units"),
    # the CUDA trainer on the host emulation of CUDA (tests/t_gpu_emulated.sh): the bf16 build on the GPT
    # (LayerNorm, GELU, learned positions) or the LLaMA state (RMSNorm, SwiGLU, RoPE, GQA), the fp32 build;
    # "emu_race" runs the threads of each block in a seeded random order with the race detector
    "emu_gpt": ("make -s train_gpt_cpu", "EMU_STATES_DIR=$STATES EMU_CASES=gpt3_tiny_hd64 EMU_PASSES=bf16 bash tests/t_gpu_emulated.sh"),
    "emu_llama": ("make -s train_gpt_cpu", "EMU_STATES_DIR=$STATES EMU_CASES=llama_tiny_gqa_hd64 EMU_PASSES=bf16 bash tests/t_gpu_emulated.sh"),
    "emu_fp32": ("make -s train_gpt_cpu", "EMU_STATES_DIR=$STATES EMU_CASES=gpt3_tiny_hd64 EMU_PASSES=fp32 bash tests/t_gpu_emulated.sh"),
    "emu_fp16": ("make -s train_gpt_cpu", "EMU_STATES_DIR=$STATES EMU_CASES=gpt3_tiny_hd64 EMU_PASSES=fp16 bash tests/t_gpu_emulated.sh"),
    "emu_switches": ("make -s train_gpt_cpu", "EMU_STATES_DIR=$STATES EMU_CASES=llama_switches_hd64 EMU_PASSES=bf16 bash tests/t_gpu_emulated.sh"),
    "emu_alibi": ("make -s train_gpt_cpu", "EMU_STATES_DIR=$STATES EMU_CASES=gpt_alibi_hd80 EMU_PASSES=bf16 bash tests/t_gpu_emulated.sh"),
    "emu_race": ("make -s train_gpt_cpu", "EMU_STATES_DIR=$STATES EMU_CASES=gpt3_tiny_hd64 EMU_PASSES=race bash tests/t_gpu_emulated.sh"),
    # llmc/matmul.cuh under the emulated cuBLASLt: the epilogues and their fallbacks, the GELU epilogues against
    # cuBLASLt's documented semantics (tests/t_matmul_emulated.sh, bf16 and fp32)
    "matmul_emu": ("true", "bash tests/t_matmul_emulated.sh"),
    "gemm_algos": ("true", "bash tests/t_gemm_algos.sh"),
    # the tensor-core attention against double precision, in both schedules of the emulation
    "attention": ("true", "bash tests/t_attention.sh"),
    # every kernel variant the presets' widths and vocabularies select, a few rows each, against CPU references
    "widths": ("true", "bash tests/t_widths.sh"),
    # every parallel layout of the CPU trainer against one process
    "parallel": ("make -s train_gpt_cpu build/test_parallel build/ckpt_convert", "bash tests/t_parallel.sh"),
    "resume": ("make -s train_gpt_cpu build/ckpt_convert", "bash tests/t_resume.sh"),
    "datasets": ("make -s train_gpt_cpu build/test_datasets build/prepare", "bash tests/t_datasets.sh"),
    "tokenizer": ("make -s build/test_tokenizer", "bash tests/t_tokenizer.sh"),
    "bad_inputs": ("make -s train_gpt_cpu", "bash tests/t_bad_inputs.sh"),
    # every path flag by class, and those the run does not open (train_gpt's cases skip: not built in the copy)
    "paths": ("make -s train_gpt_cpu build/prepare", "bash tests/t_paths.sh"),
    "guard": ("make -s train_gpt_cpu build/train_gpt_fp32_emu", "bash tests/t_guard.sh"),
    # loss scaling (llmc/loss_scale.h): bit-identity with the unscaled run, Megatron's rule replayed, resume, layouts
    "loss_scale": ("make -s train_gpt_cpu build/train_gpt_emu build/train_gpt_fp32_emu build/train_gpt_fp16_emu", "bash tests/t_loss_scale.sh"),
    # ptxas's registers and spills of train_gpt.cu's kernels for sm_80 and sm_90a (make resources, two compiles)
    "resources": ("make -s -j2 resources", "bash tests/t_resources.sh"),
    # the CUDA trainer's host-only modes: --plan, the layout planner, --estimate-memory
    "train_gpt_host": ("make -s train_gpt train_gpt_fp32", "bash tests/t_train_gpt_host.sh"),
    # train_gpt --profile on emulated GPUs: every launch inside a class, the classes' sums, the table, bad flags
    "profile": ("make -s build/train_gpt_emu", "bash tests/t_profile.sh"),
    # tensor and sequence parallel layouts of the CUDA trainer on emulated GPUs against the CPU trainer
    "gpu_tp": ("make -s train_gpt_cpu build/ckpt_convert build/train_gpt_emu build/train_gpt_fp32_emu", "bash tests/t_gpu_tp.sh"),
    # train_gpt --fp8 on emulated GPUs: against bf16, its checkpointed state, resume, layouts
    "fp8_train": ("make -s train_gpt_cpu build/ckpt_convert build/train_gpt_emu build/train_gpt_fp32_emu", "bash tests/t_fp8_train.sh"),
    # data parallel of the CUDA trainer on emulated GPUs, bad layouts and rank counts
    "gpu_multirank": ("make -s train_gpt_cpu build/ckpt_convert build/train_gpt_emu build/train_gpt_fp32_emu build/train_gpt_fp16_emu",
                      "bash tests/t_gpu_multirank.sh"),
    # scripts/gpu_check.sh sprint (its multirank runs among them) against the emulation, --programs --tiny
    "gpu_sprint": ("make -s train_gpt_cpu build/ckpt_convert build/train_gpt_emu build/train_gpt_fp32_emu build/test_gpt_emu "
                   "build/test_gpt_fp32_emu build/fp8_gemm_emu build/gpukit/states/made", "bash tests/t_gpu_sprint.sh"),
    # pipeline layouts of the CUDA trainer on emulated GPUs; its host modes, validation and sampling at one rank
    "gpu_pp": ("make -s train_gpt_cpu build/ckpt_convert build/train_gpt_emu build/train_gpt_fp32_emu", "bash tests/t_gpu_pp.sh"),
    # stalled ranks and slow storage under --comm-timeout / --io-timeout, both trainers
    "hangs": ("make -s train_gpt_cpu build/train_gpt_fp32_emu build/train_gpt_streams_emu", "bash tests/t_hangs.sh"),
    # the CUDA trainer in the emulation's stream mode (tests/t_streams.sh): the happens-before checker's verdict on
    # the layouts that exercise each group of ordering edges (data parallel and ZeRO, the world's sums, pipeline, fp8)
    "streams_dp": ("make -s build/train_gpt_streams_emu",
                   "STREAMS_COMPARE=0 STREAMS_SEEDS=1 STREAMS_LAYOUTS=dp2_zero1,dp4_zero2,dp2_zero3 bash tests/t_streams.sh"),
    "streams_tp": ("make -s build/train_gpt_streams_emu",
                   "STREAMS_COMPARE=0 STREAMS_SEEDS=1 STREAMS_LAYOUTS=tp2_sp,tp2_dp2_zero1_sp bash tests/t_streams.sh"),
    "streams_pp": ("make -s build/train_gpt_streams_emu",
                   "STREAMS_COMPARE=0 STREAMS_SEEDS=1 STREAMS_LAYOUTS=pp2,pp2_dp2_zero1 bash tests/t_streams.sh"),
    "streams_fp8": ("make -s build/train_gpt_streams_emu",
                    "STREAMS_COMPARE=0 STREAMS_SEEDS=1 STREAMS_LAYOUTS=fp8_tp2_sp,fp8_dp2_zero3 bash tests/t_streams.sh"),
}

# The states the checks read: made once from the unchanged tree.
STATE_CASES = ["gpt3_tiny_hd64", "llama_tiny_gqa_hd64", "llama_switches_hd64", "gpt_alibi_hd80", "gpt_documents",
               "llama_documents"]


# ------------------------------------------------------------------------------------------------
# The mutants: (id, area, file, exact snippet, replacement, check, what the bug is)

MUTANTS = [
    # --- ordering between streams (tests/t_streams.sh): each event record and stream wait removed ------------
    ('ev_zero3_update_rec', "streams", 'llmc/gpt/data_parallel.cuh',
     '    cudaCheck(cudaEventRecord(dp.ev_compute, stream));\n    cudaCheck(cudaStreamWaitEvent(dp.comm.stream, dp.ev_compute, 0));\n    if (dp.zero >= 3) return;',
     '    if (dp.zero < 3) cudaCheck(cudaEventRecord(dp.ev_compute, stream));\n    cudaCheck(cudaStreamWaitEvent(dp.comm.stream, dp.ev_compute, 0));\n    if (dp.zero >= 3) return;',
     'streams_dp', "after AdamW under ZeRO 3 the next gathers' event is not re-recorded: they read the shard before the update"),
    ('ev_zero3_update_wait', "streams", 'llmc/gpt/data_parallel.cuh',
     '    cudaCheck(cudaStreamWaitEvent(dp.comm.stream, dp.ev_compute, 0));\n    if (dp.zero >= 3) return;  // the next',
     '    if (dp.zero < 3) cudaCheck(cudaStreamWaitEvent(dp.comm.stream, dp.ev_compute, 0));\n    if (dp.zero >= 3) return;  // the next',
     'streams_dp', "ZeRO-3's next gathers do not wait for AdamW's update of the shard"),
    ('ev_norm_reduced_rec', "streams", 'llmc/gpt/data_parallel.cuh',
     'double clip, double inv_scale) {\n    cudaCheck(cudaEventRecord(dp.ev_comm, dp.comm.stream));\n',
     'double clip, double inv_scale) {\n',
     'streams_dp', "the gradient norm's event is not recorded after the last bucket's reduction"),
    ('ev_norm_reduced_wait', "streams", 'llmc/gpt/data_parallel.cuh',
     '    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(stream, dp.ev_comm, 0)));\n    const float* grads = dp.zero >= 2',
     '    const float* grads = dp.zero >= 2',
     'streams_dp', 'the gradient norm reads the reduced gradients without waiting for dp.comm.stream'),
    ('ev_norm_world_rec', "streams", 'llmc/gpt/data_parallel.cuh',
     '    cudaCheck(cudaEventRecord(dp.ev_compute, stream));\n    cudaCheck(cudaStreamWaitEvent(world.stream, dp.ev_compute, 0));',
     '    cudaCheck(cudaStreamWaitEvent(world.stream, dp.ev_compute, 0));',
     'streams_tp', "the world's sum of the norm uses a stale event of the compute stream"),
    ('ev_norm_world_wait', "streams", 'llmc/gpt/data_parallel.cuh',
     '    cudaCheck(cudaStreamWaitEvent(world.stream, dp.ev_compute, 0));\n',
     '',
     'streams_tp', "the world's sum of the norm does not wait for the partial sums"),
    ('ev_norm_sum_rec', "streams", 'llmc/gpt/data_parallel.cuh',
     '    cudaCheck(cudaEventRecord(dp.ev_comm, world.stream));\n',
     '',
     'streams_tp', "the clip coefficient uses a stale event of the world's stream"),
    ('ev_norm_sum_wait', "streams", 'llmc/gpt/data_parallel.cuh',
     '    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(stream, dp.ev_comm, 0)));\n    clip_from_sumsq_kernel',
     '    clip_from_sumsq_kernel',
     'streams_tp', "the clip coefficient is computed before the world's sum lands"),
    ('ev_allgather_rec', "streams", 'llmc/gpt/data_parallel.cuh',
     '    if (dp.zero >= 3) for (int& held : dp.gather_holds) held = -1;\n    cudaCheck(cudaEventRecord(dp.ev_compute, stream));',
     '    if (dp.zero >= 3) for (int& held : dp.gather_holds) held = -1;\n    if (dp.zero >= 3) cudaCheck(cudaEventRecord(dp.ev_compute, stream));',
     'streams_dp', "ZeRO 1/2's all-gather of the updated pieces uses a stale event (before AdamW)"),
    ('ev_allgather_wait', "streams", 'llmc/gpt/data_parallel.cuh',
     '    cudaCheck(cudaStreamWaitEvent(dp.comm.stream, dp.ev_compute, 0));\n    if (dp.zero >= 3) return;',
     '    if (dp.zero >= 3) cudaCheck(cudaStreamWaitEvent(dp.comm.stream, dp.ev_compute, 0));\n    if (dp.zero >= 3) return;',
     'streams_dp', "ZeRO 1/2's all-gather does not wait for AdamW"),
    ('ev_allgathered_rec', "streams", 'llmc/gpt/data_parallel.cuh',
     'b.range.size() / dp.n);\n    cudaCheck(cudaEventRecord(dp.ev_comm, dp.comm.stream));\n',
     'b.range.size() / dp.n);\n',
     'streams_tp', "the next step's forward waits on a stale event of the all-gather"),
    ('ev_allgathered_wait', "streams", 'llmc/gpt/data_parallel.cuh',
     '    cudaCheck(cudaEventRecord(dp.ev_comm, dp.comm.stream));\n    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(stream, dp.ev_comm, 0)));\n}',
     '    cudaCheck(cudaEventRecord(dp.ev_comm, dp.comm.stream));\n}',
     'streams_tp', "the next step's forward does not wait for ZeRO 1/2's all-gather"),
    ('ev_gather_slot_wait', "streams", 'llmc/gpt/data_parallel.cuh',
     '    cudaCheck(cudaStreamWaitEvent(dp.comm.stream, dp.ev_gather_done[s], 0));\n',
     '',
     'streams_dp', "ZeRO-3's prefetch overwrites a gather slot the compute stream still reads"),
    ('ev_gathered_rec', "streams", 'llmc/gpt/data_parallel.cuh',
     '    cudaCheck(cudaEventRecord(dp.ev_gathered[s], dp.comm.stream));\n',
     '',
     'streams_dp', "ZeRO-3's gathered event is not recorded after the prefetch"),
    ('ev_gathered_wait', "streams", 'llmc/gpt/data_parallel.cuh',
     '    PROF(PROF_DP_WAIT, ProfWork(),\n         cudaCheck(cudaStreamWaitEvent(stream, dp.ev_gathered[dp.gather_buffer(dp.buckets[b])], 0)));\n',
     '',
     'streams_dp', 'a layer reads its ZeRO-3 weights without waiting for their gather'),
    ('ev_gather_done_rec', "streams", 'llmc/gpt/data_parallel.cuh',
     '    cudaCheck(cudaEventRecord(dp.ev_gather_done[dp.gather_buffer(dp.buckets[b])], stream));\n',
     '',
     'streams_dp', "ZeRO-3's done-with-slot event is not recorded: the next prefetch overwrites weights in use"),
    ('ev_cast_wait', "streams", 'llmc/gpt/data_parallel.cuh',
     '        PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(stream, dp.ev_cast_free[dp.cast_last], 0)));\n',
     '',
     'streams_dp', "ZeRO 2/3's fp32 cast buffer is rewritten while its reduce-scatter still reads it"),
    ('ev_bucket_rec', "streams", 'train_gpt.cu',
     '    cudaCheck(cudaEventRecord(g->dp.ev_compute, g->stream));\n    cudaEvent_t ready = g->dp.ev_compute;',
     '    cudaEvent_t ready = g->dp.ev_compute;',
     'streams_dp', "a bucket's reduction uses a stale event (before its fp32 copy)"),
    ('ev_emb_wait', "streams", 'llmc/gpt/pipeline.cuh',
     '    cudaCheck(cudaStreamWaitEvent(pp.emb.stream, ready, 0));\n',
     '',
     'streams_pp', "the tied embedding's sum over the first and last stages does not wait for its gradient"),
    ('ev_emb_rec', "streams", 'llmc/gpt/pipeline.cuh',
     '    cudaCheck(cudaEventRecord(pp.ev_emb, pp.emb.stream));\n',
     '',
     'streams_pp', "the tied embedding's summed event is not recorded"),
    ('ev_emb_dp_wait', "streams", 'llmc/gpt/pipeline.cuh',
     '    return pp.ev_emb;\n}',
     '    return ready;\n}',
     'streams_pp', "the dp reduction of the tied embedding's bucket does not wait for its sum over the stages"),
    ('ev_bucket_wait', "streams", 'llmc/gpt/data_parallel.cuh',
     '    cudaCheck(cudaStreamWaitEvent(dp.comm.stream, ready, 0));\n',
     '',
     'streams_dp', "a bucket's dp reduction does not wait for its fp32 gradients"),
    ('ev_cast_rec', "streams", 'llmc/gpt/data_parallel.cuh',
     '        cudaCheck(cudaEventRecord(dp.ev_cast_free[dp.cast_last], dp.comm.stream));\n',
     '',
     'streams_dp', "ZeRO 2/3's cast-buffer-free event is not recorded after the reduce-scatter"),
    ('ev_fp8_amax_rec', "streams", 'llmc/gpt/fp8_linear.cuh',
     '    cudaCheck(cudaEventRecord(f.ev_amax, stream));',
     '',
     'streams_fp8', "fp8's amax max over dp uses a stale event of the compute stream"),
    ('ev_fp8_amax_wait', "streams", 'llmc/gpt/fp8_linear.cuh',
     '    cudaCheck(cudaStreamWaitEvent(f.dp.stream, f.ev_amax, 0));',
     '',
     'streams_fp8', "fp8's amax max over dp does not wait for the casts that recorded them"),
    ('ev_fp8_agreed_rec', "streams", 'llmc/gpt/fp8_linear.cuh',
     '    cudaCheck(cudaEventRecord(f.ev_agreed, f.dp.stream));',
     '',
     'streams_fp8', "the agreed amaxes' event is not recorded"),
    ('ev_fp8_agreed_wait', "streams", 'llmc/gpt/fp8_linear.cuh',
     '    PROF(PROF_DP_WAIT, ProfWork(), cudaCheck(cudaStreamWaitEvent(stream, f.ev_agreed, 0)));',
     '',
     'streams_fp8', 'the scale update reads the amaxes before their max over dp lands'),
    ('ev_pp_send_rec', "streams", 'llmc/gpt/pipeline.cuh',
     '    cudaCheck(cudaEventRecord(pp.ev_compute, stream));\n    cudaCheck(cudaStreamWaitEvent(pp.comm.stream, pp.ev_compute, 0));\n    comm_group_start();',
     '    cudaCheck(cudaStreamWaitEvent(pp.comm.stream, pp.ev_compute, 0));\n    comm_group_start();',
     'streams_pp', "a stage's send uses a stale event of the compute stream"),
    ('ev_pp_send_wait', "streams", 'llmc/gpt/pipeline.cuh',
     '    cudaCheck(cudaStreamWaitEvent(pp.comm.stream, pp.ev_compute, 0));\n    comm_group_start();',
     '    comm_group_start();',
     'streams_pp', 'a stage sends its activations without waiting for the kernels that write them'),
    ('ev_pp_recv_rec', "streams", 'llmc/gpt/pipeline.cuh',
     '    cudaCheck(cudaEventRecord(pp.ev_pp, pp.comm.stream));\n',
     '',
     'streams_pp', "the received activations' event is not recorded"),
    ('ev_pp_recv_wait', "streams", 'llmc/gpt/pipeline.cuh',
     '    cudaCheck(cudaStreamWaitEvent(stream, pp.ev_pp, 0));\n',
     '',
     'streams_pp', 'a stage reads received activations without waiting for the receive'),
    ("host_reduce_device_wait", "streams", "llmc/parallel/comm_nccl.cuh",
     "    if (std::find(two.begin(), two.end(), c.nccl) != two.end()) comm_device_wait(c.nccl, what, c.name, c.size);\n", "",
     "streams_fp8", "a host reduction on a communicator the compute stream also uses (tp = the world) runs before the "
     "compute stream's queued collectives on some ranks and after them on others"),
    ("two_streams_mark", "streams", "llmc/parallel/comm_nccl.cuh",
     "r.stream != s && std::string(r.name) != c->name", "r.stream != s && std::string(r.name) == c->name",
     "streams_fp8", "the tp group moved to the compute stream while it is the world's communicator is not marked as "
     "serving two streams (its host reductions stop waiting for the device)"),
    # --- CUDA kernels (llmc/*.cuh), run on the host emulation -----------------------------------
    ("attn_mask", "kernel", "llmc/attention.cuh",
     "if (diag && key > row) x = -INFINITY;", "if (diag && key > row + 1) x = -INFINITY;",
     "attention", "causal mask lets each query see one future key"),
    ("attn_scale", "kernel", "llmc/attention.cuh",
     "float fwd_scale_log2() { return rsqrtf((float)HD) * 1.4426950408889634f; }",
     "float fwd_scale_log2() { return (1.0f / HD) * 1.4426950408889634f; }",
     "attention", "forward softmax scale 1/hd instead of 1/sqrt(hd) (versions 3 and 4)"),
    ("attn_gqa", "kernel", "llmc/attention.cuh",
     "const int bh = blockIdx.x, b = bh / H, h = bh % H, kh = h / (H / KV);  // kv head of query head h",
     "const int bh = blockIdx.x, b = bh / H, h = bh % H, kh = h / KV;  // kv head of query head h",
     "attention", "forward: query head h reads kv head h / KV instead of h / (H / KV)"),
    ("attn_bwd_sync", "kernel", "llmc/attention.cuh",
     "            __syncthreads();  // sQ, sdO, sL, sD are overwritten by the next query tile",
     "            // (barrier removed)",
     "attention", "backward: the barrier before the next query tile overwrites shared memory is gone"),
    ("attn_bwd_prefetch_ld", "kernel", "llmc/attention.cuh",
     "if (next && threadIdx.x < 2 * BM) store_ld(buf ^ 1, next_ld);",
     "if (next && threadIdx.x < 2 * BM) store_ld(buf, next_ld);",
     "attention", "backward version 4: the next tile's lse and D land in the buffer being computed"),
    ("attn_bwd_prefetch_wait", "kernel", "llmc/attention.cuh",
     "            cp_async_wait<1>();       // all but tile t + 1's copy: K, V and tile t",
     "            cp_async_wait<2>();       // all but tile t + 1's copy: K, V and tile t",
     "attention", "backward version 4: tile t is computed before its copy is waited for"),
    ("attn_pre_lanes", "kernel", "llmc/attention.cuh",
     "    for (int m = G / 2; m > 0; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);",
     "    for (int m = G / 4; m > 0; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);",
     "attention", "backward preprocess: D sums half of its row's lanes"),
    ("attn_pre_chunks", "kernel", "llmc/attention.cuh",
     "    if (valid && c < CH) {",
     "    if (valid && c <= CH) {",
     "attention", "backward preprocess: at hd 80 a row's 11th lane adds 8 elements of the next row"),
    # the forward's version 4 (wgmma): the swizzled layout, the descriptors, the async rules (in the emulation)
    ("attn_wg_swizzle", "kernel", "llmc/attention.cuh",
     "cp_async16(smem + (k / 8) * ROWS * 64 + r * 64 + ((k % 8) ^ (r % 8)) * 8, gmem + r * ld + k * 8);",
     "cp_async16(smem + (k / 8) * ROWS * 64 + r * 64 + (k % 8) * 8, gmem + r * ld + k * 8);",
     "attention", "forward version 4: tiles stored unswizzled, which wgmma reads through the 128-byte swizzle"),
    ("attn_wg_proxy", "kernel", "llmc/attention.cuh",
     "    fence_proxy_async();  // this thread's landed copies, visible to wgmma after the barrier\n", "",
     "attention", "versions 4 and 7 (dQ): no fence.proxy.async between the K/V copies and wgmma's reads"),
    ("attn_wg_fence", "kernel", "llmc/attention.cuh",
     "    wgmma_fence();\n    for (int c = 0; c < NT / 2; c++) {",
     "    for (int c = 0; c < NT / 2; c++) {",
     "attention", "versions 4 and 7: the second product issued with no wgmma.fence after its A registers were written"),
    ("attn_wg_wait", "kernel", "llmc/attention.cuh",
     "        wgmma_wait<0>();\n        wgmma_fence_operands(s);\n        const bool doc_tile = j * ATT_WG_BN",
     "        wgmma_fence_operands(s);\n        const bool doc_tile = j * ATT_WG_BN",
     "attention", "forward version 4: the softmax reads S before its products are waited for"),
    ("attn_wg_lbo", "kernel", "llmc/attention.cuh",
     "constexpr uint32_t LBO_V = ATT_WG_BN * 128;", "constexpr uint32_t LBO_V = ATT_WG_BN * 64;",
     "attention", "forward version 4: V's second 64 head dims (hd 128) read from the middle of the first"),
    ("attn_wg_kstep", "kernel", "llmc/attention.cuh",
     "const int off = (kc / 4) * ROWS * 64 + (kc % 4) * 16;",
     "const int off = (kc / 4) * ROWS * 64 + (kc % 4) * 8;",
     "attention", "versions 4 and 7: a K step of 16 head dims advances the first product's descriptors by 8"),
    ("attn_wg_trans", "kernel", "llmc/attention.cuh",
     "else wgmma_rs_n128<1>(&acc[0][0], a[c], d_b, 1);", "else wgmma_rs_n128<0>(&acc[0][0], a[c], d_b, 1);",
     "attention", "versions 4 and 7 (hd 128): the second product's B (V, dO, Q, K) read as a K-major operand"),
    ("attn_wg_rows", "kernel", "llmc/attention.cuh",
     "const floatX* q_wg = sQ + wg * 64 * 64;", "const floatX* q_wg = sQ;",
     "attention", "forward version 4: both warpgroups multiply the block's first 64 query rows"),
    ("attn_wg_fits", "kernel", "llmc/attention.cuh",
     "return (hd == 64 || hd == 128) && T % ATT_WG_BM == 0 && wgmma_supported();",
     "return (hd == 64 || hd == 128) && T % 64 == 0 && wgmma_supported();",
     "attention", "forward version 4 launched where T is no multiple of its 128-row blocks"),
    ("attn_wg_align", "kernel", "llmc/attention.cuh",
     "floatX* sQ = reinterpret_cast<floatX*>(smem_align1024(att_smem));  // [HD/64][BM][64] swizzled",
     "floatX* sQ = reinterpret_cast<floatX*>(att_smem);  // [HD/64][BM][64] swizzled",
     "attention", "forward version 4: tiles not moved to a 1024-byte boundary, where the 128-byte swizzle's rows start "
     "(the emulated shared memory starts at address 1040)"),
    ("attn_wg_fence_operands", "kernel", "llmc/attention.cuh",
     "    wgmma_fence_operands(acc);  // acc's rescaling and a's packing stay before the fence\n", "",
     "resources", "versions 4 and 7: nothing pins the accumulators before wgmma.fence; nvcc moves the forward's rescaling "
     "past it (undefined in PTX; the emulation runs the source's order)"),
    ("emu_wgmma_mn_strides", "kernel", "tests/cuda_emu/include/llmc/mma.cuh",
     "start + (uint32_t)(mn / 64) * lbo + (uint32_t)(k / 8) * sbo",
     "start + (uint32_t)(mn / 64) * sbo + (uint32_t)(k / 8) * lbo",
     "attention", "the emulation reads an MN-major operand with LBO and SBO swapped (the layout probe and the kernels)"),
    ("emu_wgmma_lbo_8sbo", "kernel", "tests/cuda_emu/include/llmc/mma.cuh",
     "? start + (uint32_t)(mn / 64) * lbo +",
     "? start + (uint32_t)(mn / 64) * 8 * sbo +",
     "attention", "the emulation puts an MN-major operand's 64-column tiles 8 SBO apart, LBO unread (right for 64 rows only)"),
    # the backward's version 7 (wgmma)
    ("attn_wg7_dv_operand", "kernel", "llmc/attention.cuh",
     "wgmma_a_times_rows<NQ, HD>(dv, st, o_s, LBO);",
     "wgmma_a_times_rows<NQ, HD>(dv, st, q_s, LBO);",
     "attention", "backward version 7: dV += P^T Q instead of P^T dO"),
    ("attn_wg7_stage_buf", "kernel", "llmc/attention.cuh",
     "            stage(i + 1, buf ^ 1);", "            stage(i + 1, buf);",
     "attention", "backward version 7: the next step's Q and dO staged into the buffer being computed"),
    ("attn_wg7_lse", "kernel", "llmc/attention.cuh",
     "            sL[buf * BM + r] = lse[i2] * 1.4426950408889634f;", "            sL[buf * BM + r] = lse[i2];",
     "attention", "backward version 7: the dK/dV kernel's lse left in the natural log (P against exp2)"),
    ("attn_wg7_dq_ktile", "kernel", "llmc/attention.cuh",
     "wgmma_a_times_rows<NT, HD>(dq, s, k_s, LBO);",
     "wgmma_a_times_rows<NT, HD>(dq, s, v_s, LBO);",
     "attention", "backward version 7: dQ += dS V instead of dS K"),
    ("attn_bwd_v5_skip", "kernel", "llmc/attention.cuh",
     "        if (warp_key0 <= it * BM + BM - 1)  // (a uniform branch per warp: dkdv_tile has no block barrier)",
     "        if (warp_key0 < it * BM)  // (a uniform branch per warp: dkdv_tile has no block barrier)",
     "attention", "backward versions 4, 5: a warp skips the diagonal tile that holds its keys"),
    ("attn_bwd_v5_keys", "kernel", "llmc/attention.cuh",
     "    const int key0 = kt * BN + warp * 16 + g;  // this thread's keys: key0 and key0 + 8",
     "    const int key0 = kt * ATT_BWD_BN + warp * 16 + g;  // this thread's keys: key0 and key0 + 8",
     "attention", "backward version 5: the 128-key blocks mask and write the keys of 64-key blocks"),
    ("attn_v6_diag", "kernel", "llmc/attention.cuh",
     "if ((diag && key > q0 + qc) || (doc_tile && key < drow[qc]))",
     "if ((diag && key >= q0 + qc) || (doc_tile && key < drow[qc]))",
     "attention", "backward version 6: dQ drops each row's own key (the diagonal's dS zeroed)"),
    ("attn_v6_doc_mask", "kernel", "llmc/attention.cuh",
     "if ((diag && key > q0 + qc) || (doc_tile && key < drow[qc]))",
     "if ((diag && key > q0 + qc) || (doc_tile && key < drow[0]))",
     "attention", "backward version 6: dQ masks every row at the block's first document start (unwritten dS read)"),
    ("attn_v6_store_row", "kernel", "llmc/attention.cuh",
     "*reinterpret_cast<uint32_t*>(ds_row + r * 8 * T + n * 8 + 2 * q4)",
     "*reinterpret_cast<uint32_t*>(ds_row + r * 8 + n * 8 + 2 * q4)",
     "attention", "backward version 6: the dS of key0 + 8 is stored 8 queries along key0's row"),
    ("attn_bwd_dq_scale", "kernel", "llmc/attention.cuh",
     "to_floatX2(dq[d][2 * r] * scale, dq[d][2 * r + 1] * scale);",
     "to_floatX2(dq[d][2 * r], dq[d][2 * r + 1] * scale);",
     "attention", "backward: dQ's even columns miss the softmax scale"),
    ("rope_bwd_sign", "kernel", "train_gpt.cu",
     "rope_rotate_inplace(g->scratch.dqkv, g->rope_cos, g->rope_sin, B, T, H, KV, hd, -1, g->stream, positions(g)));",
     "rope_rotate_inplace(g->scratch.dqkv, g->rope_cos, g->rope_sin, B, T, H, KV, hd, +1, g->stream, positions(g)));",
     "emu_llama", "RoPE backward rotates forward instead of by the inverse"),
    ("norm_wgrad_sync", "kernel", "llmc/norm.cuh",
     "    sums[slice][threadIdx.x] = s;\n    __syncthreads();\n", "    sums[slice][threadIdx.x] = s;\n",
     "emu_race", "norm weight-gradient reduction reads the other slices' sums without a barrier"),
    ("norm_var", "kernel", "llmc/norm.cuh",
     "const float s = rsqrtf(row_sum<LANES>(ss, red, 1) / C + eps);",
     "const float s = rsqrtf(row_sum<LANES>(ss, red, 1) / (C - 1) + eps);",
     "emu_fp32", "norm forward: unbiased variance (divides by C - 1)"),
    ("norm_bwd_mean", "kernel", "llmc/norm.cuh",
     "const float m_dn = rms ? 0.0f : tot.x / C, m_dnx = tot.y / C;",
     "const float m_dn = 0.0f, m_dnx = tot.y / C;",
     "emu_gpt", "LayerNorm backward drops the mean-of-dn term"),
    ("norm_bwd_spill", "kernel", "llmc/norm.cuh",
     "__global__ void __launch_bounds__(NORM_BWD_THREADS) norm_backward_kernel(",
     "__global__ void __launch_bounds__(NORM_BWD_THREADS, 2) norm_backward_kernel(",
     "resources", "norm backward asks for 2 blocks per SM: ptxas caps it at 128 registers and spills (C > 4096)"),
    # --- kernel variants only real widths reach (tests/t_widths.sh) --------------------------------------------
    ("norm_row_block", "kernel", "llmc/norm.cuh",
     "    const int row = blockIdx.x * (blockDim.x / LANES) + threadIdx.x / LANES;",
     "    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / LANES;",
     "widths", "the norm forward's block-per-row path (C > 4096) reads another row"),
    ("norm_bwd_stage_wait", "kernel", "llmc/norm.cuh",
     "            cp_async_wait<NORM_BWD_STAGES - 1>();", "            cp_async_wait<NORM_BWD_STAGES>();",
     "widths", "norm backward (C <= 4096) computes a row before its staged copies have landed"),
    ("norm_bwd_stage_slot", "kernel", "llmc/norm.cuh",
     "load_row(row + NORM_BWD_STAGES - 1, (row - r0 + NORM_BWD_STAGES - 1) % NORM_BWD_STAGES);",
     "load_row(row + NORM_BWD_STAGES - 1, (row - r0 + 1) % NORM_BWD_STAGES);",
     "widths", "norm backward stages the row two ahead into the next row's stage"),
    ("norm_reduce_ahead", "kernel", "llmc/norm.cuh",
     "for (; blk + 8 * (AHEAD - 1) < nblocks; blk += 8 * AHEAD) {",
     "for (; blk + 8 * (AHEAD - 1) < nblocks; blk += 8 * (AHEAD - 1)) {",
     "widths", "norm weight-gradient reduction: the 16-ahead loop steps one block short (a block added twice)"),
    ("norm_bwd_v6", "kernel", "llmc/norm.cuh",
     "    else NORM_BWD_LAUNCH(6);", "    else NORM_BWD_LAUNCH(4);",
     "widths", "the norm backward at C > 8192 runs the instantiation for 8192"),
    ("cls_online_rescale", "kernel", "llmc/classifier.cuh",
     "        s = s * __expf(m - mn) + add;", "        s = s + add;",
     "widths", "the classifier's online softmax forgets to rescale its sum when the max moves (several vectors per thread)"),
    ("cls_stats_padding", "kernel", "llmc/classifier.cuh",
     "            f[i] = (c + i < V) ? to_float(raw.v[i]) : -INFINITY;",
     "            f[i] = (c + i < Vp) ? to_float(raw.v[i]) : -INFINITY;",
     "widths", "the classifier counts the padded vocabulary columns in its softmax"),
    ("cls_panel_dw", "kernel", "llmc/classifier.cuh",
     "matmul_backward_weight(mm, stream, dw, nullptr, logits_panel, xc, rows, C, Vp, accumulate || r0 > 0);",
     "matmul_backward_weight(mm, stream, dw, nullptr, logits_panel, x, rows, C, Vp, accumulate || r0 > 0);",
     "widths", "the LM head's weight gradient of every panel reads the first panel's rows"),
    ("vp_sumexp_padding", "kernel", "llmc/classifier.cuh",
     "            if (c + i < nv) s += __expf(to_float(raw.v[i]) - m);",
     "            s += __expf(to_float(raw.v[i]) - m);",
     "widths", "the vocabulary-parallel sum of exponentials counts a slice's padding columns"),
    ("gnorm_unroll_index", "kernel", "llmc/grad_norm.cuh",
     "sumsq8(g + 8 * (v + 3 * G));", "sumsq8(g + 8 * (v + 2 * G));",
     "widths", "the global norm's unrolled loop (above 6.3M elements) reads one vector twice and skips another"),
    ("emb_bwd_column", "kernel", "llmc/embedding.cuh",
     "    const int c = 8 * (blockIdx.y * blockDim.x + threadIdx.x);", "    const int c = 8 * threadIdx.x;",
     "widths", "the embedding backward's block columns (C > 1024) all write the first columns"),
    ("gelu_kernel_tanhf", "kernel", "llmc/mlp_act.cuh",
     "const float s = 1.0f / (1.0f + e), s_minus = e * s;", "const float s = 0.5f * (1.0f + tanhf(u)), s_minus = 1.0f - s;",
     "widths", "the GELU derivative through fast-math tanhf and 1 - s again (the H100's failure)"),
    ("share_gpu_modulo", "parallel", "llmc/parallel/comm_nccl.cuh",
     "cudaCheck(cudaSetDevice(share ? li.local_rank % devices : li.local_rank));", "cudaCheck(cudaSetDevice(li.local_rank));",
     "gpu_multirank", "ranks sharing a GPU (LLMC_SHARE_GPU=1) still ask for GPU local_rank, past the device count"),
    ("matmul_first_algo_only", "kernel", "llmc/matmul.cuh",
     "    for (int i = 0; i < (int)algo->algos.size(); i++) {", "    for (int i = 0; i < 1; i++) {",
     "fp8_train", "a GEMM's first call tries only the heuristic's first algorithm (the H100's refusal then stops the run)"),
    ("fp8_scale_in_state", "kernel", "llmc/gpt/fp8_linear.cuh",
     "fp8_gemm_scale(&f.w, i), bias, N, IC, OC);", "fp8_scale_inv(&f.w, i), bias, N, IC, OC);",
     "fp8_train", "the forward GEMM's weight scale pointer is 4 bytes into the state array again, not its own slot"),
    ("fp8_startup_check_skipped", "kernel", "train_gpt.cu",
     "    fp8_gemm_check(g.fp8, g.stream, &g.mm, g.table, g.grads, g.B * g.T, g.scratch.dfc1,\n"
     "                   (size_t)g.B * g.T * (g.cfg.mlp == MLP_SWIGLU ? 2 : 1) * g.Fl);\n",
     "", "fp8_train", "--fp8 starts without its start-up check (a refused GEMM stops the run inside step 1, a wrong one trains)"),
    ("fp8_startup_check_blind", "kernel", "llmc/gpt/fp8_linear.cuh",
     "            else if (worst > 1) {", "            else if (worst > 1e30) {",
     "fp8_train", "the fp8 start-up check's sampled comparison accepts any finite product (an algorithm computing twice it passes)"),
    ("fp8_gemm_slot_stale", "kernel", "llmc/fp8.cuh",
     "    scale_inv[i] = gemm[(size_t)i * FP8_GEMM_SLOT] = fp8_reciprocal(s);\n}", "    scale_inv[i] = fp8_reciprocal(s);\n}",
     "fp8_train", "current scaling updates scale_inv but not the GEMMs' slot (the GEMM dequantizes with a stale scale)"),
    ("gemm_unfused", "reference", "llmc/cpu_gemm.h",
     "acc[r][v] = gemm_fma(s, b[v], acc[r][v]);", "acc[r][v] += s * b[v];",
     "cpu_units", "the CPU GEMM rounds each product before adding it (no fused multiply-add: what the compiler chose on Zen)"),
    ("ce_log_libc", "reference", "train_gpt_cpu.cpp",
     "lse[n] = mx[n] + (real)log_pos((double)sum[n]);", "lse[n] = mx[n] + std::log(sum[n]);",
     "parallel", "the cross-entropy's log from the C library again (its code chosen at run time by the CPU)"),
    ("rank_sum_last", "layout", "llmc/parallel/comm_mpi.h",
     "for (int r = 1; r < c.size; r++) s += in[(size_t)r * m + i];", "for (int r = 1; r < c.size - 1; r++) s += in[(size_t)r * m + i];",
     "parallel", "the rank-order sum leaves out the last rank's piece"),
    ("gemm_slice_restart", "reference", "llmc/cpu_gemm.h",
     "const bool load = accumulate || k0 > 0;", "const bool load = accumulate;",
     "cpu_units", "the CPU GEMM restarts each element's sum at every slice of 128 k"),
    ("gemm_bias_every_slice", "reference", "llmc/cpu_gemm.h",
     "const real* bias_here = bias && k0 + kc == K ? bias + j0 : nullptr;", "const real* bias_here = bias ? bias + j0 : nullptr;",
     "cpu_units", "the CPU GEMM adds the bias after every slice of k, not once"),
    ("gemm_row_tail", "reference", "llmc/cpu_gemm.h",
     "case 5: gemm_tile<real, 5>", "case 5: gemm_tile<real, 4>",
     "cpu_units", "a tile of 5 rows computes only 4"),
    ("exp_vec_coef", "reference", "llmc/ref_ops.h",
     "1.0f / 120), 1.0f / 24)", "1.0f / 120), 1.0f / 25)",
     "cpu_units", "exp_vec's r^4 coefficient mistyped"),
    ("gelu_ref_grad", "reference", "llmc/ref_ops.h",
     "return s + (real)2 * x * s * s_minus * k", "return s + x * s * s_minus * k",
     "cpu_fd", "the CPU GELU derivative's second term halved"),
    ("grad_norm_partial", "optimizer", "train_gpt_cpu.cpp",
     "for (size_t lo = r.lo; lo < r.hi; lo += chunk) items.push_back({lo, std::min(r.hi, lo + chunk)});",
     "for (size_t lo = r.lo; lo + chunk < r.hi; lo += chunk) items.push_back({lo, std::min(r.hi, lo + chunk)});",
     "cpu_ref", "the CPU global norm leaves out the last chunk of every range"),
    ("adamw_every_thread", "optimizer", "train_gpt_cpu.cpp",
     "#pragma omp for schedule(static) nowait\n        for (int64_t i = 0; i < n; i++) {", "        for (int64_t i = 0; i < n; i++) {",
     "cpu_ref", "every thread of the AdamW region updates every element (twice on 2 threads)"),
    ("init_cos_sign", "reference", "llmc/rng.h",
     "neg = ((q + 1) >> 1) & 1;", "neg = (q >> 1) & 1;",
     "cpu_units", "the init's cos takes the sign of the wrong quarter turns"),
    ("init_log_exponent", "reference", "llmc/rng.h",
     "const double e = (double)((int32_t)eb - 0x3ff);", "const double e = (double)((int32_t)eb - 0x3fe);",
     "cpu_units", "the init's log reads the exponent one too low"),
    ("init_norm_ones", "reference", "llmc/init.h",
     "const real rest = s.init == INIT_ONES ? 1 : 0;", "const real rest = 0;",
     "cpu_units", "norm weights initialised to 0, not 1"),
    ("init_in_place_slice", "parallel", "llmc/run/assemble.h",
     "slice[k].size() == 1 && slice[k][0].rows * slice[k][0].cols == (int64_t)f.numel()", "slice[k].size() == 1",
     "cpu_units", "a tensor-parallel slice of one block is made in place as if the rank held the whole tensor"),
    ("norm_bwd_channel_block", "reference", "llmc/ref_ops.h",
     "const int c0 = k * blk, c1 = std::min(C, c0 + blk);", "const int c0 = k * blk, c1 = std::min(C, c0 + blk - 1);",
     "cpu_ref", "the norm's weight and bias gradients skip the last channel of every block of 64"),
    ("sum16_tail", "reference", "llmc/ref_ops.h",
     "for (int j = 0; c + j < n; j++) s[j] = op(s[j], f(c + j));", "for (int j = 0; c + j < n - 1; j++) s[j] = op(s[j], f(c + j));",
     "cpu_fd", "the 16-lane folds (norms, cross-entropy) drop the last term of a row whose length is not a multiple of 16"),
    ("qk_norm_dw_heads", "reference", "llmc/ref_ops.h",
     "real* s = j < H ? sq : sk;", "real* s = sq;",
     "cpu_fd", "QK-norm's k-weight gradient summed into the q weight's"),
    ("ce_bwd_target", "reference", "train_gpt_cpu.cpp",
     "l[t] = (exp_vec(lt - ln) - (real)1) * scale;", "l[t] = exp_vec(lt - ln) * scale;",
     "cpu_ref", "the cross-entropy's gradient forgets the one-hot target (softmax alone)"),
    ("grads_zero_each_step", "optimizer", "train_gpt_cpu.cpp",
     "    big_fill(&g->grads, (real)0);", "",
     "cpu_ref", "the gradients are not zeroed between steps (they add up over steps)"),
    ("gelu_const", "kernel", "llmc/mlp_act.cuh",
     "static const float GELU_C = 0.044715f;", "static const float GELU_C = 0.04715f;",
     "emu_fp32", "GELU tanh constant mistyped"),
    ("swiglu_bwd", "kernel", "llmc/mlp_act.cuh",
     "dg.v[j] = to_floatX(dj * uj * sig * (1.0f + gj * (1.0f - sig)));",
     "dg.v[j] = to_floatX(dj * uj * sig * (1.0f + gj * sig));",
     "emu_llama", "SiLU derivative with sig instead of (1 - sig)"),
    ("rope_head_index", "kernel", "llmc/rope.cuh",
     "h = (int)(idx / groups % (H + KV));", "h = (int)(idx / groups % H);",
     "emu_llama", "RoPE's thread per head: the index wraps over the q heads only (the k heads are not rotated)"),
    ("swiglu_bwd_grid", "kernel", "llmc/mlp_act.cuh",
     "swiglu_backward_kernel<<<(unsigned)ceil_div((size_t)N * F / 8, 256), 256, 0, stream>>>",
     "swiglu_backward_kernel<<<(unsigned)ceil_div((size_t)N * F / 8, 512), 256, 0, stream>>>",
     "emu_llama", "SwiGLU backward's grid covers half the vectors (one vector a thread, no loop)"),
    ("cls_padding", "kernel", "llmc/classifier.cuh",
     "            const int col = c + i;\n            float d = 0.0f;\n            if (target >= 0 && col < V) d = ", "            const int col = c + i;\n            float d = 0.0f;\n            if (target >= 0 && col < Vp) d = ",
     "emu_gpt", "classifier gradient over the padded vocabulary"),
    ("gnorm_sqrt", "kernel", "llmc/grad_norm.cuh",
     "out[1] = unscaled_clip(sqrtf(tot), clip, inv_scale, &norm);", "out[1] = unscaled_clip(tot, clip, inv_scale, &norm);",
     "emu_gpt", "global gradient norm without the square root"),
    ("adamw_bc2", "optimizer", "llmc/adamw.cuh",
     "*p -= step * *m / (sqrtf(*v) * rsbc2 + eps);", "*p -= step * *m / (sqrtf(*v) + eps);",
     "emu_gpt", "AdamW without the second moment's bias correction"),
    ("adamw_wd_all", "optimizer", 'llmc/gpt/data_parallel.cuh',
     '        t.weight_decay = table.specs[p.spec].is_matrix ? wd : 0.0f;',
     '        t.weight_decay = wd;',
     "emu_gpt", "weight decay on every tensor (norm weights and biases too)"),
    ("adamw_beta2", "optimizer", "train_gpt.cu",
     "AdamWHyper h{(float)lr, (float)tc.beta1, (float)tc.beta2, (float)tc.eps};",
     "AdamWHyper h{(float)lr, (float)tc.beta1, 0.999f, (float)tc.eps};",
     "emu_gpt", "beta2 fixed at PyTorch's default 0.999 instead of the flag"),
    ("adamw_no_clip", "optimizer", "train_gpt.cu",
     "global_norm(out, g->scratch.gnorm, g->grads, g->table.total, (float)tc.grad_clip, g->stream, (float)(1.0 / loss_scale));",
     "global_norm(out, g->scratch.gnorm, g->grads, g->table.total, 0.0f, g->stream, (float)(1.0 / loss_scale));",
     "emu_gpt", "clipping off"),
    ("adamw_lr", "optimizer", "train_gpt.cu",
     "AdamWHyper h{(float)lr, (float)tc.beta1,", "AdamWHyper h{(float)(lr * 1.4), (float)tc.beta1,",
     "emu_gpt", "applied learning rate x1.4"),
    ("loss_scale_accum", "trainer", "train_gpt.cu",
     "gpt_backward_chunk(g, a, S * scale * mb0.grad_of(a), scale * mb0.loss_of(a),", "gpt_backward_chunk(g, a, S * accum * scale * mb0.grad_of(a), scale * mb0.loss_of(a),",
     "emu_gpt", "gradient accumulation without dividing by the micro-batch count"),
    ("bias_grad_overwrite", "trainer", "llmc/matmul.cuh",
     "if (i < n) dbias[i] = accumulate ? to_floatX(to_float(dbias[i]) + to_float(scratch[i])) : scratch[i];",
     "if (i < n) dbias[i] = scratch[i];",
     "emu_gpt", "bias gradient overwritten instead of accumulated over micro-batches"),
    ("adamw_v_abs", "optimizer", "llmc/adamw.cuh",
     "*v = beta2 * *v + (1.0f - beta2) * g * g;", "*v = beta2 * *v + (1.0f - beta2) * fabsf(g);",
     "emu_fp32", "second moment of abs(g) instead of g^2 (fp32 build)"),

    # --- CPU reference (llmc/ref_ops.h, train_gpt_cpu.cpp, schedules) -----------------------------
    ("ref_wpe_grad", "reference", "llmc/ref_ops.h",
     "if (dwpe) dwpe[(size_t)(pos ? pos[n] : n % T) * C + c] += d;",
     "if (dwpe) dwpe[(size_t)(pos ? pos[n] : n % T) * C + c] = d;",
     "cpu_units", "position-embedding gradient overwritten instead of summed over the batch"),
    ("ref_norm_var", "reference", "llmc/ref_ops.h",
     "sum16<real>(C, [&](int c) { return (xn[c] - m) * (xn[c] - m); }) / C;",
     "sum16<real>(C, [&](int c) { return (xn[c] - m) * (xn[c] - m); }) / (C - 1);",
     "cpu_ref", "reference norm: unbiased variance"),
    ("ref_adamw_wd", "optimizer", "train_gpt_cpu.cpp",
     "pb[i] *= (real)1 - lr_r * wd;", "pb[i] *= (real)1 - wd;",
     "cpu_ref", "weight decay not scaled by the learning rate"),
    ("ref_clip_off", "optimizer", "llmc/grad_clip.h",
     "    return c < (T)1 ? c : (T)1;  // NaN: 1",
     "    return c > (T)1 ? c : (T)1;  // NaN: 1",
     "cpu_ref", "clipping coefficient max instead of min"),
    ("lr_warmup", "trainer", "llmc/lr_schedule.h",
     "if (step < warmup) return lr_max * (step + 1) / warmup;", "if (step < warmup) return lr_max * step / warmup;",
     "cpu_ref", "warmup starts at lr 0 (off by one)"),
    ("lr_cosine", "trainer", "llmc/lr_schedule.h",
     "return lr_min + (lr_max - lr_min) * 0.5 * (1.0 + std::cos(M_PI * p));",
     "return lr_min + (lr_max - lr_min) * 0.5 * (1.0 + std::cos(2.0 * M_PI * p));",
     "cpu_ref", "cosine schedule with a full period"),

    # --- parallel layouts (llmc/parallel/zero.h, layout.h, the CPU trainer's collectives) ---------------------
    ("zero_shard", "layout", "llmc/parallel/zero.h",
     "return {b.range.lo + (size_t)r * n, b.range.lo + (size_t)(r + 1) * n};",
     "return {b.range.lo + (size_t)r * n, b.range.lo + (size_t)(r + 1) * n - 1};",
     "parallel", "ZeRO piece loses its last element"),
    ("zero2_gather", "layout", "train_gpt_cpu.cpp",
     "if (zero == 1 || zero == 2)\n        for (const Bucket& bk : g->buckets) {",
     "if (zero == 1)\n        for (const Bucket& bk : g->buckets) {",
     "parallel", "ZeRO-2 does not all-gather the updated shards"),
    ("norm_tp_count", "layout", "llmc/parallel/layout.h",
     "        if (tp_replicated(t.specs[p.spec].tp) && L.topo.tp_rank != 0) continue;\n", "",
     "parallel", "global norm counts replicated tensors on every tp rank"),
    ("norm_tied_count", "layout", "llmc/parallel/layout.h",
     "        if (p.spec == t.wte && L.topo.pp_rank != 0) continue;\n", "",
     "parallel", "global norm counts the tied embedding on the first and the last stage"),
    ("tied_sum", "layout", "train_gpt_cpu.cpp",
     "if (k == g->table.wte && g->cfg.tied && L.topo.pp > 1)", "if (k == g->table.wte && g->cfg.tied && L.topo.pp > 2)",
     "parallel", "tied embedding gradients not summed between first and last stage at pp 2"),
    ("sp_pack", "layout", "train_gpt_cpu.cpp",
     "                      packed + (((size_t)r * B + b) * Tl) * C);",
     "                      packed + (((size_t)b * tp + r) * Tl) * C);",
     "parallel", "SP reduce-scatter packs batch-major instead of rank-major"),
    ("vocab_ce_max", "layout", "train_gpt_cpu.cpp",
     "    comm_all_reduce_max(g->cm.tp, mx, N);\n", "",
     "parallel", "vocabulary-parallel cross-entropy without the max over tp"),
    ("pp_loss_div", "layout", "train_gpt_cpu.cpp",
     "gpt_backward_chunk(g, live.at({mb, chunk}), S * mb0.grad_of(mb) / loss_div);", "gpt_backward_chunk(g, live.at({mb, chunk}), S * mb0.grad_of(mb) / n_mb);",
     "parallel", "pipeline backward scales the loss by the local micro-batches, not accum x dp"),

    # --- readers, tokenizer, checkpoints ---------------------------------------------------------
    ("loader_shift", "reader", "llmc/data/dataloader.h",
     "std::copy(dl->window.begin() + 1, dl->window.end(), targets + (size_t)b * T);",
     "std::copy(dl->window.begin(), dl->window.end() - 1, targets + (size_t)b * T);",
     "datasets", "targets not shifted by one token"),
    ("shard_version", "reader", "llmc/data/datasets.h",
     "uint64_t es = version == 1 ? 2 : 4;", "uint64_t es = version == 2 ? 2 : 4;",
     "datasets", "llm.c shard token width swapped between versions"),
    ("idx_docidx", "reader", "llmc/data/datasets.h",
     "if (last != (int64_t)n) return", "if (last != (int64_t)n && false) return",
     "datasets", "Megatron .idx whose doc_idx does not end at N accepted"),
    ("bpe_ties", "reader", "llmc/data/tokenizer.h",
     "return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;",
     "return a.rank != b.rank ? a.rank > b.rank : a.left < b.left;",
     "tokenizer", "BPE ties merged rightmost first"),
    ("utf8_range", "reader", "llmc/data/tokenizer.h",
     "lo = b == 0xE0 ? 0xA0 : 0x80; hi = b == 0xED ? 0x9F : 0xBF;", "lo = 0x80; hi = 0xBF;",
     "tokenizer", "UTF-8 decoder accepts overlong and surrogate 3-byte forms"),
    ("ckpt_position", "reader", "llmc/run/checkpoint.h",
     "\",\\\"train_sample\\\":\" + std::to_string(s.train_sample)",
     "\",\\\"train_sample\\\":\" + std::to_string(s.train_sample + 1)",
     "resume", "checkpoint stores the data position one sample ahead"),
    # --- sharded checkpoints (llmc/run/checkpoint.h, part_write / part_read in llmc/run/assemble.h) ----------
    ("ckpt_chunk_hash", "reader", "llmc/run/checkpoint.h",
     "if (ckpt_hash(f.buf.data(), len) != f.hashes[ci])", "if (false && ckpt_hash(f.buf.data(), len) != f.hashes[ci])",
     "bad_inputs", "a shard's damaged chunk is read without checking its hash"),
    ("ckpt_cover", "reader", "llmc/run/checkpoint.h",
     "    err = ckpt_check_cover(R, full);\n", "    err = \"\";\n",
     "bad_inputs", "a checkpoint whose pieces do not cover every tensor starts loading (a partly loaded model)"),
    ("ckpt_write_shard_pos", "parallel", "llmc/run/assemble.h",
     "const size_t pos = p.flat.lo - (sharded ? p.shift : 0);", "const size_t pos = p.flat.lo;",
     "cpu_units", "a ZeRO shard's pieces are written from flat-buffer positions (the moments of the wrong elements)"),
    ("ckpt_read_block_start", "reader", "llmc/run/checkpoint.h",
     "int64_t pos = s->start[k] + (r - b.row0) * b.cols + (c - b.col0);", "int64_t pos = (r - b.row0) * b.cols + (c - b.col0);",
     "cpu_units", "resharding reads a multi-block slice (tp's fused QKV, gate/up) as if every block started the slice"),
    ("init_part_width", "parallel", "llmc/run/assemble.h",
     "tp_extract(w.data(), f.cols, slice[k], part + t.specs[k].offset);", "tp_extract(w.data(), t.specs[k].cols, slice[k], part + t.specs[k].offset);",
     "cpu_units", "a rank cuts its slice of each initial tensor with its own width, not the whole tensor's (row-parallel tp)"),
    ("export_piece_offset", "parallel", "llmc/run/assemble.h",
     "io.send((int)g, mine + s.offset + at, std::min(step, n - at));", "io.send((int)g, mine + s.offset, std::min(step, n - at));",
     "cpu_units", "an export's slice larger than one message sends its first piece again and again"),
    # --- the numerics guard (llmc/run/guard.h) ---------------------------------------------------------------------
    ("guard_adam_count", "trainer", "llmc/run/guard.h",
     "{ return step + 1 - s.skipped; }", "{ return step + 1; }",
     "guard", "AdamW's step count also counts skipped updates"),
    ("guard_norm", "trainer", "llmc/run/guard.h",
     "    if (!std::isfinite(norm)) return tc.loss_scaling.on() ? GUARD_OVERFLOW : GUARD_NONFINITE;\n", "",
     "guard", "a non-finite gradient norm with a finite loss is not skipped"),
    # --- loss scaling (llmc/loss_scale.h) ------------------------------------------------------------------------
    ("ls_hysteresis", "trainer", "llmc/loss_scale.h",
     "if (s->hysteresis <= 0) s->scale", "if (s->hysteresis < 0) s->scale",
     "loss_scale", "the scale halves one overflow later than --hysteresis says"),
    ("ls_hysteresis_restore", "trainer", "llmc/loss_scale.h",
     "        s->hysteresis = c.hysteresis;\n        s->scale *= 2.0;", "        s->scale *= 2.0;",
     "loss_scale", "a growth of the scale does not restore the hysteresis count (the next overflow halves at once)"),
    ("ls_overflow_limit", "trainer", "llmc/run/guard.h",
     "    if (v == GUARD_OVERFLOW && loss_scale_can_lower(tc.loss_scaling, s->loss_scale)) return true;\n", "",
     "loss_scale", "the overflows a dynamic scale lowers itself for count toward --skip-limit (an fp16 run's start stops it)"),
    ("ls_overflow_skip", "trainer", "llmc/run/guard.h",
     "return tc.loss_scaling.on() ? GUARD_OVERFLOW : GUARD_NONFINITE;", "return tc.loss_scaling.on() ? GUARD_UPDATE : GUARD_NONFINITE;",
     "loss_scale", "an overflow under loss scaling is not skipped: the update takes the non-finite gradients"),
    ("ls_unscale_cpu", "trainer", "train_gpt_cpu.cpp",
     "unscaled_clip(grad_norm(g), tc.grad_clip, 1.0 / S, &norm);", "unscaled_clip(grad_norm(g), tc.grad_clip, 1.0, &norm);",
     "loss_scale", "the CPU trainer's optimizer does not divide the scaled gradients by the loss scale"),
    ("ls_unscale_clip", "trainer", "llmc/grad_clip.h",
     "return clip_coef(*norm, clip) * inv_scale;", "return clip_coef(*norm, clip);",
     "loss_scale", "the optimizer's factor for scaled gradients is the true norm's clip coefficient, without 1 / S"),
    ("ls_unscale_cuda", "trainer", "llmc/grad_norm.cuh",
     "out[1] = unscaled_clip(sqrtf(tot), clip, inv_scale, &norm);", "out[1] = unscaled_clip(sqrtf(tot), clip, 1.0f, &norm);",
     "loss_scale", "one GPU: the norm kernel does not unscale (the norm and the optimizer's factor are the scaled gradients')"),
    ("ls_unscale_dp", "trainer", "llmc/gpt/data_parallel.cuh",
     "unscaled_clip(sqrt(sumsq[0]), clip, inv_scale, &norm);", "unscaled_clip(sqrt(sumsq[0]), clip, 1.0, &norm);",
     "loss_scale", "several ranks: the optimizer's gradient scale lacks 1 / S"),
    ("ls_pp_backward", "trainer", "train_gpt.cu",
     "gpt_backward_chunk(g, mb, S * scale * mb0.grad_of(mb)", "gpt_backward_chunk(g, mb, scale * mb0.grad_of(mb)",
     "loss_scale", "a pipeline stage's backward does not multiply the loss by the scale (its gradients come out 1/S too small)"),
    ("ls_window_resumed", "trainer", "llmc/loss_scale.h",
     "if (++s->clean >= c.window) {", "if (++s->clean == c.window) {",
     "loss_scale", "a run resumed with a window shorter than its clean count never grows its scale again"),
    ("ls_resume_clean", "trainer", "llmc/run/checkpoint.h",
     "        s->loss_scale.clean = (int)cl->num;\n", "",
     "loss_scale", "a resumed run restarts the dynamic scale's count of clean steps (it grows later than the uninterrupted run)"),
    # --- the fp16 build (make PRECISION=FP16) -------------------------------------------------------------------
    ("f16_mma", "kernel", "llmc/attention.cuh",
     "    mma_f16_16816(d, a, b0, b1);", "    mma_bf16_16816(d, a, b0, b1);",
     "attention", "the fp16 build's attention multiplies its fp16 fragments as if they were bf16"),
    ("f16_cublaslt_type", "trainer", "llmc/precision.cuh",
     "static const cudaDataType_t CUDA_FLOATX = CUDA_R_16F;", "static const cudaDataType_t CUDA_FLOATX = CUDA_R_16BF;",
     "emu_fp16", "cuBLASLt is told the fp16 build's tensors are bf16"),
    ("f16_default_scale", "trainer", "train_gpt.cu",
     "    tc.loss_scaling.dynamic = true;", "    tc.loss_scaling.dynamic = false;",
     "loss_scale", "the fp16 build trains without a loss scale unless --loss-scale is given (not Megatron's --fp16)"),
    ("f16_nccl_type", "parallel", "llmc/parallel/comm_nccl.cuh",
     "inline ncclDataType_t nccl_type<__half>() { return ncclHalf; }", "inline ncclDataType_t nccl_type<__half>() { return ncclBfloat16; }",
     "gpu_multirank", "the fp16 build's collectives on floatX tensors move them as bf16"),
    ("gemm_tune_in_place", "trainer", "llmc/matmul.cuh",
     "        out = copy;\n", "        (void)copy;\n",
     "matmul_emu", "--gemm-algos tune times an accumulating GEMM on its real output (the gradient accumulated 5 times)"),
    ("gemm_replay_ignored", "trainer", "llmc/matmul.cuh",
     "            a.algos.assign(1, r.algo);\n", "            (void)r;\n",
     "matmul_emu", "--gemm-algos FILE keeps the heuristic's algorithms instead of the recorded one"),
    ("gemm_device_unread", "trainer", "llmc/matmul_algos.cuh",
     "        if (line.rfind(GEMM_ALGOS_DEVICE, 0) == 0) *recorded_on = line.substr(sizeof(GEMM_ALGOS_DEVICE) - 1);\n", "",
     "gemm_algos", "--gemm-algos FILE never reads the device it was timed on: a replay on the same GPU notes a difference"),
    ("gemm_gather_rank0", "trainer", "llmc/matmul_algos.cuh",
     "    for (int r = 0; r < world.size; r++)\n        for (size_t j = 0; j < (size_t)all[row * r + row - 1]; j++) {",
     "    for (int r = 0; r < 1; r++)\n        for (size_t j = 0; j < (size_t)all[row * r + row - 1]; j++) {",
     "gemm_algos", "--gemm-algos tune writes rank 0's GEMMs only: a pipeline's last stage replays the heuristic's for its own"),
    ("gemm_device_same", "trainer", "llmc/matmul_algos.cuh",
     "    if (g.recorded_on == here) return;",
     "    if (g.recorded_on.empty() || g.recorded_on == here) return;",
     "gemm_algos", "--gemm-algos FILE without a device line is replayed without a note"),
    ("f16_cudnn_type", "cudnn", "llmc/attention_cudnn.cuh",
     "std::is_same<floatX, __half>::value ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16", "CUDNN_DATA_BFLOAT16",
     "attention", "the fp16 build describes its tensors to cuDNN as bf16"),
    ("f16_emu_subnormal", "emulation", "tests/cuda_emu/include/cuda_emu.h",
     "return sign | (uint16_t)std::nearbyint(af * 16777216.0f);", "return sign;",
     "attention", "the emulation's float -> half flushes fp16's subnormals to zero (the GPU keeps them)"),
    # --- bad inputs: path flags the run does not open, ranks the environment names but MPI did not start --------
    ("unused_paths", "inputs", "llmc/run/flags.h",
     "    check_given_paths(*tc);\n", "",
     "paths", "a path flag the run does not open goes unchecked (-g 0 --tokenizer, -i under --export-init, ...)"),
    ("unused_tokenizer_name", "inputs", "llmc/run/flags.h",
     "&& !tokenizer_is_name(tc.tokenizer)) tokenizer_check", "&& tokenizer_is_name(tc.tokenizer)) tokenizer_check",
     "paths", "an unopened --tokenizer is checked when it is a name (gpt2, llama3), not when it is a path"),
    ("world_without_mpi", "inputs", "llmc/parallel/comm_mpi.h",
     "if (li.world == 1 || w.size == li.world) return;", "if (li.world == 1 || w.size == 1 || w.size == li.world) return;",
     "bad_inputs", "a process the environment calls one of N ranks, not started by MPI, trains alone (RANK, WORLD_SIZE)"),
    # --- the layout planner and the ZeRO pieces -----------------------------------------------------------------
    ("plan_kernel_limits", "planner", "llmc/parallel/planner.h",
     "if (!row.bytes.err.empty()) { p.err = row.bytes.err; return p; }", "",
     "train_gpt_host", "the planner offers layouts the trainer's kernels cannot run"),
    ("zero_part_stage", "parallel", "llmc/parallel/zero.h",
     "return p.flat.lo - (zero >= (int)kind ? p.shift : 0);",
     "return p.flat.lo - (zero > (int)kind ? p.shift : 0);",
     "parallel", "at the stage that shards a buffer its parts are read at flat positions (ZeRO 1's moments, 2's "
     "gradients, 3's weights out of their shards)"),
    ("sp_regather", "parallel", 'train_gpt.cu',
     'if (g->recompute != RECOMPUTE_FULL) tp_gather(g->tp, la.ln1, la.ln1_full);',
     '',
     "gpu_tp", "under SP the qkv weight gradient reads another layer's gathered norm output"),
    # --- fp8 (train_gpt.cu's fp8 section) ------------------------------------------------------------------------
    ("fp8_dgrad_scale", "trainer", "llmc/gpt/fp8_linear.cuh",
     "matmul_fp8_backward_input(mm, stream, dinp, f.dy8, fp8_gemm_scale(&f.dy, i),",
     "matmul_fp8_backward_input(mm, stream, dinp, f.dy8, fp8_gemm_scale(&f.x, i),",
     "fp8_train", "the input gradient dequantizes the output gradient with the input's scale"),
    ("fp8_tp_agree", "parallel", "llmc/gpt/fp8_linear.cuh",
     "if (over_tp && f.tp.size > 1) PROF(PROF_TP_COMM, prof_bytes(4.0 * n), comm_all_reduce_max(f.tp, amax, n));", "",
     "fp8_train", "tp ranks scale their slices by their own amax"),
    ("fp8_dp_agree", "parallel", "llmc/gpt/fp8_linear.cuh",
     "    comm_all_reduce_max(f.dp, amax, n);\n", "",
     "fp8_train", "dp ranks' delayed amaxes (and ZeRO-3 weight amaxes) are not maxed over dp"),
    ("fp8_resume_dy", "trainer", "llmc/gpt/fp8_linear.cuh",
     "fp8_meta_upload(&f.dy, st.dy, st.pos);", "",
     "fp8_train", "resume restores the inputs' delayed-scaling state but not the output gradients'"),
    ("fp8_skip_update", "trainer", "llmc/gpt/fp8_linear.cuh",
     "        fp8_update_delayed(stream, m);\n", "",
     "fp8_train", "delayed scaling never updates its scales (they stay 1)"),
    # --- GELU in cuBLASLt's epilogues (--gelu-fusion on): the emulation's epilogues, matmul.cuh, the trainer ---------
    ("gelu_lt_grad_cubic", "kernel", "tests/cuda_emu/include/cublasLt.h",
     "* (1.0f - t * t) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);", "* (1.0f - t * t) * 0.7978845608f;",
     "matmul_emu", "the emulated DGELU's derivative drops the cubic term's 3 * 0.044715 x^2"),
    ("gelu_lt_aux_ld", "kernel", "tests/cuda_emu/include/cublasLt.h",
     "emu_st(d->aux, at, (size_t)i + (size_t)j * d->aux_ld, v);", "emu_st(d->aux, at, (size_t)i + (size_t)j * M, v);",
     "matmul_emu", "the emulated GELU_AUX writes the aux matrix at D's row count, not its own leading dimension"),
    ("gelu_lt_bgrad_added", "kernel", "tests/cuda_emu/include/cublasLt.h",
     "            for (int j = 0; j < N; j++) acc += dgrad[(size_t)i + (size_t)j * M];\n            emu_st(d->bias, dt, i, acc);",
     "            for (int j = 0; j < N; j++) acc += dgrad[(size_t)i + (size_t)j * M];\n            emu_st(d->bias, dt, i, acc + emu_ld(d->bias, dt, i));",
     "matmul_emu", "the emulated DGELU_BGRAD adds its bias gradient into the bias buffer instead of storing it"),
    ("gelu_aux_ld_cols", "kernel", "llmc/matmul.cuh",
     "        const int64_t aux_ld = m;", "        const int64_t aux_ld = n;",
     "matmul_emu", "the GELU epilogues' aux leading dimension is D's column count"),
    ("gelu_bgrad_not_added", "kernel", "llmc/matmul.cuh",
     "        bias_grad_accumulate_kernel<<<(IC + 255) / 256, 256, 0, stream>>>(dbias, ctx->bias_scratch, IC, true);\n", "",
     "matmul_emu", "DGELU_BGRAD's bias gradient is left in the scratch, never added into fc1's bias gradient"),
    ("gelu_fc1_bias_twice", "trainer", "train_gpt.cu",
     "fc1_bias_taken ? nullptr : g->G(w.fc1_b)", "g->G(w.fc1_b)",
     "emu_gpt", "with --gelu-fusion on fc1's weight-gradient GEMM adds fc1's bias gradient again (counted twice)"),
    ("gelu_dgelu_aux_act", "trainer", "train_gpt.cu",
     "fused = matmul_backward_input_dgelu(&g->mm, g->stream, dfc1, dbias1, dout, g->P(w), fc1, N, IC, OC);",
     "fused = matmul_backward_input_dgelu(&g->mm, g->stream, dfc1, dbias1, dout, g->P(w), act, N, IC, OC);",
     "emu_gpt", "the DGELU epilogue's aux pointer is act, not fc1: gelu' of the activation"),
    ("gelu_selective_fused", "trainer", "train_gpt.cu",
     "return gelu_fused(g) && g->recompute != RECOMPUTE_SELECTIVE && g->recompute != RECOMPUTE_ACT;",
     "return gelu_fused(g) && g->recompute != RECOMPUTE_ACT;",
     "emu_gpt", "--recompute selective fuses its forward: the backward's recomputed act is not the one fc2 read"),
    ("gelu_act_fused", "trainer", "train_gpt.cu",
     "return gelu_fused(g) && g->recompute != RECOMPUTE_SELECTIVE && g->recompute != RECOMPUTE_ACT;",
     "return gelu_fused(g) && g->recompute != RECOMPUTE_SELECTIVE;",
     "emu_gpt", "--recompute act fuses its forward: the backward's recomputed act is not the one fc2 read"),
    ("recompute_act_missing", "trainer", "train_gpt.cu",
     "        } else if (g->recompute == RECOMPUTE_ACT) {",
     "        } else if (false && g->recompute == RECOMPUTE_ACT) {",
     "emu_gpt", "--recompute act does not recompute the activation: fc2's weight gradient reads the last layer's"),
    ("recompute_act_kept", "trainer", "llmc/gpt/memory.cuh",
     "activation(&la.act,       N * F,     KEEP,       RECOMPUTED, ",
     "activation(&la.act,       N * F,     KEEP,       KEEP,       ",
     "emu_gpt", "the buffer table keeps every layer's activation under --recompute act"),
    ("recompute_auto_order", "trainer", "train_gpt.cu",
     "for (Recompute m : {RECOMPUTE_NONE, RECOMPUTE_ACT, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL}) {",
     "for (Recompute m : {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_ACT, RECOMPUTE_FULL}) {",
     "gpu_multirank", "--recompute auto tries selective before act: it recomputes the attention where act would fit"),
    ("plan_act_cost", "trainer", "llmc/parallel/planner.h",
     "    if (recompute == 3 || recompute == 1)",
     "    if (recompute == 1)",
     "gpu_multirank", "the planner counts act's recomputed activation as free: it takes act where none fits as well"),
    ("grad_first_always", "trainer", "train_gpt.cu",
     "    g->grad_accumulate = started;",
     "    g->grad_accumulate = false;",
     "emu_gpt", "every micro-batch writes its weight gradients (beta 0): an accumulated step keeps only the last micro-batch's"),
    ("grad_first_not_reset", "trainer", "train_gpt.cu",
     "    std::fill(g->chunk_started.begin(), g->chunk_started.end(), 0);",
     "",
     "emu_gpt", "a new step's first backward adds to the previous step's gradients (the emulation's NaN fill shows it)"),
    ("grad_zero_large_skipped", "trainer", "train_gpt.cu",
     "        if (r[i + 1] - r[i] >= large)\n",
     "        if (false)\n",
     "fp8_train", "the ranges of 64K elements and more are neither memset nor zeroed by the kernel (under --fp8: all)"),
    ("grad_zero_misses_norm", "trainer", "llmc/gpt/memory.cuh",
     "            const int w = linear_weight(b, k);",
     "            const int w = k == LINEAR_QKV ? b.ln1_w : linear_weight(b, k);",
     "emu_gpt", "the zeroing skips ln1's weight, whose gradient the backward adds to: it adds to the emulation's NaN fill"),
    ("grad_first_head_panels", "trainer", "llmc/classifier.cuh",
     "matmul_backward_weight(mm, stream, dw, nullptr, logits_panel, xc, rows, C, Vp, accumulate || r0 > 0);",
     "matmul_backward_weight(mm, stream, dw, nullptr, logits_panel, xc, rows, C, Vp, accumulate);",
     "widths", "every panel of the first micro-batch writes the LM head's gradient: it keeps only the last panel's rows"),
    ("grad_first_bias_adds", "trainer", "llmc/matmul.cuh",
     "if (i < n) dbias[i] = accumulate ? to_floatX(to_float(dbias[i]) + to_float(scratch[i])) : scratch[i];",
     "if (i < n) dbias[i] = to_floatX(to_float(dbias[i]) + to_float(scratch[i]));",
     "matmul_emu", "the write mode's bias gradient adds to what the buffer held (NaN in the test)"),
    # --- scale: disk waits, GPUs per node, 32-bit limits -----------------------------------------
    ("io_wait_ckpt", "faults", "train_gpt_cpu.cpp",
     "auto barrier = [&] { comm_io_wait([&] { comm_barrier(world); }); };",
     "auto barrier = [&] { comm_barrier(world); };",
     "hangs", "the other ranks wait for a checkpoint write under --comm-timeout (slow storage ends a healthy run)"),
    ("io_wait_export", "faults", "train_gpt_cpu.cpp",
     "    comm_io_wait([&] {\n        if (g->L.topo.rank == 0) test_hooks_write_delay();",
     "    std::invoke([&] {\n        if (g->L.topo.rank == 0) test_hooks_write_delay();",
     "hangs", "a sender of the export waits for rank 0's writing under --comm-timeout (slow storage ends a finished run)"),
    ("step_wait_timeout", "faults", "train_gpt.cu",
     "    comm_wait_stream(g->world, g->stream, \"the step's work (its collectives included)\");",
     "    cudaCheck(cudaStreamSynchronize(g->stream));",
     "hangs", "the step's host wait ignores --comm-timeout: a stalled peer hangs the other ranks (seen on an H200)"),
    ("gpus_per_node", "parallel", "llmc/parallel/comm_nccl.cuh",
     "if (local_ranks > devices && ", "if (local_ranks > devices + 1 && ",
     "gpu_multirank", "two ranks share a node's one GPU without a word"),
    ("nccl_warm_world", "parallel", "train_gpt.cu",
     "    comm_warm_up(world, false);\n", "",
     "gpu_multirank", "free memory is read before NCCL's first operations take their buffers (a layout that cannot "
     "fit runs into out-of-memory inside NCCL)"),
    ("nccl_plan_allowance", "parallel", "llmc/gpt/memory.cuh",
     "b.nccl = nccl_bytes * layout_communicators(L);", "b.nccl = 0;",
     "gpu_multirank", "the plan leaves nothing to NCCL's communicators"),
    ("nccl_world_addback", "parallel", "train_gpt.cu",
     "tc->gpu_mem_gib = -neg_free / 1073741824.0 + opt->nccl_gib;", "tc->gpu_mem_gib = -neg_free / 1073741824.0;",
     "gpu_multirank", "the planner charges the world's communicator twice (measured, then allowed for)"),
    ("nccl_count_world_groups", "parallel", "llmc/parallel/layout.h",
     "        n += (int)g->size() > 1 && (int)g->size() < W;", "        n += (int)g->size() > 1;",
     "train_gpt_host", "a group of every rank counted as a communicator of its own (the world's is reused)"),
    ("attn_index_limit", "trainer", "llmc/gpt/options.cuh",
     "if (N * c.n_head * 32 > INT_MAX)", "if (N * c.n_head * 16 > INT_MAX)",
     "train_gpt_host", "the 32-bit thread index per (token, head) overflows before the run is refused"),
    ("fp8_token_limit", "trainer", "llmc/gpt/options.cuh",
     "if ((long long)B * T > 65535LL * 32)", "if ((long long)B * T > 65535LL * 64)",
     "train_gpt_host", "--fp8 runs past the transposing cast's grid limit"),
    ("qkv_bias_table", "model", "llmc/param_table.h",
     "               cfg_has_qkv_bias(c));", "               c.bias);",
     "cpu_units", "--qkv-bias makes no q, k, v bias (the parameter table asks only --bias)"),
    ("qkv_bias_py", "model", "train_gpt.py",
     'qkv_bias = cfg["bias"] or cfg["qkv_bias"]', 'qkv_bias = cfg["bias"]',
     "ref_qwen2", "the PyTorch reference drops Qwen's q, k, v biases"),
    ("qkv_bias_hf_names", "model", "train_gpt.py",
     'if cfg["bias"] or (cfg["qkv_bias"] and name.endswith(".qkv")):', 'if cfg["bias"] or cfg["qkv_bias"]:',
     "ref_qwen2", "Qwen2's Hugging Face names get biases on o_proj and the MLP too"),
    ("norm_head_ref_backward", "model", "llmc/ref_ops.h",
     "dw[(size_t)v * C + i] += (d[i] - u[i] * dot) * rnorm[v];", "dw[(size_t)v * C + i] += d[i] * rnorm[v];",
     "cpu_fd", "NormHead's backward forgets the projection off the row (the reference's)"),
    ("norm_head_py", "model", "train_gpt.py",
     '            head = F.normalize(head, dim=-1)', '            head = head',
     "ref_baichuan2", "the PyTorch reference multiplies by the raw head under NormHead"),
    ("norm_head_kernel_backward", "kernel", "llmc/classifier.cuh",
     "gr[i] = (gr[i] - to_float(u[i]) * dot) * inv;", "gr[i] = gr[i] * inv;",
     "emu_switches", "NormHead's backward kernel forgets the projection off the row"),
    ("profile_rope_unclassed", "trainer", "train_gpt.cu",
     "        PROF(PROF_ROPE, prof_bytes(2 * qk_bytes),\n             rope_rotate_inplace(la.qkv, g->rope_cos, g->rope_sin, B, T, H, KV, hd, +1, g->stream, positions(g)));",
     "        rope_rotate_inplace(la.qkv, g->rope_cos, g->rope_sin, B, T, H, KV, hd, +1, g->stream, positions(g));",
     "profile", "the forward RoPE's class region is gone: its kernels run unclassed, their time counted nowhere"),
    ("profile_loss_sum_unclassed", "trainer", "train_gpt.cu",
     "    ProfScope prof(PROF_XENT, prof_bytes(4.0 * g->B * g->T));\n", "",
     "profile", "the loss sum's kernel runs outside every class (the cross-entropy class still has the classifier's calls)"),
    ("profile_unaccounted_total", "trainer", "llmc/profile.cuh",
     "           wall - sum, wall > 0 ? 100.0 * (wall - sum) / wall : 0.0);",
     "           p->wall_ms - sum, wall > 0 ? 100.0 * (wall - sum) / wall : 0.0);",
     "profile", "the unaccounted time is the profiled steps' total wall time less one step's classes"),
    ("profile_last_interval", "trainer", "llmc/profile.cuh",
     "    for (size_t i = 0; i + 1 < p->used; i++) {", "    for (size_t i = 0; i + 2 < p->used; i++) {",
     "profile", "the step's last interval (AdamW's) is never added to its class"),
    ("norm_head_forward_call", "trainer", "train_gpt.cu",
     "    if (c.norm_head)\n        PROF(PROF_NORM_FWD, prof_bytes(2.0 * g->Vpl * C * sizeof(floatX)),\n             norm_head_forward(g->head_n, g->head_rnorm, g->P(g->head()), g->Vpl, C, g->stream));\n", "",
     "emu_switches", "the head's unit rows are never made (the classifier multiplies by an empty buffer)"),
    ("norm_head_dp_finish", "parallel", 'train_gpt.cu',
     '        head_grad_finish(g);\n        PROF(PROF_DP_CAST',
     '        PROF(PROF_DP_CAST',
     "gpu_pp", "on several ranks the head gradient joins the others without NormHead's backward"),
    ("qk_norm_ref_backward", "model", "llmc/ref_ops.h",
     "d[e] = rstd[i] * (d[e] * w[e] - x[e] * rstd[i] * m);", "d[e] = rstd[i] * d[e] * w[e];",
     "cpu_fd", "QK-norm's backward forgets the term through the head's rstd (the reference's)"),
    ("qk_norm_py", "model", "train_gpt.py",
     "        if self.q_norm is not None:\n            q, k = self.q_norm(q), self.k_norm(k)\n"
     "        if rope is not None:\n            q, k = apply_rope(q, *rope), apply_rope(k, *rope)\n",
     "        if rope is not None:\n            q, k = apply_rope(q, *rope), apply_rope(k, *rope)\n"
     "        if self.q_norm is not None:\n            q, k = self.q_norm(q), self.k_norm(k)\n",
     "ref_qwen3", "the PyTorch reference applies QK-norm after RoPE instead of before"),
    ("qk_norm_kernel_backward", "kernel", "llmc/qk_norm.cuh",
     "o.v[e] = to_floatX(rstd * (to_float(dv.v[e]) * to_float(w.v[e]) - xh * m));",
     "o.v[e] = to_floatX(rstd * to_float(dv.v[e]) * to_float(w.v[e]));",
     "emu_switches", "QK-norm's backward kernel forgets the term through the head's rstd"),
    ("qk_norm_kernel_wgrad", "kernel", "llmc/qk_norm.cuh",
     "                if (j < H) aq[e] += dy * xh;\n                else ak[e] += dy * xh;",
     "                aq[e] += dy * xh;",
     "emu_switches", "the k heads' weight gradient goes to the q heads' weight"),
    ("qk_norm_tp_sum", "parallel", "llmc/param_table.h",
     "return s == TP_SUM || (sp && s == TP_NONE);", "return sp && (s == TP_NONE || s == TP_SUM);",
     "gpu_tp", "QK-norm's weight gradients are summed over tp only under sp (each rank keeps its heads' part)"),
    ("qk_norm_cpu_tp_sum", "parallel", "train_gpt_cpu.cpp",
     "        if (L.topo.tp > 1 && tp_grad_summed(s.tp, L.sp)) comm_all_reduce_sum(cm.tp, p, s.numel());",
     "        if (L.sp && s.tp == TP_NONE) comm_all_reduce_sum(cm.tp, p, s.numel());",
     "parallel", "the CPU trainer sums only the replicated tensors under sp, not QK-norm's weights"),
    ("qk_norm_norm_ranges", "parallel", "llmc/parallel/layout.h",
     "        if (tp_replicated(t.specs[p.spec].tp) && L.topo.tp_rank != 0) continue;",
     "        if (t.specs[p.spec].tp == TP_NONE && L.topo.tp_rank != 0) continue;",
     "gpu_tp", "QK-norm's weights are counted on every tp rank in the global norm and the checkpoint's parts"),
    ("alibi_slopes_series", "model", "llmc/rope_tables.h",
     "for (int i = 0; (int)s.size() < H; i += 2) s.push_back(twice[i]);",
     "for (int i = 0; (int)s.size() < H; i += 1) s.push_back(twice[i]);",
     "ref_baichuan2_13b", "ALiBi's slopes for a head count that is not a power of two take every slope of the doubled series"),
    ("alibi_py_sign", "model", "train_gpt.py",
     "(pos[None, None, :] - pos[None, :, None])", "(pos[None, :, None] - pos[None, None, :])",
     "ref_baichuan2_13b", "the PyTorch reference's ALiBi bias grows towards the past keys instead of shrinking"),
    ("alibi_kernel_forward", "kernel", "llmc/attention.cuh",
     "            if (ALIBI) x += slope_log2 * (float)(key - row);\n", "",
     "emu_alibi", "the flash attention forward drops ALiBi's bias"),
    ("alibi_kernel_dq", "kernel", "llmc/attention.cuh",
     "            if (ALIBI) x += slope_log2 * (float)(key - (row0 + r * 8));",
     "            if (ALIBI) x += slope_log2 * (float)(key - row0);",
     "attention", "the dQ kernel recomputes the probabilities with the bias of the first of its two rows"),
    ("alibi_kernel_dkdv", "kernel", "llmc/attention.cuh",
     "        const float slope_log2 = ALIBI ? alibi[h] * 1.4426950408889634f : 0.0f;\n        for (int it = first_qt;",
     "        const float slope_log2 = ALIBI ? alibi[kh] * 1.4426950408889634f : 0.0f;\n        for (int it = first_qt;",
     "attention", "the dK, dV kernel takes the kv head's slope for every query head of its group"),
    ("alibi_rowwise", "kernel", "llmc/attention_rowwise.cuh",
     "        const float s = attention_row_dot(q, k) * scale + slope * (float)(t2 - t);",
     "        const float s = attention_row_dot(q, k) * scale;",
     "gpu_tp", "the fp32 build's attention forward drops ALiBi's bias"),
    ("alibi_tp_slopes", "parallel", "llmc/gpt/memory.cuh",
     "alibi_upload_slopes(g->alibi, c, g->tp.rank * g->Hl, g->Hl);", "alibi_upload_slopes(g->alibi, c, 0, g->Hl);",
     "gpu_tp", "every tp rank's heads get the slopes of the model's first heads"),
    ("eval_target_shift", "data", "llmc/run/mc_eval.h",
     "for (int t = nc - 1; t < nc + ne - 1; t++) y[t] = end[t - nc + 1];",
     "for (int t = nc; t < nc + ne - 1; t++) y[t] = end[t - nc + 1];",
     "eval", "an ending's first token is not scored (its target is dropped)"),
    ("eval_norm_sum", "data", "llmc/run/mc_eval.h",
     "const double s = nll[r], m = s / e.endings[j].size();", "const double s = nll[r], m = s;",
     "eval", "acc_norm picks by the summed loss, not the loss per token"),
    ("eval_llmc_label", "data", "llmc/run/mc_eval.h",
     "        e.label = s[i + 3];", "        e.label = s[i + 2];",
     "eval", "llm.c's eval file: the label read from the example's index field"),
    ("eval_tp_counts", "parallel", "llmc/parallel/layout.h",
     "return L.topo.pp_rank == L.topo.pp - 1 && L.topo.tp_rank == 0; }", "return L.topo.pp_rank == L.topo.pp - 1; }",
     "eval", "every tp rank adds its losses and scores: tp2 counts them twice"),
    ("eval_dp_split", "parallel", "llmc/parallel/layout.h",
     "return j * L.topo.dp + L.topo.dp_rank; }", "return j * L.topo.dp; }",
     "eval", "the dp ranks of a forward-only pass run the same batches (every dp rank's own never run)"),
    ("sample_position", "trainer", "train_gpt.cu",
     "    gpt_logits(g, len - 1, 1);", "    gpt_logits(g, len, 1);",
     "gpu_pp", "a sample's next token is drawn from the logits one position past the text"),
    ("qwen1_w1_w2_roles", "model", "llmc/param_table.h",
     'qw ? std::vector<Split>{{"mlp.w2", F}, {"mlp.w1", F}}', 'qw ? std::vector<Split>{{"mlp.w1", F}, {"mlp.w2", F}}',
     "ref_qwen1", "Qwen-1's MLP read with w1 as the gate (its code computes c_proj(w1(x) * silu(w2(x))): w2 is the gate)"),
    ("qwen1_py_gate", "model", "train_gpt.py",
     'linear(f"{p}.mlp.fc1", [(f"{h}.mlp.w2", ffn), (f"{h}.mlp.w1", ffn)], False)',
     'linear(f"{p}.mlp.fc1", [(f"{h}.mlp.w1", ffn), (f"{h}.mlp.w2", ffn)], False)',
     "ref_qwen1", "the PyTorch reference reads Qwen-1's w1 as the gate"),
    ("val_loss_one_rank", "trainer", "llmc/run/train_loop.h",
     "[&](int, const double*, double mean) { s += mean; });", "[&](int, const double*, double mean) { s = mean; });",
     "eval", "validation (both trainers' run_validate) keeps the last batch's loss instead of the sum"),
    ("loop_sample_offset", "trainer", "llmc/run/train_loop.h",
     "state->train_sample + (uint64_t)(a * dp + L.topo.dp_rank) * B", "state->train_sample + (uint64_t)(a + L.topo.dp_rank) * B",
     "parallel", "the run loop's micro-batch a on dp rank r reads samples (a + r)*B on: dp ranks share samples, others are skipped"),
    ("forward_split_counts", "trainer", "llmc/run/train_loop.h",
     "if (k < n && counts) got(k, rows.data()", "if (k < n) got(k, rows.data()",
     "eval", "validation and --eval take every rank's losses, not only the ranks whose losses count (tp and pp count twice)"),
    # --- the GPU sprint's launch and checks (scripts/multirank_lib.sh, scripts/gpu_check.sh) ----------------------------
    ("sprint_hostid_dropped", "sprint", "scripts/multirank_lib.sh",
     """bash -c 'NCCL_HOSTID=llmc-rank-$OMPI_COMM_WORLD_RANK exec "$@"' _)""",
     """bash -c 'exec "$@"' _)""",
     "gpu_sprint", "the shared-GPU launch drops each rank's own NCCL_HOSTID (NCCL refuses two ranks of one host on one GPU)"),
    ("sprint_stall_no_timeout_check", "sprint", "scripts/gpu_check.sh",
     """CKPT_EVERY=1 LLMC_TEST_STALL=1:3 EMU_NCCL_TIMEOUT=$MR_STALL_CT run""",
     """CKPT_EVERY=1 LLMC_TEST_STALL=1:3 run""",
     "gpu_sprint", "the stall run waits under the default 90 s instead of the stage's timeout (the bound on the end is not met)"),
    # cuDNN's attention (llmc/attention_cudnn.cuh) as the emulated cuDNN interprets its graph, against double precision
    ("cudnn_mask_axis", "cudnn", "llmc/attention_cudnn.cuh",
     "cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, row, x, nullptr, nullptr, CUDNN_DATA_FLOAT, 2);",
     "cudnn_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, row, x, nullptr, nullptr, CUDNN_DATA_FLOAT, 3);",
     "attention", "cuDNN graph: the causal mask compares the key index with itself (no mask)"),
    ("cudnn_mask_order", "cudnn", "llmc/attention_cudnn.cuh",
     "cudnn_pointwise(g, CUDNN_POINTWISE_CMP_GE, keep, row, col, nullptr, CUDNN_DATA_BOOLEAN);",
     "cudnn_pointwise(g, CUDNN_POINTWISE_CMP_GE, keep, col, row, nullptr, CUDNN_DATA_BOOLEAN);",
     "attention", "cuDNN graph: the mask keeps the future keys instead of the past"),
    ("cudnn_stats", "cudnn", "llmc/attention_cudnn.cuh",
     "cudnn_pointwise(&g, CUDNN_POINTWISE_ADD, stats, M, logL);",
     "cudnn_pointwise(&g, CUDNN_POINTWISE_SUB, stats, M, logL);",
     "attention", "cuDNN graph: the statistics are max - log(sum) instead of the log-sum-exp"),
    ("cudnn_ds_scale", "cudnn", "llmc/attention_cudnn.cuh",
     "cudnn_pointwise(&g, CUDNN_POINTWISE_MUL, dS, dP2, scale);",
     "cudnn_pointwise(&g, CUDNN_POINTWISE_MUL, dS, dP2, one);",
     "attention", "cuDNN graph: dS without the softmax scale (dQ, dK too large)"),
    ("cudnn_p_type", "cudnn", "llmc/attention_cudnn.cuh",
     "cudnnBackendDescriptor_t P = cudnn_tensor(&g, 0, X, s.tt, s.tt_st);  // floatX",
     "cudnnBackendDescriptor_t P = cudnn_tensor(&g, 0, F, s.tt, s.tt_st);  // floatX",
     "attention", "cuDNN graph: P in fp32 before P V, a graph cuDNN's engines do not take"),
    ("cudnn_bwd_k_ptr", "cudnn", "llmc/attention_cudnn.cuh",
     "{(void*)qkv, (void*)(qkv + ko), (void*)(qkv + vo),",
     "{(void*)qkv, (void*)(qkv + vo), (void*)(qkv + vo),",
     "attention", "cuDNN backward: K's pointer is V's"),
    ("cudnn_workspace", "cudnn", "llmc/attention_cudnn.cuh",
     "if (p.workspace > g_cudnn.workspace_size) {",
     "if (p.workspace > 2 * g_cudnn.workspace_size && false) {",
     "attention", "cuDNN: the plan's workspace is never allocated"),
    ("cudnn_emu_gqa", "cudnn", "tests/cuda_emu/include/cudnn_graph.h",
     "c1 = bd[1] == 1 ? 0 : b1 / (ad[1] / bd[1]);",
     "c1 = bd[1] == 1 ? 0 : b1 % bd[1];",
     "attention", "emulated cuDNN: a GQA matrix product pairs query head h with kv head h mod KV"),
    ("cudnn_emu_bf16", "cudnn", "tests/cuda_emu/include/cudnn_graph.h",
     "if (dtype == CUDNN_DATA_BFLOAT16) return (float)__nv_bfloat16(v);",
     "if (dtype == CUDNN_DATA_BFLOAT16) return v * 1.01f;",
     "attention", "emulated cuDNN: bf16 tensors scaled instead of rounded"),
    # --- packed documents (llmc/documents.h; issue 44) --------------------------------------------------------
    ("docs_eod_starts_next", "documents", "llmc/documents.h",
     "if (inputs[n] == d.eod) start = t + 1;",
     "if (inputs[n] == d.eod) start = t;",
     "ref_docs", "the end-of-document token starts the next document instead of ending its own"),
    ("docs_no_position_reset", "documents", "llmc/documents.h",
     "pos[n] = d.reset_positions ? t - start : t;",
     "pos[n] = t;",
     "ref_docs", "--reset-position-ids leaves the positions running across documents"),
    ("docs_loss_mask_target", "documents", "llmc/documents.h",
     "if (inputs[n] == d.eod) targets[n] = -1;",
     "if (targets[n] == d.eod) targets[n] = -1;",
     "ref_docs", "--eod-mask-loss drops the loss where the target, not the input, is the end-of-document token"),
    ("docs_cpu_bwd_positions", "documents", "train_gpt_cpu.cpp",
     "    chunk_documents(g, a, &pos);  // the positions",
     "    // the positions",
     "ref_docs", "the CPU backward rotates RoPE's gradient back at the unreset positions"),
    ("docs_pp_later_stage_tokens", "documents", "train_gpt_cpu.cpp",
     "        std::copy(inputs[mb].begin(), inputs[mb].begin() + N, a->inputs.begin());  // every chunk: its documents",
     "        if (chunk == 0) std::copy(inputs[mb].begin(), inputs[mb].begin() + N, a->inputs.begin());",
     "parallel_docs", "a later pipeline stage has no tokens: its layers see no document boundaries"),
    ("docs_cuda_bwd_stale", "documents", "train_gpt.cu",
     "    upload_documents(g, mb);\n",
     "",
     "gpu_pp", "a pipeline stage's backward reads the document starts of the micro-batch it ran forward last"),
    ("docs_cuda_dwpe_twice", "documents", "train_gpt.cu",
     "positions_planned(g) ? nullptr : dwpe, g->scratch.dres_full",
     "dwpe, g->scratch.dres_full",
     "emu_docs", "--reset-position-ids: the learned position embedding's gradient added by running position too"),
    ("docs_cuda_no_upload", "documents", "train_gpt.cu",
     "(size_t)(g->docs.marks() ? 4 : st.has_targets ? 2 : 1) * N",
     "(size_t)(st.has_targets ? 2 : 1) * N",
     "emu_docs", "the forward's copy leaves out the document starts and positions"),
    ("docs_att_fwd_skip", "documents", "llmc/attention.cuh",
     "const int kt_first = d_first / ATT_FWD_BN;",
     "const int kt_first = 0;",
     "attention", "the flash forward computes the key tiles before the block's documents (unmasked)"),
    ("docs_att_dq_skip", "documents", "llmc/attention.cuh",
     "const int kt_first = d_first / ATT_BWD_BN;  // the first key tile any row of the block sees",
     "const int kt_first = 0;  // the first key tile any row of the block sees",
     "attention", "the dQ kernel computes the key tiles before the block's documents (unmasked)"),
    ("docs_att_dkdv_stop", "documents", "llmc/attention.cuh",
     "if (drow[mid * BM] > key_last) hi = mid;",
     "if (drow[mid * BM] > key_last + ATT_BWD_BN) hi = mid;",
     "attention", "the dK/dV kernels go on into query tiles of later documents (unmasked)"),
    ("docs_att_fwd_mask", "documents", "llmc/attention.cuh",
     "if (key0 + n * 8 + 2 * q4 + (e & 1) < lo[e >> 1]) s[n][e] = -INFINITY;\n    float mx[2]",
     "if (key0 + n * 8 + 2 * q4 + (e & 1) < lo[e >> 1] - 1) s[n][e] = -INFINITY;\n    float mx[2]",
     "attention", "the flash forward lets a row see the key before its document's start"),
    ("docs_att_dq_mask", "documents", "llmc/attention.cuh",
     "if (key0 + n * 8 + 2 * q4 + (e & 1) < lo[e >> 1]) s[n][e] = -INFINITY;\n    for (int n = 0; n < NT; n++)",
     "if (key0 + n * 8 + 2 * q4 + (e & 1) < lo[e >> 1] - 1) s[n][e] = -INFINITY;\n    for (int n = 0; n < NT; n++)",
     "attention", "the dQ kernels (versions 3 and 7) let a row see the key before its document's start"),
    ("docs_att_dkdv_mask", "documents", "llmc/attention.cuh",
     "if (key0 + (e >> 1) * 8 < sDoc[n * 8 + 2 * q4 + (e & 1)]) st[n][e] = -INFINITY;",
     "if (key0 + (e >> 1) * 8 < sDoc[n * 8 + 2 * q4]) st[n][e] = -INFINITY;",
     "attention", "the dK/dV kernels mask odd query rows by the even row's document start"),
]


# ------------------------------------------------------------------------------------------------

def sh(cmd, cwd, env=None, timeout=None, stop_on_fail=False):
    """Runs cmd in a new process group; returns (rc, first [FAIL] line or '', tail of output)."""
    p = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, errors="replace", start_new_session=True)
    first_fail, tail = "", []
    timer = threading.Timer(timeout, lambda: os.killpg(p.pid, signal.SIGKILL)) if timeout else None
    if timer:
        timer.start()
    for line in p.stdout:
        tail = (tail + [line.rstrip()])[-8:]
        if line.startswith("[FAIL]") and not first_fail:
            first_fail = line.strip()
            if stop_on_fail:
                os.killpg(p.pid, signal.SIGKILL)
                break
    p.wait()
    if timer:
        timer.cancel()
    return p.returncode, first_fail, "\n".join(tail)


def copy_tree(dst):
    """The working tree's files (tracked and untracked, not ignored), plus the ignored inputs tests read."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    extra = ["data/tokenizers/llama3.tiktoken"]
    for f in [f for f in files if f] + extra:
        src = os.path.join(ROOT, f)
        if not os.path.isfile(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(dst, f)), exist_ok=True)
        shutil.copy2(src, os.path.join(dst, f))
    nm = os.path.join(ROOT, "tests", "tokenizer", "node_modules")
    if os.path.isdir(nm) and not os.path.exists(os.path.join(dst, "tests", "tokenizer", "node_modules")):
        shutil.copytree(nm, os.path.join(dst, "tests", "tokenizer", "node_modules"), symlinks=True)


def make_states(tree, states):
    os.makedirs(states, exist_ok=True)
    cmd = ("make -s train_gpt_cpu && source tests/gpu_cases.sh && make_gpu_states %s /usr/bin/python3 %s && "
           "[ $gpu_states_status -eq 0 ]" % (states, " ".join(STATE_CASES)))
    rc, _, tail = sh(cmd, tree)
    if rc != 0:
        sys.exit("error: could not make the reference states in %s:\n%s" % (states, tail))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--check", help="only the mutants of this check")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--jobs", type=int, default=2, help="mutants run side by side, each in its own tree copy")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per check run")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "mutation"), help="scratch directory")
    ap.add_argument("--report", help="the table's file (default WORK/report.md)")
    a = ap.parse_args()
    work = os.path.abspath(a.work)
    report = a.report or os.path.join(work, "report.md")
    if a.jobs < 1:
        sys.exit("error: --jobs must be at least 1")
    if a.check and a.check not in CHECKS:
        sys.exit("error: --check %s is not one of: %s" % (a.check, ", ".join(CHECKS)))
    todo = MUTANTS
    if a.only:
        ids = a.only.split(",")
        unknown = [i for i in ids if i not in {m[0] for m in MUTANTS}]
        if unknown:
            sys.exit("error: --only names unknown mutants: %s" % ", ".join(unknown))
        todo = [m for m in MUTANTS if m[0] in ids]
    if a.check:
        todo = [m for m in todo if m[5] == a.check]
    if a.list:
        for m in todo:
            print("%-20s %-10s %-22s %-10s %s" % (m[0], m[1], m[2], m[5], m[6]))
        return

    # every mutant must name a snippet that occurs exactly once
    stale = []
    for m in todo:
        text = open(os.path.join(ROOT, m[2])).read()
        if text.count(m[3]) != 1:
            stale.append("%s: the snippet occurs %d times in %s" % (m[0], text.count(m[3]), m[2]))
    if stale:
        sys.exit("error: mutants out of date with the source:\n  " + "\n  ".join(stale))

    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    states = os.path.join(work, "states")
    trees = [os.path.join(work, "tree%d" % j) for j in range(a.jobs)]
    t0 = time.time()
    for t in trees:
        copy_tree(t)
    make_states(trees[0], states)
    env = dict(os.environ, STATES=states)

    # baseline: every check in use passes on the unchanged tree (builds each tree's binaries too)
    used = sorted({m[5] for m in todo})
    baseline = {}
    for name in used:
        build, test = CHECKS[name]
        ok = True
        for t in trees:
            rc, fail, tail = sh(build, t, env)
            ok = ok and rc == 0
        rc, fail, tail = sh(test, trees[0], env, a.timeout)
        baseline[name] = ok and rc == 0 and not fail
        print("baseline %-10s %s" % (name, "pass" if baseline[name] else "FAILED: " + (fail or tail[-300:])), flush=True)

    free = list(trees)
    lock = threading.Lock()

    def run(m):
        mid, area, path, old, new, check, what = m
        if not baseline[check]:
            return (m, "baseline failed", "", 0.0)
        with lock:
            tree = free.pop()
        start = time.time()
        f = os.path.join(tree, path)
        orig = open(f).read()
        try:
            open(f, "w").write(orig.replace(old, new, 1))
            build, test = CHECKS[check]
            rc, _, tail = sh(build, tree, env, a.timeout)
            if rc != 0:
                return (m, "invalid", "build failed: " + tail.splitlines()[-1] if tail else "", time.time() - start)
            rc, fail, tail = sh(test, tree, env, a.timeout, stop_on_fail=True)
            if "is not built" in (fail or ""):  # the tree lacks a program the check needs: no verdict on the mutant
                return (m, "invalid", fail, time.time() - start)
            if fail or rc != 0:
                return (m, "caught", fail or "exit %d: %s" % (rc, tail.splitlines()[-1] if tail else ""), time.time() - start)
            return (m, "missed", "", time.time() - start)
        finally:
            open(f, "w").write(orig)
            # rebuild from the restored source on the next build: make sees a newer file
            os.utime(f, None)
            with lock:
                free.append(tree)

    results = []
    with ThreadPoolExecutor(max_workers=a.jobs) as ex:
        for r in ex.map(run, todo):
            m, verdict, by, secs = r
            print("%-20s %-9s %5.0fs  %s" % (m[0], verdict, secs, by[:150]), flush=True)
            results.append(r)

    counted = [r for r in results if r[1] in ("caught", "missed")]
    caught = sum(r[1] == "caught" for r in counted)
    lines = ["| mutant | area | file | the bug | check | result | first failing check |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for m, verdict, by, secs in results:
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (m[0], m[1], m[2], m[6], m[5], verdict,
                                                              by.replace("|", "/")[:160]))
    summary = "caught %d of %d mutants (%.0f%%); %d invalid, %d with a failing baseline; %.0f minutes" % (
        caught, len(counted), 100.0 * caught / max(1, len(counted)), sum(r[1] == "invalid" for r in results),
        sum(r[1] == "baseline failed" for r in results), (time.time() - t0) / 60)
    os.makedirs(os.path.dirname(os.path.abspath(report)), exist_ok=True)
    with open(report, "w") as out:
        out.write("\n".join(lines) + "\n\n" + summary + "\n")
    print("\n".join(lines))
    print(summary)
    missed = [r[0][0] for r in counted if r[1] == "missed"]
    if missed:
        print("missed: " + ", ".join(missed))
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
