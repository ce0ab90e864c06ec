#!/usr/bin/env bash
# train_gpt's step profile (--profile N, --ceilings FILE; llmc/profile.cuh, docs/cuda_trainer.md "Reading the profile")
# on emulated GPUs: train_gpt.cu's own main built against tests/cuda_emu, one rank and under mpirun. The emulation's
# events record host time, so what is checked is the profile's structure, not a GPU's figures
# (tests/profile_checks.py reads each table):
#   1. gpt3_tiny (2 layers, 2 micro-batches a step), one rank, --profile 2 of 4 steps: the table is printed once, for
#      steps 2-3; every class of a GPT has a row with its calls per step derived from the model (L layers, a
#      micro-batches: each linear's forward, dgrad and wgrad, attention forward and backward and the activations L a;
#      the norms (2L + 1) a each way (two a layer and the final one); the embeddings a; the LM head's three GEMMs at
#      least a; the gradient norm and AdamW once); the rows plus "unaccounted" add up to the "step" row within the
#      printed rounding, which is the mean of steps 2-3's step lines; and every kernel launch and cuBLASLt matmul of
#      the profiled steps falls inside a class (the emulation counts them: tests/cuda_emu/include/cuda_emu.h).
#      The same run without --profile prints the same losses and gradient norms (the profile only observes).
#   2. llama_tiny (RMSNorm, SwiGLU, RoPE, GQA 2:1), one rank, --profile 1: as 1, with RoPE 2L a (forward and
#      backward) and no bias anywhere.
#   3. under mpirun, 2 ranks: dp2 (the "dp grad cast" of every bucket and the "dp wait"s), tp2 with sp ("tp comm"),
#      pp2 ("pp comm"); every rank's launches inside a class (summed over the ranks).
#   4. --ceilings: the measured H100 file in bench/results gives the memory-bound classes its best copy (read from the
#      file here) and the GEMMs the best measured GEMM (no row has the tiny shapes); a file with a row of qkv's forward
#      shape (cuBLAS m = 3C, n = B T, k = C) gives that class that row's figure.
#   5. bad input, each exit 1 naming the flag or file: --profile abc, -1, or as many steps as -x (the first step is
#      never profiled); --ceilings of a missing file, of a file that is not JSON, of JSON without "gemm"; --ceilings
#      without --profile.
# OMP_NUM_THREADS=1: about a minute on 2 busy cores (the emulated build, when not built, a minute more).
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the CUDA emulation's fiber switch is x86-64 only"; exit 0; fi
d=build/t_profile
rm -rf "$d" && mkdir -p "$d"
status=0
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
source tests/mpi_needed.sh
if make -s build/train_gpt_emu > "$d/build.log" 2>&1; then echo "[PASS] train_gpt.cu's main builds against the emulation"
else echo "[FAIL] train_gpt.cu's main builds against the emulation: $(grep -m 3 error "$d/build.log")"; exit 1; fi
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
GPT=(-c gpt3_tiny --vocab 301 --layers 2 --heads 2 --kv-heads 2)
LLAMA=(-c llama_tiny --vocab 301 --layers 2 --heads 2 --kv-heads 1)
L=2
# prun NAME NP FLAGS...: a run of 64-token micro-batches on data/mobydick.txt into $d/NAME.log; sets rc
prun() {
    local name=$1 np=$2; shift 2
    local args=(-b 1 -t 64 -v 0 -g 0 -i data/mobydick.txt -j "")
    if [ "$np" = 1 ]; then timeout 300 ./build/train_gpt_emu "${args[@]}" "$@" > "$d/$name.log" 2>&1
    else EMU_NCCL_TIMEOUT=90 timeout 300 "${MPIRUN[@]}" -np "$np" ./build/train_gpt_emu "${args[@]}" "$@" > "$d/$name.log" 2>&1; fi
    rc=$?
}
# check LABEL NAME N CLASS=CALLS...: the run's exit status and its table (tests/profile_checks.py)
check() {
    local label=$1 name=$2 n=$3; shift 3
    if [ $rc -ne 0 ]; then echo "[FAIL] $label: exit $rc: $(grep -m 1 -E 'error|EMU|abort|expects' "$d/$name.log" || tail -n 1 "$d/$name.log")"; status=1; return; fi
    local out
    if out=$($PY tests/profile_checks.py "$d/$name.log" "$n" "$@" 2>&1); then echo "[PASS] $label: $out"
    else echo "[FAIL] $label: $out"; status=1; fi
}

# 1. GPT, one rank, 2 micro-batches a step
a=2
linears=()
for k in qkv attn_out fc1 fc2; do for p in fwd dgrad wgrad; do linears+=("$k $p=$((L * a))"); done; done
layer_classes=("${linears[@]}" "attention fwd=$((L * a))" "attention bwd=$((L * a))" "activation fwd=$((L * a))"
               "activation bwd=$((L * a))" "norm fwd=$(((2 * L + 1) * a))" "norm bwd=$(((2 * L + 1) * a))"
               "embedding fwd=$a" "embedding bwd=$a" "lm head fwd=*" "lm head dgrad=*" "lm head wgrad=*" "cross-entropy=*"
               "grad zero=1" "grad norm=1" "adamw=1")
prun gpt 1 "${GPT[@]}" -d 128 -x 4 --profile 2
check "gpt3_tiny, one rank, --profile 2: every class, the sum, no launch outside a class" gpt 2 "${layer_classes[@]}"
if [ $rc -eq 0 ]; then
    n_head=$(sed -n 's/^  lm head fwd *\([0-9.]*\) .*/\1/p' "$d/gpt.log")
    if ! awk -v h="$n_head" -v a=$a 'BEGIN { exit !(h >= a && h == int(h)) }'; then
        echo "[FAIL] the LM head's forward: $n_head calls per step, not a whole number of chunks of each of $a micro-batches"; status=1
    fi
fi
prun gpt_plain 1 "${GPT[@]}" -d 128 -x 4
if [ $rc -ne 0 ]; then echo "[FAIL] gpt3_tiny without --profile: exit $rc"; status=1
else
    strip() { grep '^step ' "$d/$1.log" | sed 's/| [0-9.]* ms |.*//'; }
    if [ -n "$(strip gpt)" ] && [ "$(strip gpt)" = "$(strip gpt_plain)" ]; then
        echo "[PASS] --profile changes no loss or gradient norm (4 step lines equal)"
    else echo "[FAIL] --profile changes the steps: $(diff <(strip gpt) <(strip gpt_plain) | head -3 | tr '\n' ' ')"; status=1; fi
fi

# 2. LLaMA, one rank
a=1
linears=()
for k in qkv attn_out fc1 fc2; do for p in fwd dgrad wgrad; do linears+=("$k $p=$((L * a))"); done; done
prun llama 1 "${LLAMA[@]}" -d 64 -x 2 --profile 1
check "llama_tiny, one rank, --profile 1: every class with RoPE" llama 1 "${linears[@]}" "rope=$((2 * L * a))" \
    "attention fwd=$((L * a))" "attention bwd=$((L * a))" "activation fwd=$((L * a))" "activation bwd=$((L * a))" \
    "norm fwd=$(((2 * L + 1) * a))" "norm bwd=$(((2 * L + 1) * a))" "embedding fwd=$a" "embedding bwd=$a" \
    "lm head fwd=*" "cross-entropy=*" "grad zero=1" "grad norm=1" "adamw=1"

# 3. the communication classes under mpirun
prun dp2 2 "${GPT[@]}" -d 256 -x 3 --profile 1 --dp 2
check "dp2 (2 ranks): dp grad cast, dp wait, no launch outside a class on any rank" dp2 1 "qkv fwd=$((L * 2))" \
    "dp grad cast=*" "dp wait=*" "grad zero=1" "grad norm=1" "adamw=1"
prun tp2 2 "${GPT[@]}" -d 128 -x 3 --profile 1 --tp 2 --sp 1
check "tp2 with sp (2 ranks): tp comm, no launch outside a class on any rank" tp2 1 "qkv fwd=$((L * 2))" "tp comm=*" \
    "cross-entropy=*" "lm head fwd=*"
prun pp2 2 "${GPT[@]}" -d 128 -x 3 --profile 1 --pp 2
check "pp2 (2 ranks): pp comm (rank 0: the first stage), no launch outside a class on any rank" pp2 1 \
    "qkv fwd=2" "pp comm=*" "embedding fwd=2"

# 4. --ceilings
h100=bench/results/20261127-1900_NVIDIA_H100_80GB_HBM3/ceilings.json
if [ -f "$h100" ]; then
    copy=$($PY -c 'import json,sys; print("%.1f" % max(c["gb_per_s"] for c in json.load(open(sys.argv[1]))["copy"]))' "$h100")
    gemm=$($PY -c 'import json,sys; print("%.1f" % max(g["tflops"] for g in json.load(open(sys.argv[1]))["gemm"] if g["status"] == "ok" and g["dtype"] == "bf16"))' "$h100")
    prun ceil 1 "${GPT[@]}" -d 64 -x 2 --profile 1 --ceilings "$h100"
    check "--ceilings $h100: memory-bound classes at its copy ($copy GB/s), GEMMs at its best bf16 GEMM ($gemm TFLOP/s)" \
        ceil 1 --ceiling "norm fwd=measured copy@$copy" --ceiling "adamw=measured copy@$copy" \
        --ceiling "fc1 wgrad=measured, best GEMM@$gemm" --ceiling "lm head fwd=measured, best GEMM@$gemm"
else
    echo "[SKIP] --ceilings with the measured H100 file: $h100 is not in this checkout"
fi
C=128
cat > "$d/shape.json" << EOF
{"device": "test", "copy": [{"method": "copy", "bytes": 1, "ms": 1, "gb_per_s": 1234.5}],
 "gemm": [{"name": "qkv", "dtype": "bf16", "m": $((3 * C)), "n": 64, "k": $C, "status": "ok", "tflops": 321.5},
          {"name": "big", "dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "status": "ok", "tflops": 700.5},
          {"name": "fp8", "dtype": "fp8e4m3", "m": 8192, "n": 8192, "k": 8192, "status": "failed: no algorithm"}]}
EOF
prun shape 1 "${GPT[@]}" -d 64 -x 2 --profile 1 --ceilings "$d/shape.json"
check "--ceilings with qkv's forward shape (m 3C, n BT, k C): that row for qkv fwd, the best for the others" shape 1 \
    --ceiling "qkv fwd=measured, this shape@321.5" --ceiling "qkv dgrad=measured, best GEMM@700.5" \
    --ceiling "norm bwd=measured copy@1234.5"

# 5. bad input
printf 'not json' > "$d/bad.json"
echo '{"copy": [{"gb_per_s": 1.0}]}' > "$d/nogemm.json"
# bad LABEL PATTERN FLAGS...: exit 1 and a message matching PATTERN
bad() {
    local label=$1 pattern=$2; shift 2
    timeout 60 ./build/train_gpt_emu "${GPT[@]}" -b 1 -t 64 -d 64 -v 0 -g 0 -i data/mobydick.txt -j "" "$@" > "$d/bad.log" 2>&1
    local r=$?
    if [ $r -eq 1 ] && grep -q -e "$pattern" "$d/bad.log"; then echo "[PASS] $label: exit 1, $(grep -m 1 -e "$pattern" "$d/bad.log" | cut -c1-140)"
    else echo "[FAIL] $label: exit $r, $(tail -n 1 "$d/bad.log" | cut -c1-200)"; status=1; fi
}
bad "--profile abc" "flag --profile expects an integer" -x 4 --profile abc
bad "--profile -1" "flag --profile expects an integer" -x 4 --profile -1
bad "--profile 4 of -x 4 (the first step is never profiled)" "flag --profile 4: .*-x 4" -x 4 --profile 4
bad "--ceilings of a missing file" "$d/missing.json" -x 4 --profile 1 --ceilings "$d/missing.json"
bad "--ceilings of a file that is not JSON" "--ceilings '$d/bad.json': not JSON" -x 4 --profile 1 --ceilings "$d/bad.json"
bad "--ceilings of JSON without \"gemm\"" "--ceilings '$d/nogemm.json': no \"copy\" and \"gemm\"" -x 4 --profile 1 \
    --ceilings "$d/nogemm.json"
bad "--ceilings without --profile" "flag --ceilings .* needs --profile" -x 4 --ceilings "$d/shape.json"

[ $status -eq 0 ] && rm -rf "$d"
exit $status
