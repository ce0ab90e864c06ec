#!/usr/bin/env bash
# The CUDA trainer's streams run as on a GPU: train_gpt.cu's main built in the emulation's stream mode
# (build/train_gpt_streams_emu; tests/cuda_emu/include/cuda_emu_streams.h): every kernel, copy, cuBLASLt product and
# NCCL operation queued on its stream and run in a seeded random order that respects only stream order, events and
# synchronisations, with a happens-before checker on every load and store. Each multi-rank layout of the emulated
# tests (tests/t_gpu_multirank.sh, t_gpu_tp.sh, t_gpu_pp.sh, t_gpu_layouts.sh, t_fp8_train.sh) runs 2 steps under
# mpirun, in the stream mode at one seed (seeds 1, 2 and 3 in turn over the layouts; the first two at two), and must:
#   - finish (exit 0) with no report of the checker ("EMU STREAM RACE") and no other emulation error;
#   - really reorder: some operations run before work queued earlier on another stream (EMU_STREAM_STATS's count);
#   - compute bit for bit what the default build computes, where everything runs when called: the same loss and
#     gradient norm at every step (metrics.jsonl) and byte-identical checkpoint shards at step 2. A missing
#     ordering edge shows as a report of the checker, and where the drawn order runs the two sides the wrong way
#     round, as different numbers.
# The emulated NCCL also compares each communicator's sequence of collectives across its ranks when the run ends
# (tests/cuda_emu/include/nccl.h), so every run here and in the other emulated tests holds them consistent.
# Models: heads of 64 (the bf16 attention's head dims); GPT-3 shape for the dp, tp, pp and mixed layouts, a wider one
# for tp8 (2 layers) and, at half its width (4 heads), dp2 tp4 pp4; LLaMA with GQA for its layouts.
# OMP_NUM_THREADS=1, mpirun --oversubscribe.
# A shorter run (scripts/mutation_bench.py): STREAMS_LAYOUTS, names (comma-separated) of the layouts to run;
# STREAMS_SEEDS (the seeds of every layout, instead of the turns above); STREAMS_COMPARE=0 runs the stream mode only
# (the checker's verdict, no comparison).
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the CUDA emulation's fiber switch is x86-64 only"; exit 0; fi
d=build/t_streams
rm -rf "$d" && mkdir -p "$d"
status=0
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
source tests/mpi_needed.sh
compare=${STREAMS_COMPARE:-1}
programs=(build/train_gpt_streams_emu)
[ "$compare" = 1 ] && programs=(build/train_gpt_emu build/train_gpt_streams_emu)
for t in "${programs[@]}"; do
    if make -s "$t" > "$d/build.log" 2>&1; then echo "[PASS] $t builds"
    else echo "[FAIL] $t builds: $(grep -m 3 error "$d/build.log")"; exit 1; fi
done
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
GPT=(-c gpt3_tiny --vocab 301 --layers 4 --embd 128 --heads 2 --kv-heads 2)
WIDE=(-c gpt3_tiny --vocab 301 --layers 4 --embd 512 --heads 8 --kv-heads 8 --ffn 512)
LLAMA=(-c llama_tiny --layers 4 --embd 256 --heads 4 --kv-heads 2 --ffn 256)

# job NAME PROGRAM NP ACCUM MODEL-VAR FLAGS...: 2 steps of ACCUM micro-batches of 64 tokens, a checkpoint at step 2
job() {
    local name=$1 prog=$2 np=$3 accum=$4 model=$5; shift 5
    local -n m=$model
    EMU_NCCL_TIMEOUT=120 timeout 900 "${MPIRUN[@]}" -np "$np" "$prog" "${m[@]}" -b 1 -t 64 -d $((accum * 64)) -x 2 -v 0 \
        -g 0 -i data/mobydick.txt -j "" -n 2 --keep 9 -o "$d/$name" "$@" > "$d/$name.log" 2>&1
}
# same A B: B computed what A computed (every step's loss and norm; the step-2 shards byte for byte)
same() {
    local a=$d/$1 b=$d/$2 f
    $PY - "$a/metrics.jsonl" "$b/metrics.jsonl" <<'EOF' || return 1
import json, sys
def steps(p):
    return [(r["step"], r["loss"], r.get("grad_norm")) for r in map(json.loads, open(p)) if "loss" in r and "step" in r]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
if not a or a != b:
    print(f"metrics differ: {a} vs {b}"); sys.exit(1)
EOF
    for f in "$a"/ckpt_00000002/shard_*.bin; do
        [ -f "$f" ] || { echo "no shards in $a/ckpt_00000002"; return 1; }
        cmp -s "$f" "$b/ckpt_00000002/$(basename "$f")" || { echo "$(basename "$f") differs"; return 1; }
    done
}
# layout NAME LABEL NP ACCUM MODEL-VAR FLAGS...: the default build, then the stream mode at the layout's seeds
n_layouts=0
layout() {
    local name=$1 label=$2 np=$3 accum=$4 model=$5; shift 5
    if [ -n "${STREAMS_LAYOUTS:-}" ] && [[ ",$STREAMS_LAYOUTS," != *",$name,"* ]]; then return; fi
    local t0=$SECONDS
    if [ "$compare" = 1 ] && ! job "$name.default" build/train_gpt_emu "$np" "$accum" "$model" "$@"; then
        echo "[FAIL] $label: the default build's run: $(grep -m 1 -E 'error|EMU' "$d/$name.default.log")"; status=1; return
    fi
    local seed out seeds=$((n_layouts % 3 + 1)) ran ahead
    [ $n_layouts -lt 2 ] && seeds="$seeds $((seeds + 3))"
    n_layouts=$((n_layouts + 1))
    for seed in ${STREAMS_SEEDS:-$seeds}; do
        if ! EMU_STREAM_STATS=1 EMU_STREAM_SEED=$seed job "$name.s$seed" build/train_gpt_streams_emu "$np" "$accum" "$model" "$@"; then
            echo "[FAIL] $label, stream mode seed $seed: the run failed: $(grep -m 1 -E 'RACE|EMU|error|deadlock' "$d/$name.s$seed.log")"
            status=1; continue
        fi
        if grep -q -E 'EMU' "$d/$name.s$seed.log"; then
            echo "[FAIL] $label, stream mode seed $seed: $(grep -m 1 'EMU' "$d/$name.s$seed.log")"; status=1; continue
        fi
        read -r ran ahead < <(awk '/^stream mode: / { r += $3; a += $9 } END { print r + 0, a + 0 }' "$d/$name.s$seed.log")
        if [ "$ahead" -eq 0 ]; then
            echo "[FAIL] $label, stream mode seed $seed: no operation ran before earlier-queued work of another stream ($ran run)"
            status=1; continue
        fi
        if [ "$compare" = 1 ] && ! out=$(same "$name.default" "$name.s$seed"); then
            echo "[FAIL] $label, stream mode seed $seed: not what the default build computes: $out"; status=1; continue
        fi
        if [ "$compare" = 1 ]; then
            echo "[PASS] $label, stream mode seed $seed: $ahead of $ran operations ran ahead of earlier-queued work, no unordered accesses; loss, norm and step-2 shards bitwise the default build's ($((SECONDS - t0)) s)"
        else echo "[PASS] $label, stream mode seed $seed: $ahead of $ran operations ran ahead, no unordered accesses ($((SECONDS - t0)) s)"; fi
    done
}

# t_gpu_multirank.sh's data-parallel layouts
layout dp2 "dp2" 2 4 GPT --dp 2
layout dp2_zero1 "dp2 zero1" 2 4 GPT --dp 2 --zero 1
layout dp4_zero2 "dp4 zero2" 4 4 GPT --dp 4 --zero 2
layout dp2_zero3 "dp2 zero3" 2 4 GPT --dp 2 --zero 3
layout dp3_zero3 "dp3 zero3, uneven shards" 3 6 GPT --dp 3 --zero 3
# t_gpu_tp.sh
layout tp2 "tp2" 2 4 GPT --tp 2
layout tp2_sp "tp2 sp" 2 4 GPT --tp 2 --sp 1
layout tp2_dp2_zero1_sp "tp2 dp2 zero1 sp" 4 4 GPT --tp 2 --dp 2 --zero 1 --sp 1
layout tp2_dp2_zero3 "tp2 dp2 zero3" 4 4 GPT --tp 2 --dp 2 --zero 3
layout tp2_dp4_sp "PP1DP4TP2 with sp" 8 4 GPT --tp 2 --dp 4 --sp 1
layout llama_tp2 "llama GQA tp2" 2 4 LLAMA --tp 2
# t_gpu_pp.sh
layout pp2 "pp2 (1F1B)" 2 4 GPT --pp 2
layout pp2_dp2_zero1 "pp2 dp2 zero1" 4 4 GPT --pp 2 --dp 2 --zero 1
layout pp2_dp2_zero3 "pp2 dp2 zero3" 4 4 GPT --pp 2 --dp 2 --zero 3
layout pp2_dp4 "PP2DP4TP1" 8 4 GPT --pp 2 --dp 4
layout pp2_vpp2 "pp2 vpp2 (interleaved 1F1B)" 2 4 GPT --pp 2 --vpp 2
layout pp4_zero1 "pp4 zero1" 4 4 GPT --pp 4 --zero 1
layout pp2_layout "pp2 --layout 3,1" 2 4 GPT --pp 2 --layout 3,1
layout llama_pp2_dp2_zero2 "llama GQA pp2 dp2 zero2 --recompute full" 4 4 LLAMA --pp 2 --dp 2 --zero 2 --recompute full
# t_gpu_layouts.sh
layout tp2_pp2_dp2_zero1_sp "tp2 pp2 dp2 zero1 sp" 8 4 GPT --tp 2 --pp 2 --dp 2 --zero 1 --sp 1
layout tp2_pp4_zero1 "TP2PP4 zero1" 8 4 GPT --tp 2 --pp 4 --zero 1
layout tp2_pp2_vpp2_sp "tp2 pp2 vpp2 sp" 4 4 GPT --tp 2 --pp 2 --vpp 2 --sp 1
layout tp8 "MP 1x8x1 (tp8)" 8 4 WIDE --tp 8 --layers 2
layout dp2_tp4_pp4 "2D_PP 2x4x4 (32 ranks)" 32 4 WIDE --dp 2 --tp 4 --pp 4 --embd 256 --heads 4 --kv-heads 4 --ffn 256
layout llama_dp8_zero2 "llama GQA dp8 zero2" 8 8 LLAMA --dp 8 --zero 2
layout llama_tp2_dp4_sp "llama GQA PP1DP4TP2 with sp" 8 8 LLAMA --tp 2 --dp 4 --sp 1
# t_fp8_train.sh's layouts
layout fp8_tp2_sp "fp8 delayed tp2 sp" 2 4 GPT --fp8 delayed --fp8-history 3 --tp 2 --sp 1
layout fp8_dp2_zero3 "fp8 delayed dp2 zero3" 2 4 GPT --fp8 delayed --fp8-history 3 --dp 2 --zero 3
layout fp8_pp2 "fp8 delayed pp2" 2 4 GPT --fp8 delayed --fp8-history 3 --pp 2
layout fp8_cur_tp2 "fp8 current tp2" 2 4 GPT --fp8 current --tp 2

[ $status -eq 0 ] && rm -rf "$d"
exit $status
