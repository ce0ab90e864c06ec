#!/usr/bin/env bash
# The seed layouts and the mixed ones on the CUDA trainer, emulated (docs/design.md section 4: every layout computes
# what one process computes): train_gpt.cu's own main built against tests/cuda_emu (the machinery and the tolerances:
# tests/gpu_multirank_lib.sh, derived in tests/t_gpu_multirank.sh's header) under mpirun, each run against
# train_gpt_cpu's one-process run of the same model and data (every step's loss and gradient norm, final weights).
# tests/t_gpu_tp.sh and tests/t_gpu_pp.sh hold the single-kind layouts (tp2, tp2 sp, PP1DP4TP2 with sp, pp2, pp2 vpp2,
# PP2DP4TP1, pp4 zero1 ...); here the combinations, at the shapes of ../shared/BENCHMARK_CASES.md's rows:
#   GPT-3 shape (4 layers, 8 heads of 16, fp32 build: the bf16 attention takes head dims 64, 80, 128 only):
#     tp2 pp2 dp2 zero1 sp (8 ranks); TP2PP4 with zero1 (FlagPerf GPT-3 6.7B/13B, 8 ranks); MP 1x8x1 (tp8, Megatron);
#     2D_PP 2x4x4 (dp2 tp4 pp4, 32 ranks, Megatron); tp2 pp2 vpp2 sp (interleaved with SP); and a run saved at
#     TP2PP4 zero1 resumed at tp2 pp2 dp2 zero1 sp.
#   LLaMA with GQA (llama_tiny: 2 layers, 8 heads of 16, 4 kv heads, RMSNorm, SwiGLU, RoPE, untied head): sharding
#     stage 2 over 8 (dp8 zero2, PaddleNLP), PP1DP4TP2 with sp (FlagPerf llama3_8B H100).
# The one-rank optimizer state the guards compare with comes from --estimate-memory (host only).
# OMP_NUM_THREADS=1, mpirun --oversubscribe: a few minutes on 2 cores.
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the CUDA emulation's fiber switch is x86-64 only"; exit 0; fi
top=build/t_gpu_layouts
d=$top/gpt
rm -rf "$top" && mkdir -p "$d"
status=0
source tests/gpu_multirank_lib.sh

# reference ONE's optimizer state (guards): the one-rank memory estimate of the same model and batch
one_rank_estimate() {
    build/train_gpt_fp32_emu "${MODEL[@]}" -b 1 -t 64 -d $((64 * $1)) --estimate-memory 80 > "$d/fp32.one_rank.log" 2>&1 ||
        { echo "[FAIL] --estimate-memory: $(tail -1 "$d/fp32.one_rank.log")"; status=1; }
}

MODEL=(-c gpt3_tiny --vocab 301 --layers 4 --embd 128 --heads 8 --kv-heads 8 --ffn 256)
run cpu.a4 ./train_gpt_cpu 1 4
if [ $rc -ne 0 ]; then echo "[FAIL] train_gpt_cpu one-process run: $(why cpu.a4)"; exit 1; fi
one_rank_estimate 4
fp32 tp2_pp2_dp2_zero1_sp "tp2 pp2 dp2 zero1 sp" 8 4 --tp 2 --pp 2 --dp 2 --zero 1 --sp 1
fp32 tp2_pp4_zero1 "TP2PP4 zero1 (FlagPerf GPT-3)" 8 4 --tp 2 --pp 4 --zero 1
fp32 tp8 "MP 1x8x1 (tp8, Megatron)" 8 4 --tp 8
fp32 tp2_pp2_vpp2_sp "tp2 pp2 vpp2 sp" 4 4 --tp 2 --pp 2 --vpp 2 --sp 1
resume fp32.resume_tp2pp4_at_mixed "fp32: TP2PP4 zero1's step-2 checkpoint resumed at tp2 pp2 dp2 zero1 sp" \
    fp32.tp2_pp4_zero1 fp32.tp2_pp4_zero1 8 --tp 2 --pp 2 --dp 2 --zero 1 --sp 1
fp32 dp2_tp4_pp4 "2D_PP 2x4x4 (dp2 tp4 pp4, 32 ranks, Megatron)" 32 4 --dp 2 --tp 4 --pp 4

d=$top/llama
mkdir -p "$d"
MODEL=(-c llama_tiny --layers 2 --heads 8 --kv-heads 4)
run cpu.a8 ./train_gpt_cpu 1 8
if [ $rc -ne 0 ]; then echo "[FAIL] train_gpt_cpu one-process run, llama_tiny: $(why cpu.a8)"; exit 1; fi
one_rank_estimate 8
fp32 dp8_zero2 "llama_tiny GQA: sharding stage 2 over 8 (dp8 zero2, PaddleNLP)" 8 8 --dp 8 --zero 2
fp32 tp2_dp4_sp "llama_tiny GQA: PP1DP4TP2 with sp (FlagPerf llama3_8B)" 8 8 --tp 2 --dp 4 --sp 1

[ $status -eq 0 ] && rm -rf "$top"
exit $status
