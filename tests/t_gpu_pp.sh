#!/usr/bin/env bash
# Pipeline parallel of the CUDA trainer on emulated GPUs (docs/design.md section 4: every layout computes what one
# process computes). train_gpt.cu's own main, built against tests/cuda_emu as in tests/t_gpu_multirank.sh (whose header
# derives the tolerances; the machinery is tests/gpu_multirank_lib.sh), runs pipeline layouts under mpirun: each stage
# keeps its layers, micro-batches pass the stages by grouped NCCL send / receive (emulated with NCCL's blocking,
# untagged sends), and each run is compared with train_gpt_cpu's one-process run of the same model and data.
#   0. the host modes: train_gpt's --export-init file equals train_gpt_cpu's byte for byte, and --print-config
#      writes the config that file's metadata holds.
#   1. gpt3_tiny with 2 layers (tied embeddings: the wte gradient is summed between the first and last stage), fp32:
#      one rank, pp2 (1F1B), pp2 dp2 zero1, pp2 dp2 zero3, and the FlagPerf PP2DP4TP1 layout (pp2 dp4, 8 ranks, one
#      micro-batch per rank): every step's loss and gradient norm and the final weights.
#   2. 4 layers of half the width (--embd 64, one head of 64): pp2 vpp2 (interleaved 1F1B), pp4 zero1 (the pipeline
#      half of GPT-3's TP2PP4 with stage 1) and pp2 with --layout 3,1 (uneven stages); the one-rank optimizer state
#      the guards compare with comes from --estimate-memory (host only).
#   3. resume across layouts: pp2's step-2 checkpoint continued at one rank, and the one-rank step-2 checkpoint
#      continued at pp2, each against the run it continues (steps 3-4, final weights and AdamW moments) and the CPU run.
#   4. bf16 build: pp2 against the fp32 CPU run (tests/t_gpu_multirank.sh's bf16 tolerances).
#   5. a bad layout: --pp 3 with 2 layers stops with exit 1 naming --pp.
#   6. validation through the pipeline (forward only): pp2's validation losses (3 batches, at steps 0 and 2) against
#      the CPU run's, within LOSS_TOL; the same run at one rank (validation without a pipeline, and sampling: -g 4
#      draws 4 tokens after the last step, which must be the CPU run's tokens, as both trainers draw them from the
#      run's RNG through llmc/run/sampling.h); pp2 asked to sample says it samples at one rank only.
#   7. llama_tiny with 2 layers, Qwen's q, k, v biases, Baichuan2's NormHead and Qwen3's QK-norm (untied LM head on
#      the last stage, RMSNorm, SwiGLU, RoPE, GQA 4:2): pp2 dp2 zero2 with --recompute full.
#   8. packed documents (--reset-position-ids, --reset-attention-mask; llama also --eod-mask-loss): llama_tiny and
#      gpt3_tiny at pp2 dp2 zero1 and gpt3_tiny at tp2 sp dp2 zero2 (fp32), gpt3_tiny at pp2 in bf16 (the flash
#      attention's document mask).
# Each line gives the largest loss, gradient-norm and weight differences, and rank 0's optimizer state against one
# rank's (rank 0 holds the first stage only: guards in the lib).
# OMP_NUM_THREADS=1, mpirun --oversubscribe: about 4 minutes on 2 busy cores.
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the CUDA emulation's fiber switch is x86-64 only"; exit 0; fi
top=build/t_gpu_pp
d=$top
rm -rf "$d" && mkdir -p "$d"
status=0
source tests/gpu_multirank_lib.sh

# the one-process reference: 4 micro-batches per step (a checkpoint every step, for the bf16 logit bound)
CKPT_EVERY=1 run cpu.a4 ./train_gpt_cpu 1 4
if [ $rc -ne 0 ]; then echo "[FAIL] train_gpt_cpu one-process run: $(why cpu.a4)"; exit 1; fi
./train_gpt_cpu "${MODEL[@]}" --export-init "$d/init.safetensors" > "$d/init.log" 2>&1 ||
    { echo "[FAIL] train_gpt_cpu --export-init: $(tail -1 "$d/init.log")"; exit 1; }
# the host modes of train_gpt (no device touched): --export-init writes train_gpt_cpu's file byte for byte, and
# --print-config the config train_gpt_cpu wrote into that file's metadata
$PY -c 'import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
print(json.loads(b[8:8 + n])["__metadata__"]["config"])' "$d/init.safetensors" > "$d/config.json" 2>&1
build/train_gpt_fp32_emu "${MODEL[@]}" --export-init "$d/init_emu.safetensors" > "$d/init_emu.log" 2>&1 &&
    build/train_gpt_fp32_emu "${MODEL[@]}" --print-config "$d/config_emu.json" >> "$d/init_emu.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && cmp -s "$d/init.safetensors" "$d/init_emu.safetensors" && [ -s "$d/config.json" ] &&
    cmp -s "$d/config.json" "$d/config_emu.json"; then
    echo "[PASS] train_gpt --export-init writes train_gpt_cpu's file byte for byte, --print-config its config"
else
    echo "[FAIL] train_gpt --export-init / --print-config (exit $rc) differ from train_gpt_cpu's: $(tail -1 "$d/init_emu.log")"; status=1
fi

fp32 one_rank "one rank" 1 4
fp32 pp2 "pp2 (1F1B)" 2 4 --pp 2
fp32 pp2_dp2_zero1 "pp2 dp2 zero1" 4 4 --pp 2 --dp 2 --zero 1
fp32 pp2_dp2_zero3 "pp2 dp2 zero3" 4 4 --pp 2 --dp 2 --zero 3
fp32 pp2_dp4 "PP2DP4TP1 (pp2 dp4)" 8 4 --pp 2 --dp 4

resume fp32.resume_pp2_at_1 "fp32: pp2's step-2 checkpoint resumed at one rank" fp32.pp2 fp32.pp2 1
resume fp32.resume_1_at_pp2 "fp32: the one-rank step-2 checkpoint resumed at pp2" fp32.one_rank fp32.one_rank 2 --pp 2

# bf16: pp2 against the fp32 CPU run
half_tolerances bf16
half_layout bf16 pp2 pp2 2 --pp 2
bad "--pp 3 with 2 layers" 3 "--pp 3" --pp 3

# validation through the pipeline: the text split 90/10 (no -j), 3 batches at steps 0 and 2; 4 sampled tokens
val=(-b 1 -t 64 -d 256 -x 2 -g 4 -i data/mobydick.txt -v 2 --val-batches 3 -o "")
./train_gpt_cpu "${MODEL[@]}" "${val[@]}" > "$d/cpu.val.log" 2>&1
vals() { sed -n 's/^step *\([0-9]*\) | val loss \([0-9.]*\)$/\1 \2/p' "$1"; }
sample() { sed -n '/^--- sample ---$/,/^--------------$/{/^--- sample ---$/d;/^--------------$/d;p;}' "$1" | od -An -tx1 |
    tr -s ' \n' ' '; }  # the sample's text as bytes
# val_check LABEL LOG RC: the run's val losses at steps 0 and 2 against the CPU run's; sets vd
val_check() {
    vd=$(paste <(vals "$d/cpu.val.log") <(vals "$2") | awk 'NF == 4 && $1 == $3 { n++; x = $2 - $4; if (x < 0) x = -x; if (x > m) m = x }
                                              END { if (n == 2) printf "%.3g", m; else print "missing" }')
    [ "$3" -eq 0 ] && [ "$vd" != missing ] && within "$vd" $LOSS_TOL
}
EMU_NCCL_TIMEOUT=90 timeout 600 "${MPIRUN[@]}" -np 2 build/train_gpt_fp32_emu "${MODEL[@]}" "${val[@]}" --pp 2 \
    > "$d/fp32.pp2_val.log" 2>&1
rc=$?
if val_check pp2 "$d/fp32.pp2_val.log" $rc && grep -q "^no sample: sampling runs on one rank" "$d/fp32.pp2_val.log"; then
    echo "[PASS] fp32 pp2 validation (forward-only schedule, 2 ranks): val losses at steps 0 and 2 within $vd of the CPU run's (tolerance $LOSS_TOL); -g asks for a one-rank run"
else
    echo "[FAIL] fp32 pp2 validation: exit $rc, largest val loss difference $vd (tolerance $LOSS_TOL): $(why fp32.pp2_val)"; status=1
fi
timeout 600 build/train_gpt_fp32_emu "${MODEL[@]}" "${val[@]}" > "$d/fp32.one_val.log" 2>&1
rc=$?
sc=$(sample "$d/cpu.val.log") s1=$(sample "$d/fp32.one_val.log")
if val_check one "$d/fp32.one_val.log" $rc && [ -n "$sc" ] && [ "$s1" = "$sc" ]; then
    echo "[PASS] fp32 one rank, validation and sampling: val losses within $vd of the CPU run's (tolerance $LOSS_TOL), the sample the CPU run's (bytes:$sc)"
else
    echo "[FAIL] fp32 one rank, validation and sampling: exit $rc, largest val loss difference $vd (tolerance $LOSS_TOL), sample '$s1' against the CPU run's '$sc': $(why fp32.one_val)"; status=1
fi

# 4 layers: interleaved 1F1B, four stages, an uneven --layout (their own CPU reference; one rank's memory estimate)
d=$top/layers4
mkdir -p "$d"
MODEL=(-c gpt3_tiny --vocab 301 --layers 4 --embd 64 --heads 1 --kv-heads 1)
run cpu.a4 ./train_gpt_cpu 1 4
if [ $rc -ne 0 ]; then echo "[FAIL] train_gpt_cpu one-process run, 4 layers: $(why cpu.a4)"; exit 1; fi
build/train_gpt_fp32_emu "${MODEL[@]}" -b 1 -t 64 -d 256 --estimate-memory 80 > "$d/fp32.one_rank.log" 2>&1 ||
    { echo "[FAIL] --estimate-memory, 4 layers: $(tail -1 "$d/fp32.one_rank.log")"; status=1; }
fp32 pp2_vpp2 "4 layers: pp2 vpp2 (interleaved 1F1B)" 2 4 --pp 2 --vpp 2
fp32 pp4_zero1 "4 layers: pp4 zero1 (TP2PP4's pipeline)" 4 4 --pp 4 --zero 1
fp32 pp2_layout "4 layers: pp2 --layout 3,1" 2 4 --pp 2 --layout 3,1

# LLaMA: an untied head on the last stage (its own CPU reference; one rank's memory estimate)
d=$top/llama
mkdir -p "$d"
MODEL=(-c llama_tiny --layers 2 --qkv-bias 1 --norm-head 1 --qk-norm 1)
run cpu.a4 ./train_gpt_cpu 1 4
if [ $rc -ne 0 ]; then echo "[FAIL] train_gpt_cpu one-process run, llama_tiny: $(why cpu.a4)"; exit 1; fi
build/train_gpt_fp32_emu "${MODEL[@]}" -b 1 -t 64 -d 256 --estimate-memory 80 > "$d/fp32.one_rank.log" 2>&1 ||
    { echo "[FAIL] --estimate-memory, llama_tiny: $(tail -1 "$d/fp32.one_rank.log")"; status=1; }
fp32 llama_pp2_dp2_zero2 "llama_tiny with q, k, v biases, NormHead, QK-norm: pp2 dp2 zero2, --recompute full" 4 4 --pp 2 --dp 2 \
    --zero 2 --recompute full

# packed documents (llmc/documents.h; each word of the text a document, the space its end): every stage marks its
# micro-batch's documents from the tokens; a backward runs after later micro-batches' forwards (1F1B), so it takes its
# own micro-batch's document starts again. LLaMA (RoPE, GQA 2:1, the loss mask) and GPT (learned positions) in fp32,
# GPT in bf16 too (the flash attention's document mask).
docs=(--eod-token 32 --reset-position-ids 1 --reset-attention-mask 1)
for m in llama gpt; do
    d=$top/docs_$m
    mkdir -p "$d"
    if [ $m = llama ]; then MODEL=(-c llama_tiny --layers 2 --heads 2 --kv-heads 1 "${docs[@]}" --eod-mask-loss 1)
    else MODEL=(-c gpt3_tiny --vocab 301 --layers 2 --heads 2 --kv-heads 2 "${docs[@]}"); fi
    CKPT_EVERY=1 run cpu.a4 ./train_gpt_cpu 1 4
    if [ $rc -ne 0 ]; then echo "[FAIL] train_gpt_cpu one-process run, $m with documents: $(why cpu.a4)"; status=1; continue; fi
    build/train_gpt_fp32_emu "${MODEL[@]}" -b 1 -t 64 -d 256 --estimate-memory 80 > "$d/fp32.one_rank.log" 2>&1 ||
        { echo "[FAIL] --estimate-memory, $m with documents: $(tail -1 "$d/fp32.one_rank.log")"; status=1; }
    fp32 docs_pp2_dp2 "$([ $m = gpt ] && echo gpt3 || echo llama)_tiny with documents: pp2 dp2 zero1" 4 4 --pp 2 --dp 2 --zero 1
    [ $m = gpt ] && fp32 docs_tp2_sp_dp2 "gpt3_tiny with documents: tp2 sp dp2 zero2" 4 4 --tp 2 --sp 1 --dp 2 --zero 2
done
d=$top/docs_gpt  # (the bf16 bounds are derived for the GPT-2 family: tests/weights_checks.py logit_bound)
MODEL=(-c gpt3_tiny --vocab 301 --layers 2 --heads 2 --kv-heads 2 "${docs[@]}")
./train_gpt_cpu "${MODEL[@]}" --export-init "$d/init.safetensors" > "$d/init.log" 2>&1
half_tolerances bf16
half_layout bf16 docs_pp2 "gpt3_tiny with documents, pp2" 2 --pp 2

[ $status -eq 0 ] && rm -rf "$top"
exit $status
