#!/usr/bin/env bash
# The host-side modes of the CUDA trainer, which run without a GPU: its initial weights are bitwise
# those of train_gpt_cpu (llmc/init.h), --print-config gives JSON that train_gpt.py builds the same
# model from, the memory estimate follows the hand-derived activation sizes and shrinks with
# --recompute and is its parts plus a stated reserve, bad shapes, flags and a missing GPU stop with a clear
# message, a run without samples needs no tokenizer and a missing one stops it before any allocation, and the
# parallel init gives the same bytes for 1 and 2 threads, and --plan works on the host (section 9). About a minute
# (gpt3_125m's init, three times).
set -u
if [ ! -x ./train_gpt ]; then
    if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
        echo "[FAIL] ./train_gpt is not built: run make train_gpt"; exit 1
    fi
    echo "[SKIP] no nvcc: train_gpt cannot be built here"; exit 0
fi
[ -x ./train_gpt_cpu ] || { echo "[FAIL] ./train_gpt_cpu is not built: run make train_gpt_cpu"; exit 1; }
d=build/t_train_gpt_host
rm -rf "$d" && mkdir -p "$d"
status=0
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1: $2"; status=1; }

# 1. the same seeded init as the CPU trainer, byte for byte, for both families
for m in "gpt3_tiny" "llama_tiny --tied 1 --pos learned --bias 1"; do
    name=${m%% *}
    ./train_gpt -c $m --export-init "$d/$name.cuda.safetensors" > "$d/$name.cuda.log" 2>&1
    ./train_gpt_cpu -c $m --export-init "$d/$name.cpu.safetensors" > "$d/$name.cpu.log" 2>&1
    if cmp -s "$d/$name.cuda.safetensors" "$d/$name.cpu.safetensors"; then pass "init of $m matches train_gpt_cpu"
    else fail "init of $m matches train_gpt_cpu" "the --export-init files differ"; fi
done

# 2. --print-config: JSON that train_gpt.py reads, describing the same model (parameter count)
./train_gpt -c llama3.2_1b --print-config "$d/llama.json" > /dev/null 2>&1 || fail "--print-config" "exit status $?"
want=$(./train_gpt_cpu --help | awk '$1 == "llama3.2_1b" { print $8 }')
got=$(/usr/bin/python3 tests/print_config_params.py "$d/llama.json" 2>&1)
if [ "$got" = "$want" ]; then pass "--print-config JSON parses in train_gpt.py with the preset's $want parameters"
else fail "--print-config" "train_gpt.py read '$got', the preset table says '$want'"; fi

# 3. memory estimate: full recompute keeps one [B*T, C] bf16 tensor per layer: gpt3_125m, B=8, T=1024:
#    12 * 8*1024 * 768 * 2 bytes = 0.1406 GiB; and none > act > selective > full in total
est() { ./train_gpt -c gpt3_125m -b 8 -t 1024 --estimate-memory 80 --recompute "$1" 2>&1; }
full_layers=$(est full | sed -n 's/.*activations \([0-9.]*\) (per layer.*/\1/p')
if [ "$full_layers" = "0.14" ]; then pass "--recompute full keeps L*B*T*C bf16 (0.14 GiB)"
else fail "--recompute full activations" "printed '$full_layers' GiB, derived 0.14"; fi
t_none=$(est none | sed -n 's/.*total \([0-9.]*\) of.*/\1/p')
t_act=$(est act | sed -n 's/.*total \([0-9.]*\) of.*/\1/p')
t_sel=$(est selective | sed -n 's/.*total \([0-9.]*\) of.*/\1/p')
t_full=$(est full | sed -n 's/.*total \([0-9.]*\) of.*/\1/p')
if awk -v a="$t_none" -v x="$t_act" -v b="$t_sel" -v c="$t_full" 'BEGIN { exit !(a > x && x > b && b > c && c > 0) }'; then
    pass "memory estimate shrinks with recompute ($t_none > $t_act > $t_sel > $t_full GiB)"
else fail "memory estimate shrinks with recompute" "none $t_none, act $t_act, selective $t_sel, full $t_full"; fi
out=$(./train_gpt -c llama3_8b -b 1 -t 8192 --recompute full --estimate-memory 79 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "bf16-moments" <<< "$out" && grep -q "GiB are free" <<< "$out"; then
    pass "too little memory: llama3_8b on 79 GiB stops and names the flags"
else fail "too little memory" "rc $rc: $(tail -1 <<< "$out")"; fi

# 4. clear failures: shapes the kernels cannot take, bad flags, no GPU
expect_fail() {  # name, message fragment, command...
    local name=$1 frag=$2; shift 2
    local out rc
    out=$("$@" 2>&1); rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q -- "$frag" <<< "$out"; then pass "$name"
    else fail "$name" "rc $rc, output: $(tail -1 <<< "$out")"; fi
}
expect_fail "head dim 32 is refused" "head dim 32" ./train_gpt -c gpt3_tiny -x 1
expect_fail "T not a multiple of 64 is refused" "multiple of 64" ./train_gpt -c gpt3_tiny --heads 2 --kv-heads 2 -t 100
expect_fail "--embd not a multiple of 8 is refused" "multiple of 8" ./train_gpt -c gpt3_tiny --embd 132 --heads 2 --kv-heads 2 --head-dim 64
expect_fail "bad --recompute value" "auto, none, act, selective or full" ./train_gpt --recompute some
# --attention: its values; cudnn needs a USE_CUDNN build (this one is the default build) and a 16-bit build, wgmma a
# 16-bit build
expect_fail "bad --attention value" "flag --attention expects flash, wgmma or cudnn, got 'sdpa'" ./train_gpt --attention sdpa
expect_fail "--attention cudnn without cuDNN in the build" "this train_gpt was built without cuDNN; build it with \`make train_gpt USE_CUDNN=1\`" \
    ./train_gpt -c gpt3_tiny --attention cudnn
[ -x ./train_gpt_fp32 ] &&
    expect_fail "--attention cudnn in the fp32 build" "--attention cudnn needs a 16-bit build, bf16 or fp16 (this binary was built with PRECISION=FP32)" \
        ./train_gpt_fp32 -c gpt3_tiny --attention cudnn
[ -x ./train_gpt_fp32 ] &&
    expect_fail "--attention wgmma in the fp32 build" "--attention wgmma needs a 16-bit build, bf16 or fp16 (this binary was built with PRECISION=FP32)" \
        ./train_gpt_fp32 -c gpt3_tiny --attention wgmma
[ -x ./train_gpt_fp16 ] &&
    expect_fail "--attention cudnn in the fp16 build without cuDNN" "this train_gpt was built without cuDNN" ./train_gpt_fp16 -c gpt3_tiny --attention cudnn
# --gemm-algos: FILE read before anything else (tests/t_gemm_algos.sh has the rest)
expect_fail "--gemm-algos naming no file" "flag --gemm-algos: cannot read 'nope.txt' (expected heuristic, tune or a file a tune run wrote)" \
    ./train_gpt -c gpt3_tiny --gemm-algos nope.txt
expect_fail "bad --gelu-fusion value" "flag --gelu-fusion expects on or off, got 'yes'" ./train_gpt --gelu-fusion yes
# the memory flags of the CUDA trainer have ranges no real device passes (the plan's own, tests/t_plan.sh)
expect_fail "--estimate-memory 1e30 is refused" "flag --estimate-memory expects GiB per GPU above 0 and at most 4096, got '1e30'" \
    ./train_gpt -c gpt3_125m --estimate-memory 1e30
expect_fail "--nccl-mem 1e30 is refused" "flag --nccl-mem expects GiB per communicator in \[0, 1024\], got '1e30'" \
    ./train_gpt -c gpt3_125m --nccl-mem 1e30
expect_fail "--gpu-mem 1e30 is refused" "flag --gpu-mem expects GiB per GPU above 0 and at most 4096, got '1e30'" \
    ./train_gpt -c gpt3_125m --gpu-mem 1e30
# the kernels' 32-bit limits (llmc/gpt/options.cuh): RoPE's and the fp32 attention's threads per (token, head), INT_MAX
# / 32 = 67108863 tokens x heads (gpt3_125m, 12 heads, -t 2048: -b 2730 is 67092480, -b 2731 67117056), and --fp8's transposing cast,
# 65535 x 32 = 2097120 tokens a micro-batch (-t 2048: -b 1023 is 2095104, -b 1024 2097152). One past the limit stops
# naming -b and -t; the limit itself passes the check and reaches the memory check (80 GiB is far too little there).
expect_fail "-b 2731 -t 2048, 12 heads: past the 32-bit index per (token, head), naming -b and -t" \
    "-b 2731 x -t 2048 = 5593088 tokens x 12 heads: past the 32-bit thread index of the kernels that run per token" \
    ./train_gpt -c gpt3_125m -b 2731 -t 2048 --estimate-memory 80
expect_fail "--fp8, -b 1024 -t 2048: past the fp8 transposing cast's grid, naming -b and -t" \
    "-b 1024 x -t 2048 = 2097152 tokens with --fp8: past the fp8 transposing cast's grid" \
    ./train_gpt -c gpt3_125m -b 1024 -t 2048 --fp8 delayed --estimate-memory 80
for lim in "-b 2730 -t 2048" "-b 1023 -t 2048 --fp8 delayed"; do
    # shellcheck disable=SC2086
    out=$(./train_gpt -c gpt3_125m $lim --estimate-memory 80 2>&1); rc=$?
    if [ $rc -eq 1 ] && grep -q "GiB are free" <<< "$out" && ! grep -q "32-bit\|grid" <<< "$out"; then
        pass "$lim: at the limit, reaches the memory check"
    else fail "$lim: at the limit, reaches the memory check" "rc $rc: $(tail -1 <<< "$out")"; fi
done
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
    expect_fail "no GPU: a clear message" "no usable CUDA device" ./train_gpt -c gpt3_tiny --heads 2 --kv-heads 2 -t 64 -x 1 -o ""
fi

# 5. a run that draws no sample (-g 0) reads no tokenizer: the CPU trainer trains with a rank file that is none
#    (there and readable, as every path a flag is given must be, llmc/run/flags.h; never parsed), the CUDA trainer
#    (llama3.2_1b) goes on to its device check; a run that samples and lacks the file stops on it before
#    allocating anything (its first output line, before the CPU trainer's run table; before the CUDA trainer's
#    device check, so also on a GPU machine). A missing rank file stops -g 0 too (tests/t_paths.sh).
miss="$d/missing.tiktoken"
junk="$d/junk.tiktoken"
echo "not a rank file" > "$junk"
out=$(./train_gpt_cpu -c gpt3_tiny -b 1 -t 64 -x 1 -v 0 -o "" -g 0 --tokenizer "$junk" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "step *1/1" <<< "$out" && ! grep -q "junk.tiktoken" <<< "$out"; then
    pass "train_gpt_cpu -g 0 trains without reading the tokenizer"
else fail "train_gpt_cpu -g 0 trains without reading the tokenizer" "rc $rc: $(tail -1 <<< "$out")"; fi
out=$(./train_gpt_cpu -c gpt3_tiny -b 1 -t 64 -x 1 -v 0 -o "" -g 4 --tokenizer "$miss" 2>&1); rc=$?
if [ $rc -eq 1 ] && head -1 <<< "$out" | grep -q "missing.tiktoken"; then
    pass "train_gpt_cpu -g 4 with a missing tokenizer stops before allocating"
else fail "train_gpt_cpu -g 4 with a missing tokenizer stops before allocating" "rc $rc, first line: $(head -1 <<< "$out")"; fi
out=$(./train_gpt -c llama3.2_1b -b 1 -t 2048 -x 1 -o "" -g 4 --tokenizer "$miss" 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "missing.tiktoken" <<< "$out" && ! grep -q "device" <<< "$out"; then
    pass "train_gpt -g 4 with a missing tokenizer stops before the device and any allocation"
else fail "train_gpt -g 4 with a missing tokenizer stops before the device" "rc $rc: $(tail -1 <<< "$out")"; fi
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
    expect_fail "train_gpt -c llama3.2_1b -g 0 reads no tokenizer (reaches the device check)" "no usable CUDA device" \
        ./train_gpt -c llama3.2_1b -b 1 -t 2048 -x 1 -o "" -g 0 --tokenizer "$junk"
fi

# 6. parallel init (llmc/init.h): 1 and 2 OpenMP threads write the same bytes, and so does train_gpt's host
#    code with 2, for gpt3_125m (125M values); the time per value is printed, not judged
for run in "cpu 1 ./train_gpt_cpu" "cpu 2 ./train_gpt_cpu" "cuda 2 ./train_gpt"; do
    read -r tag n prog <<< "$run"
    OMP_NUM_THREADS=$n $prog -c gpt3_125m --export-init "$d/125m.$tag$n.safetensors" > "$d/125m.$tag$n.log" 2>&1
    echo "  $prog, OMP_NUM_THREADS=$n: $(grep -m 1 initialised "$d/125m.$tag$n.log")"
done
if cmp -s "$d/125m.cpu1.safetensors" "$d/125m.cpu2.safetensors" && cmp -s "$d/125m.cpu1.safetensors" "$d/125m.cuda2.safetensors"
then pass "init of gpt3_125m: 1 and 2 threads, both trainers, the same bytes"
else fail "init of gpt3_125m: 1 and 2 threads, both trainers, the same bytes" "the --export-init files differ"; fi
rm -f "$d"/125m.*.safetensors

# 7. the memory reserve: the estimate's total is its parts plus a reserve of at least 1.5 GiB for the CUDA
#    context and cuBLASLt (the byte line), and a budget 1 MiB below the total is refused, 1 MiB above fits
line=$(./train_gpt -c gpt3_125m -b 8 -t 1024 --estimate-memory 80 2>&1 | grep "^memory estimate (bytes)")
check=$(awk '{ for (i = 4; i < NF; i += 2) v[$i] = $(i + 1); parts = 0
              for (k in v) if (k != "reserve" && k != "total") parts += v[k]
              printf "%d %.6f %.6f", (v["total"] == parts + v["reserve"] && v["reserve"] >= 1.5 * 2^30),
                     (v["total"] - 2^20) / 2^30, (v["total"] + 2^20) / 2^30 }' <<< "$line")
read -r sum_ok below above <<< "$check"
if [ "$sum_ok" = 1 ]; then pass "memory estimate: total = sum of the parts + a reserve >= 1.5 GiB"
else fail "memory estimate: total = sum of the parts + reserve" "'$line'"; fi
out=$(./train_gpt -c gpt3_125m -b 8 -t 1024 --estimate-memory "$below" 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "GiB are free" <<< "$out"; then pass "a budget 1 MiB below the estimate ($below GiB) is refused"
else fail "a budget 1 MiB below the estimate is refused" "rc $rc: $(tail -1 <<< "$out")"; fi
out=$(./train_gpt -c gpt3_125m -b 8 -t 1024 --estimate-memory "$above" 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$(tail -1 <<< "$out")" = fits ]; then pass "a budget 1 MiB above the estimate ($above GiB) fits"
else fail "a budget 1 MiB above the estimate fits" "rc $rc: $(tail -1 <<< "$out")"; fi

# 8. the fp32 build (make train_gpt_fp32): the same host code with 4-byte floatX, and the row-wise attention's
#    looser shape rules (any T, head dims up to 128)
if [ -x ./train_gpt_fp32 ]; then
    full32=$(./train_gpt_fp32 -c gpt3_125m -b 8 -t 1024 --estimate-memory 80 --recompute full 2>&1 \
             | sed -n 's/.*activations \([0-9.]*\) (per layer.*/\1/p')
    if [ "$full32" = "0.28" ]; then pass "fp32 build: --recompute full keeps L*B*T*C fp32 (0.28 GiB, twice bf16)"
    else fail "fp32 build: --recompute full activations" "printed '$full32' GiB, derived 0.28"; fi
    ./train_gpt_fp32 -c gpt3_tiny --export-init "$d/gpt3_tiny.fp32.safetensors" > "$d/fp32.log" 2>&1
    if cmp -s "$d/gpt3_tiny.fp32.safetensors" "$d/gpt3_tiny.cpu.safetensors"; then pass "fp32 build: init matches train_gpt_cpu"
    else fail "fp32 build: init matches train_gpt_cpu" "the --export-init files differ"; fi
    expect_fail "fp32 build: head dim 256 is refused" "up to 128" ./train_gpt_fp32 -c gpt3_tiny --embd 256 --heads 1 --kv-heads 1 -t 64
    if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
        # T = 100 and head dim 32 pass its shape check and stop only for want of a GPU
        expect_fail "fp32 build: T 100, head dim 32 accepted; no GPU: a clear message" "no usable CUDA device" \
            ./train_gpt_fp32 -c gpt3_tiny -t 100 -x 1 -o ""
    fi
else
    fail "fp32 build" "./train_gpt_fp32 is not built: run make train_gpt_fp32"
fi

# 9. --plan (llmc/parallel/planner.h over train_gpt's own estimate) runs on the host: with CUDA_VISIBLE_DEVICES empty (no device
#    even on a GPU machine) it exits 0; its bytes are --estimate-memory's total for the same layout; with --gpu-mem
#    and no layout flag the planner picks a tp / pp / dp / ZeRO / sp / recompute / -b layout whose peak fits and whose
#    predicted step is the fastest (checked against 108 layouts planned by hand); explicit flags win; when nothing fits it prints the nearest layouts and exits 1 naming --gpu-mem; tensor and sequence parallel layouts
#    (FlagPerf's PP1DP4TP2 with sp, GPT-3 6.7B tp2 zero1) plan with --estimate-memory's bytes; --pp is planned per stage
#    (GPT-3 6.7B's TP2PP4 with ZeRO 1 on 8 ranks: four stage rows, stage 0's bytes --estimate-memory's for that layout).
plan() { CUDA_VISIBLE_DEVICES= ./train_gpt --plan "$@" 2>&1; }
# stage 0's bytes less the nccl column (NCCL's buffers are no allocation of the trainer's, so not in the estimate)
plan_total() { sed -n 's/^plan bytes stage 0: .* nccl \([0-9]*\) total \([0-9]*\)$/\1 \2/p' | awk '{ printf "%.0f\n", $2 - $1 }'; }
for lay in "" "--dp 4 --zero 1" "--dp 4 --zero 2 --recompute selective" "--dp 3 --zero 3 --recompute full"; do
    dp=$(sed -n 's/.*--dp \([0-9]*\).*/\1/p' <<< "$lay"); dp=${dp:-1}
    out=$(plan -c gpt3_125m -b 4 -t 1024 $lay); rc=$?
    p=$(plan_total <<< "$out")
    e=$(./train_gpt -c gpt3_125m -b 4 -t 1024 $lay --estimate-memory 80 2>&1 | sed -n 's/^memory estimate (bytes): .* total \([0-9]*\)$/\1/p')
    if [ $rc -eq 0 ] && [ -n "$p" ] && [ "$p" = "$e" ] && ! grep -qi "cuda device" <<< "$out"; then
        pass "--plan ${lay:-one rank} exits 0 without a device; its bytes are the estimate's ($p)"
    else fail "--plan ${lay:-one rank}" "rc $rc, plan total '$p', --estimate-memory total '$e': $(tail -1 <<< "$out")"; fi
done
for m in "gpt3_6.7b -t 2048 -d 2097152" "gpt3_13b -t 2048 -d 2097152" "flagperf_llama3_8b -t 8192 -d 4194304"; do
    out=$(plan --world 8 -c $m --gpu-mem 80); rc=$?
    p=$(plan_total <<< "$out")
    chosen=$(sed -n 's/^chosen: \(.*\) (the fastest.*/\1/p' <<< "$out")
    if [ $rc -eq 0 ] && [ -n "$chosen" ] && [ -n "$p" ] &&
       awk -v p="$p" 'BEGIN { exit !(p <= 80 * 2^30) }' && grep -q "^fits --gpu-mem 80" <<< "$out"; then
        pass "--plan --world 8 -c ${m%% *} --gpu-mem 80 picks '$chosen', peak $(awk -v p="$p" 'BEGIN { printf "%.2f", p / 2^30 }') GiB"
    else fail "--plan --world 8 -c ${m%% *} --gpu-mem 80" "rc $rc, chosen '$chosen', total '$p': $(tail -1 <<< "$out")"; fi
    # the chosen layout ("tp T pp P dp D zero Z [sp S] b B [recompute R]") given as flags: no planner, the same bytes
    # and the same predicted step
    flags=$(awk '{ for (i = 1; i < NF; i += 2) if ($i == "b") printf "-b %s ", $(i + 1); else printf "--%s %s ", $i, $(i + 1) }' <<< "$chosen")
    out2=$(plan --world 8 -c $m --gpu-mem 80 $flags); rc=$?
    step() { sed -n 's/^predicted step: \([^ ]*\) s.*/\1/p'; }
    if [ $rc -eq 0 ] && ! grep -q "layout planner" <<< "$out2" && [ "$(plan_total <<< "$out2")" = "$p" ] &&
       [ -n "$(step <<< "$out")" ] && [ "$(step <<< "$out2")" = "$(step <<< "$out")" ]; then
        pass "  the same layout given as flags ($flags): no planner, the same bytes and step"
    else fail "  the same layout given as flags ($flags)" "rc $rc: $(tail -1 <<< "$out2")"; fi
done
# the pick against brute force: GPT-3 13B on 8 ranks, 108 layouts planned one by one with explicit flags (tp 1/2/4,
# pp 1/2/4, ZeRO 0-2, -b 1/2, recompute none/selective): none that fits predicts a faster step than the planner's choice
# (steps as printed, 4 digits: equal within 1e-3)
out=$(plan --world 8 -c gpt3_13b -t 2048 -d 2097152 --gpu-mem 80)
best=$(step <<< "$out"); n_fit=0; faster=""
for tp in 1 2 4; do for pp in 1 2 4; do for z in 0 1 2; do for b in 1 2; do for r in none selective; do
    o=$(plan --world 8 -c gpt3_13b -t 2048 -d 2097152 --gpu-mem 80 --tp $tp --pp $pp --zero $z -b $b --recompute $r)
    grep -q "^fits --gpu-mem" <<< "$o" || continue
    n_fit=$((n_fit + 1))
    awk -v s="$(step <<< "$o")" -v b="$best" 'BEGIN { exit !(s < b * (1 - 1e-3)) }' && faster+=" tp $tp pp $pp zero $z b $b $r: $(step <<< "$o") s;"
done; done; done; done; done
if [ -n "$best" ] && [ $n_fit -gt 0 ] && [ -z "$faster" ]; then
    pass "gpt3_13b on 8 ranks: of 108 layouts planned by hand, $n_fit fit and none predicts a faster step than the pick's $best s"
else fail "the pick against brute force" "pick step '$best', $n_fit fit, faster:$faster"; fi
# layouts the kernels cannot run are not candidates: at --gpu-mem 38.5 GPT-3 13B on 8 ranks picks a tp 4 layout; with
# --ffn 20488 (= 8 x 2561: ffn / tp is no multiple of 8 for tp 2, 4, 8) no tp > 1 layout is listed or chosen
out=$(plan --world 8 -c gpt3_13b -t 2048 -d 2097152 --gpu-mem 38.5)
chosen=$(sed -n 's/^chosen: \(.*\) (the fastest.*/\1/p' <<< "$out")
out2=$(plan --world 8 -c gpt3_13b -t 2048 -d 2097152 --gpu-mem 38.5 --ffn 20488); rc=$?
if grep -q "^tp [248] " <<< "$chosen" && ! grep -qE "^ +(-> +)?tp [248] " <<< "$out2" && ! grep -q "^chosen: tp [248]" <<< "$out2"; then
    pass "--gpu-mem 38.5: gpt3_13b picks '$chosen'; with --ffn 20488 no tensor-parallel layout is a candidate (exit $rc)"
else fail "layouts the kernels cannot run" "ffn 20480 chose '$chosen'; ffn 20488: $(grep -E '^ +(-> +)?tp [248] |^chosen' <<< "$out2" | head -2)"; fi
out=$(plan --world 1 -c gpt3_13b -t 2048 -d 2097152 --gpu-mem 80); rc=$?
if [ $rc -eq 1 ] && grep -q "over the limit, smallest peak first" <<< "$out" && grep -q "recompute full" <<< "$out" &&
   grep -q "error: .*--gpu-mem 80" <<< "$out"; then pass "--plan with nothing fitting: the nearest layouts, exit 1 naming --gpu-mem"
else fail "--plan with nothing fitting" "rc $rc: $(tail -1 <<< "$out")"; fi
out=$(plan --world 8 -c gpt3_6.7b -t 2048 -d 2097152 --gpu-mem 80 --recompute full); rc=$?
if [ $rc -eq 0 ] && ! grep -q "layout planner" <<< "$out" && grep -q "recompute full" <<< "$out"; then
    pass "--recompute given: the planner keeps it (no pick)"
else fail "--recompute given: the planner keeps it" "rc $rc: $(head -3 <<< "$out")"; fi
out=$(plan --world 8 -c gpt3_6.7b --tp 2 --pp 4 --zero 1); rc=$?
rows=$(grep -cE '^ +[0-3] +2 \|' <<< "$out")  # a row per stage, 2 ranks (tp) each
p=$(plan_total <<< "$out")
e=$(./train_gpt -c gpt3_6.7b --tp 2 --pp 4 --dp 1 --zero 1 --estimate-memory 80 2>&1 |
    sed -n 's/^memory estimate (bytes): .* total \([0-9]*\)$/\1/p')
if [ $rc -eq 0 ] && [ "$rows" = 4 ] && [ -n "$p" ] && [ "$p" = "$e" ]; then
    pass "--plan --world 8 -c gpt3_6.7b --tp 2 --pp 4 --zero 1: 4 stage rows; stage 0's bytes are the estimate's ($p)"
else fail "--plan --world 8 -c gpt3_6.7b --tp 2 --pp 4 --zero 1" "rc $rc, $rows stage rows, plan total '$p', --estimate-memory total '$e': $(tail -3 <<< "$out")"; fi
# NCCL's buffers: the plan leaves --nccl-mem to each communicator a rank holds: the world's (more than one rank), and
# one per group of dp, tp, pp with more than one rank and fewer than the world (a group of every rank is the world's
# communicator), and stage 0's embedding group (first and last stage) when pp > 1 and pp < the world
for lay in "1 1 1" "8 1 1" "4 2 1" "1 2 4" "2 1 4" "1 8 1" "1 1 8"; do
    read -r dp tp pp <<< "$lay"
    W=$((dp * tp * pp))
    n=$(( (W > 1) + (dp > 1 && dp < W) + (tp > 1 && tp < W) + (pp > 1 && pp < W) + (pp > 1 && 2 < W) ))
    out=$(plan --world $W -c gpt3_6.7b -t 2048 -d $((2048 * 4 * dp)) -b 4 --dp $dp --tp $tp --pp $pp --nccl-mem 0.75); rc=$?
    got=$(sed -n 's/^plan bytes stage 0: .* nccl \([0-9]*\) total .*/\1/p' <<< "$out")
    want=$(awk -v n=$n 'BEGIN { printf "%.0f", n * 0.75 * 2^30 }')
    if [ $rc -eq 0 ] && [ "$got" = "$want" ]; then
        pass "--plan dp $dp tp $tp pp $pp --nccl-mem 0.75: stage 0 leaves NCCL $n x 0.75 GiB"
    else fail "--plan dp $dp tp $tp pp $pp --nccl-mem 0.75" "rc $rc, nccl column '$got', expected $n communicators x 0.75 GiB = $want: $(tail -1 <<< "$out")"; fi
done
out=$(./train_gpt --plan -c gpt3_tiny --nccl-mem -1 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "\-\-nccl-mem" <<< "$out"; then pass "--nccl-mem -1: exit 1 naming the flag"
else fail "--nccl-mem -1" "rc $rc: $(tail -1 <<< "$out")"; fi
for lay in "-c flagperf_llama3_8b -b 1 -t 8192 --tp 2 --dp 4 --sp 1" "-c gpt3_6.7b -b 4 -t 2048 --tp 2 --dp 4 --zero 1"; do
    out=$(plan --world 8 $lay); rc=$?
    p=$(plan_total <<< "$out")
    e=$(./train_gpt $lay --estimate-memory 80 2>&1 | sed -n 's/^memory estimate (bytes): .* total \([0-9]*\)$/\1/p')
    if [ $rc -eq 0 ] && [ -n "$p" ] && [ "$p" = "$e" ] && grep -q "dp 4 x tp 2" <<< "$out"; then
        pass "--plan --world 8 $lay: per rank $(awk -v p="$p" 'BEGIN { printf "%.2f", p / 2^30 }') GiB, the estimate's bytes"
    else fail "--plan --world 8 $lay" "rc $rc, plan total '$p', --estimate-memory total '$e': $(tail -1 <<< "$out")"; fi
done
exit $status
