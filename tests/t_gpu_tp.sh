#!/usr/bin/env bash
# Tensor and sequence parallel of the CUDA trainer on emulated GPUs (docs/design.md section 4: every layout computes what
# one process computes). train_gpt.cu's own main, built with g++ against tests/cuda_emu (tests/gpu_multirank_lib.sh:
# every kernel runs as written, NCCL is emulated over MPI, each process one emulated GPU), runs under mpirun with --tp,
# --sp, --dp and --zero and is compared with train_gpt_cpu's one-process run of the same model and data (4 steps of
# -b 1 -t 64, 4 micro-batches per step):
#   1. gpt3_tiny with 2 layers and 2 heads of 64 (the lib's MODEL; vocabulary 301, padded to 384 at one rank and 512 at
#      tp 2), fp32 build: one rank, then tp2, tp2 sp, tp2 dp2 zero1 sp, tp2 dp2 zero3, and FlagPerf's PP1DP4TP2 with sp
#      (--tp 2 --dp 4 --sp 1, 8 ranks): every step's loss and gradient norm and the final weights; tp2 dp2 zero3's
#      --save-safetensors (assembled on rank 0 a tensor at a time) equals its last checkpoint converted offline.
#   2. resume across layouts: tp2's step-2 checkpoint continued at one rank, and the one-rank run's step-2 checkpoint
#      continued at tp2 sp, each against the run that continued it (steps 3-4, final weights and moments).
#   3. bf16 build: tp2 sp against the fp32 CPU run (test_gpt.cu's chain, tests/t_gpu_multirank.sh's header).
#   4. a LLaMA model with GQA (llama_tiny with 1 layer, 8 heads of 16 and 4 kv heads, SwiGLU, RMSNorm, RoPE, no biases,
#      untied head): one rank, tp2 (4 heads, 2 kv heads per rank) and tp4 (Megatron's MP 1x4: 2 heads, 1 kv head per
#      rank), fp32 build (its attention takes head dim 16; the bf16 kernels take 64, 80 or 128).
#   5. Qwen's biases on q, k, v only, Baichuan2's NormHead and Qwen3's QK-norm (the LLaMA model of 4. with --qkv-bias 1
#      --norm-head 1 --qk-norm 1): tp2, and tp2 sp.
#   7. ALiBi (the LLaMA model of 4. with --pos alibi: 8 heads, slopes 2^-1 .. 2^-8): tp2, each rank the slopes of its
#      own 4 heads.
#   6. a bad layout stops with exit 1 naming the flag: --tp 3 with 2 heads.
#   8. --gelu-fusion on (GELU in fc1's and fc2's cuBLASLt epilogues, llmc/matmul.cuh), bf16, on the lib's GELU model:
#      one rank, off and on trained side by side: every step's loss within FUSION_LOSS_TOL of off's and the gradient
#      norms within FUSION_NORM_TOL (relative), the final weights not the same bytes (the epilogues ran); on with
#      EMU_LT_NO_ALGO=GELU_AUX_BIAS,DGELU_BGRAD (the emulated cuBLASLt without them): bitwise off, the fallback said
#      once per epilogue; tp2 sp on (each rank fuses its own fc1 columns and fc2 rows): within bf16 of the fp32 CPU run
#      as 3., and within the fusion's tolerances of tp2 sp off. The tolerances are test_gpt.cu's (test_gelu_fusion):
#      the runs differ in 2 of the (3 + 5L) roundings of a layer's forward path (act: gelu of the fp32 pre-activation
#      rounded once against gelu of fc1 rounded, then rounded) and 1 of the backward's (dact is not rounded), so the
#      losses within 2L / (3 + 5L) of 3.'s HALF_LOSS_TOL (doubled there for the steps' drift) and the gradient norms
#      within (4L + L) 2^-8.
# Tolerances and the guards (the job ran as its layout: the config table's row, one metrics.jsonl, optimizer state per
# rank below one rank's) are tests/gpu_multirank_lib.sh's, derived in tests/t_gpu_multirank.sh's header; tensor
# parallelism sums each matmul's partial products over the tp ranks and the vocabulary-parallel cross-entropy combines
# the row max and sums over them, one more fp32 summation order within the same bounds.
# OMP_NUM_THREADS=1, mpirun --oversubscribe: about 3 minutes on 2 busy cores.
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the CUDA emulation's fiber switch is x86-64 only"; exit 0; fi
d=build/t_gpu_tp
rm -rf "$d" && mkdir -p "$d"
status=0
source tests/gpu_multirank_lib.sh

# 1. the one-process reference (a checkpoint every step, for the bf16 logit bound) and the initial weights
CKPT_EVERY=1 run cpu.a4 ./train_gpt_cpu 1 4
if [ $rc -ne 0 ]; then echo "[FAIL] train_gpt_cpu one-process run: $(why cpu.a4)"; exit 1; fi
./train_gpt_cpu "${MODEL[@]}" --export-init "$d/init.safetensors" > "$d/init.log" 2>&1 ||
    { echo "[FAIL] train_gpt_cpu --export-init: $(tail -1 "$d/init.log")"; exit 1; }

fp32 one_rank "one rank" 1 4
fp32 tp2 "tp2" 2 4 --tp 2
fp32 tp2_sp "tp2 sp" 2 4 --tp 2 --sp 1
fp32 tp2_dp2_zero1_sp "tp2 dp2 zero1 sp" 4 4 --tp 2 --dp 2 --zero 1 --sp 1
fp32 tp2_dp2_zero3 "tp2 dp2 zero3" 4 4 --tp 2 --dp 2 --zero 3 --save-safetensors "$d/tp2_dp2_zero3.safetensors"
# its --save-safetensors (whole tensors assembled on rank 0 one at a time from the tp slices, the ZeRO-3 shards
# gathered) holds the values of its final checkpoint, converted offline (build/ckpt_convert --hf), exactly
./build/ckpt_convert "$d/fp32.tp2_dp2_zero3/ckpt_$(printf %08d $STEPS)" --hf "$d/tp2_dp2_zero3.converted.safetensors" > "$d/convert.log" 2>&1
weights compare "$d/tp2_dp2_zero3.safetensors" "$d/tp2_dp2_zero3.converted.safetensors" 0
if [ $wok = 1 ]; then echo "[PASS] fp32 tp2 dp2 zero3: --save-safetensors equals its last checkpoint converted to Hugging Face names (worst $wout)"
else echo "[FAIL] fp32 tp2 dp2 zero3: --save-safetensors differs from its last checkpoint converted: $wout $(tail -1 "$d/convert.log")"; status=1; fi
fp32 tp2_dp4_sp "PP1DP4TP2 with sp (--tp 2 --dp 4 --sp 1)" 8 4 --tp 2 --dp 4 --sp 1

# 2. checkpoints are layout-independent: tp -> one rank, one rank -> tp
resume fp32.resume_tp2_at_1 "fp32: tp2's step-2 checkpoint resumed at one rank" fp32.tp2 fp32.tp2
resume fp32.resume_1_at_tp2 "fp32: the one-rank step-2 checkpoint resumed at tp2 sp" fp32.one_rank fp32.one_rank 2 --tp 2 --sp 1

# 3. bf16 tp2 sp against the fp32 CPU run
half_tolerances bf16
run bf16.tp2_sp build/train_gpt_emu 2 4 --tp 2 --sp 1
if [ $rc -ne 0 ]; then echo "[FAIL] bf16 tp2 sp (2 ranks): exit $rc after $took s: $(why bf16.tp2_sp)"; status=1
else
    half_vs_cpu bf16.tp2_sp
    if [ -z "$fail" ]; then echo "[PASS] bf16 tp2 sp (2 ranks, $took s) within bf16 of the fp32 one-process run: $figures"
    else echo "[FAIL] bf16 tp2 sp vs the fp32 one-process run:$fail ($figures)"; status=1; fi
fi

# 8. --gelu-fusion on against off, one rank and tp2 sp (bf16; the lib's MODEL is GELU with biases, L = 2)
FUSION_LOSS_TOL=$(awk -v t="$HALF_LOSS_TOL" 'BEGIN { printf "%.4g", t * 2 * 2 / (3 + 5 * 2) }')
FUSION_NORM_TOL=$(awk 'BEGIN { printf "%.4g", (4 * 2 + 2) / 256 }')
# fusion_pair ON OFF LABEL: run ON (--gelu-fusion on) against OFF (off, the same layout)
fusion_pair() {
    local l n fail=""
    l=$(diff_of "$1" "$2" 1 loss 0)
    n=$(diff_of "$1" "$2" 1 grad_norm 1)
    within "$l" "$FUSION_LOSS_TOL" || fail+=" losses $l > $FUSION_LOSS_TOL;"
    within "$n" "$FUSION_NORM_TOL" || fail+=" gradient norms $n > $FUSION_NORM_TOL;"
    cmp -s "$(ckpt "$1" $STEPS model)" "$(ckpt "$2" $STEPS model)" && fail+=" the final weights are off's bytes: no epilogue ran;"
    grep -q "GELU in cuBLASLt's epilogues, fc1's forward" "$d/$1.log" || fail+=" no line saying the fusion is on;"
    ! grep -q "no algorithm with the" "$d/$1.log" || fail+=" it fell back: $(grep -m 1 'no algorithm with the' "$d/$1.log");"
    if [ -z "$fail" ]; then echo "[PASS] $3 ($took s): within the fusion's tolerances of off: losses $l ($FUSION_LOSS_TOL), gradient norms $n ($FUSION_NORM_TOL)"
    else echo "[FAIL] $3 vs off:$fail"; status=1; fi
}
run bf16.one_rank build/train_gpt_emu 1 4
if [ $rc -ne 0 ]; then echo "[FAIL] bf16 one rank: exit $rc: $(why bf16.one_rank)"; status=1; fi
run bf16.one_rank_gelu build/train_gpt_emu 1 4 --gelu-fusion on
if [ $rc -ne 0 ]; then echo "[FAIL] bf16 one rank --gelu-fusion on: exit $rc: $(why bf16.one_rank_gelu)"; status=1
else fusion_pair bf16.one_rank_gelu bf16.one_rank "bf16 one rank --gelu-fusion on"; fi
EMU_LT_NO_ALGO=GELU_AUX_BIAS,DGELU_BGRAD run bf16.one_rank_gelu_noalgo build/train_gpt_emu 1 4 --gelu-fusion on
if [ $rc -ne 0 ]; then echo "[FAIL] bf16 one rank --gelu-fusion on without the epilogues: exit $rc: $(why bf16.one_rank_gelu_noalgo)"; status=1
else
    same_bits bf16.one_rank_gelu_noalgo bf16.one_rank "bf16 one rank --gelu-fusion on, EMU_LT_NO_ALGO=GELU_AUX_BIAS,DGELU_BGRAD (falls back) against off"
    notes=$(grep -c "no algorithm with the .*GELU" "$d/bf16.one_rank_gelu_noalgo.log")
    if [ "$notes" = 2 ]; then echo "[PASS] the fallback is said once per epilogue (2 lines)"
    else echo "[FAIL] the fallback is said once per epilogue: $notes lines, want 2"; status=1; fi
fi
run bf16.tp2_sp_gelu build/train_gpt_emu 2 4 --tp 2 --sp 1 --gelu-fusion on
if [ $rc -ne 0 ]; then echo "[FAIL] bf16 tp2 sp --gelu-fusion on (2 ranks): exit $rc: $(why bf16.tp2_sp_gelu)"; status=1
else
    half_vs_cpu bf16.tp2_sp_gelu
    if [ -z "$fail" ]; then echo "[PASS] bf16 tp2 sp --gelu-fusion on (2 ranks, $took s) within bf16 of the fp32 one-process run: $figures"
    else echo "[FAIL] bf16 tp2 sp --gelu-fusion on vs the fp32 one-process run:$fail ($figures)"; status=1; fi
    fusion_pair bf16.tp2_sp_gelu bf16.tp2_sp "bf16 tp2 sp --gelu-fusion on"
fi

# 5. a bad layout (the lib's MODEL: 2 heads)
bad "--tp 3 does not divide 2 heads" 3 "--tp 3" --tp 3

# 4. LLaMA with GQA: its own one-process reference and one-rank run, in a folder of its own
d=build/t_gpu_tp/llama
mkdir -p "$d"
MODEL=(-c llama_tiny --layers 1 --heads 8 --kv-heads 4)
run cpu.a4 ./train_gpt_cpu 1 4
if [ $rc -ne 0 ]; then echo "[FAIL] train_gpt_cpu one-process run (llama): $(why cpu.a4)"; status=1
else
    fp32 one_rank "llama GQA one rank" 1 4
    fp32 tp2 "llama GQA tp2 (4 heads, 2 kv heads per rank)" 2 4 --tp 2
    fp32 tp4 "llama GQA tp4, MP 1x4 (2 heads, 1 kv head per rank)" 4 4 --tp 4
fi

# 5. Qwen's biases on q, k, v only (each rank holds its heads' slice of the fused bias), Baichuan2's NormHead (each
# rank scales its vocabulary rows of the head) and Qwen3's QK-norm (each rank normalises its own heads, so the norm
# weights' gradients are summed over tp, with sp or without): tp2 and tp2 sp against their own one-process run (the
# guards' one-rank optimizer state from --estimate-memory)
# own_reference DIR LABEL: in folder DIR, MODEL's one-process run and one rank's memory estimate (the guards' optimizer
# state); fails (with a line) when the run does
own_reference() {
    d=build/t_gpu_tp/$1
    mkdir -p "$d"
    run cpu.a4 ./train_gpt_cpu 1 4
    if [ $rc -ne 0 ]; then echo "[FAIL] train_gpt_cpu one-process run ($2): $(why cpu.a4)"; status=1; return 1; fi
    build/train_gpt_fp32_emu "${MODEL[@]}" -b 1 -t 64 -d 256 --estimate-memory 80 > "$d/fp32.one_rank.log" 2>&1 ||
        { echo "[FAIL] --estimate-memory, $2: $(tail -1 "$d/fp32.one_rank.log")"; status=1; }
    return 0
}
MODEL=(-c llama_tiny --layers 1 --heads 8 --kv-heads 4 --qkv-bias 1 --norm-head 1 --qk-norm 1)
if own_reference switches "q, k, v biases, NormHead and QK-norm"; then
    fp32 tp2 "llama with q, k, v biases, NormHead and QK-norm, tp2" 2 4 --tp 2
    fp32 tp2_sp "llama with q, k, v biases, NormHead and QK-norm, tp2 sp" 2 4 --tp 2 --sp 1
fi

# 7. ALiBi (Baichuan2-13B's positions): rank r's heads 4r .. 4r + 3 get the slopes of those heads of the model, not
# of heads 0 .. 3: tp2 against its own one-process run
MODEL=(-c llama_tiny --layers 1 --heads 8 --kv-heads 4 --pos alibi)
own_reference alibi "ALiBi" && fp32 tp2 "llama with ALiBi, tp2" 2 4 --tp 2

[ $status -eq 0 ] && rm -rf build/t_gpu_tp
exit $status
