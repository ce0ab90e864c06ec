#!/usr/bin/env bash
# tests/t_gpu_sprint.sh: scripts/gpu_check.sh sprint (sprint1 then sprint2; the multirank runs are sprint1's last item)
# end to end on the CPU, so that no minute of a GPU goes to plumbing. The programs are the builds against the emulation
# (--programs: train_gpt -> build/train_gpt_emu, test_gpt -> build/test_gpt_emu, build/fp8_gemm -> build/fp8_gemm_emu,
# the fp32 builds, and build/devcuda/attention_forward and attention_backward built here by
# tests/t_devcuda_build.sh --emu-build), every run shrunk (--tiny), nvidia-smi a fake that reports an H100 (as
# tests/t_gpu_kit.sh's),
# EMU_DEVICES=1 (one emulated GPU: the ranks share it as on the GPU machine, so the launch must give each its own
# NCCL_HOSTID), the states a kit of this checkout's sources holding the two tiny ones (make build/gpukit/states/made).
#   - the command exits 0 and writes 6 files (at most 8 come back from the GPU machine): sprint1.log, sprint1.md,
#     sprint1_files.tar.gz, sprint2.log, sprint2.md, sprint2_files.tar.gz; each log ends with its stage's last line
#   - sprint1.md: the environment, the three fp8_gemm rows, PyTorch's control and lt_trace.py said "not run: ..." (torch
#     has no CUDA device, so no trace to compare), test_gpt on the GPT state passes (--tiny: the rest not run),
#     and every multirank line passed: the fp32 layouts, bf16 dp2 zero3 against one rank, twice bitwise, the stall
#     ended by the emulation's timeout (EMU_NCCL_TIMEOUT: its NCCL waits inside the call, so --comm-timeout cannot fire
#     here) and --resume auto bitwise equal to the uninterrupted run; the two GELU rows (--gelu-fusion off and on) and --gemm-algos tune's
#   - the launch: mpirun with a per-rank NCCL_HOSTID (the commands in the tar)
#   - sprint2.md: both bf16 rows with tokens/s, the fp16 row (no step skipped, the scale in the note), the fp8 rows
#     and the loss rule, cuDNN's attention (test_attention
#     against the emulated cuDNN passed, a gpt3_1.3b --attention cudnn row), the --attention wgmma row and its versions'
#     note, the gpt3_2.7b row under --recompute auto and its note, torch's --compile left to its stage and SDPA "not
#     run:" (each said why), the attention
#     sweep's table (--tiny: T 128, one shape per head dim) and the attention with documents' (--docs 1,4,16: the
#     forward's three rows, the backward's nine, with ms / docs 1 and the predicted fraction; its two logs in
#     sprint2_files.tar.gz); sprint2.log: the step profile's table after each bf16 run
#   - bad input: --programs naming no directory, or one without the programs, exit 1 / a missing program, named
# About 5 minutes on 2 busy cores, most of it the multirank runs (10 launches of 2-8 emulated ranks).
set -u
cd "$(dirname "$0")/.."
unset MAKEFLAGS MFLAGS MAKELEVEL
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the CUDA emulation's fiber switch is x86-64 only"; exit 0; fi
if ! command -v mpirun > /dev/null || ! command -v mpicxx > /dev/null; then
    echo "[SKIP] the sprint's multirank runs need mpirun (apt-get install -y openmpi-bin libopenmpi-dev)"; exit 0
fi
source scripts/gpu_lib.sh
T=build/t_gpu_sprint
rm -rf "$T" && mkdir -p "$T"
fails=0
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1: $2"; fails=$((fails + 1)); }

t0=$SECONDS
progs=(train_gpt_cpu build/ckpt_convert build/train_gpt_emu build/train_gpt_fp32_emu build/train_gpt_fp16_emu build/test_gpt_emu
       build/test_gpt_fp32_emu build/fp8_gemm_emu build/gpukit/states/made)
if make -s "${progs[@]}" > "$T/make.log" 2>&1; then pass "the emulated programs and the kit's states are built ($((SECONDS - t0)) s)"
else fail "make ${progs[*]}" "$(grep -m 3 -E 'error|Error' "$T/make.log")"; echo "gpu sprint: $fails failed"; exit 1; fi

# --programs: the checkout's names for the emulated builds
P=$(pwd)/$T/programs
mkdir -p "$P/build"
ln -s "$(pwd)/build/train_gpt_emu" "$P/train_gpt"
ln -s "$(pwd)/build/train_gpt_fp32_emu" "$P/train_gpt_fp32"
ln -s "$(pwd)/build/train_gpt_fp16_emu" "$P/train_gpt_fp16"
ln -s "$(pwd)/build/test_gpt_emu" "$P/test_gpt"
ln -s "$(pwd)/build/test_gpt_fp32_emu" "$P/test_gpt_fp32"
ln -s "$(pwd)/build/fp8_gemm_emu" "$P/build/fp8_gemm"
ln -s "$(pwd)/build/ckpt_convert" "$P/build/ckpt_convert"
# cuDNN's attention: the emulated trainer is built with it (-DUSE_CUDNN), and test_attention against the emulated cuDNN
ln -s "$(pwd)/build/train_gpt_emu" "$P/build/train_gpt_cudnn"
if bash tests/cuda_emu/build.sh tests/test_attention.cu "$T/test_attention_emu" -std=c++17 -O2 -pthread -fno-strict-aliasing \
        -Wno-unknown-pragmas -I"$(pwd)" -DUSE_CUDNN > "$T/test_attention_build.log" 2>&1; then
    ln -s "$(pwd)/$T/test_attention_emu" "$P/build/test_attention"
else fail "tests/test_attention.cu builds against the emulation" "$(grep -m 3 error "$T/test_attention_build.log")"; fi
# the attention programs of dev/cuda (the sweep, the documents runs) against the emulation
mkdir -p "$P/build/devcuda"
if bash tests/t_devcuda_build.sh --emu-build "$T/devcuda_emu" attention_forward attention_backward > "$T/devcuda_build.log" 2>&1; then
    ln -s "$(pwd)/$T/devcuda_emu/attention_forward" "$P/build/devcuda/attention_forward"
    ln -s "$(pwd)/$T/devcuda_emu/attention_backward" "$P/build/devcuda/attention_backward"
else fail "dev/cuda attention programs build against the emulation" "$(grep -m 3 error "$T/devcuda_build.log")"; fi
# a kit of these sources with the two tiny states (what make gpu-kit carries of them)
K=$T/kit
mkdir -p "$K/states"
cp build/gpukit/states/gpt3_tiny_hd64.safetensors build/gpukit/states/llama_tiny_gqa_hd64.safetensors "$K/states/"
{
    echo "commit: $(git_commit)"; echo "dirty: $(git_dirty)"; echo "sources_sha256: $(kit_sources_digest)"; echo "files:"
    for f in states/gpt3_tiny_hd64.safetensors states/llama_tiny_gqa_hd64.safetensors; do
        echo "$(sha256sum "$K/$f" | cut -d' ' -f1) $(stat -c %s "$K/$f") $f"
    done
} > "$K/MANIFEST"
# an nvidia-smi that reports an H100 (tests/fakegpu; the emulated runtime reports one too)
sprint() { PATH="$(pwd)/tests/fakegpu:$PATH" EMU_DEVICES=1 OMP_NUM_THREADS=1 bash scripts/gpu_check.sh "$@"; }

# ---- bad input
sprint sprint1 --programs "$T/nothing" --out "$T/bad" > "$T/bad.txt" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "error: --programs: no directory '$T/nothing'" "$T/bad.txt" && [ ! -e "$T/bad" ] \
    && pass "--programs naming no directory: exit 1 naming it, nothing written" || fail "--programs no directory" "exit $rc: $(head -c 300 "$T/bad.txt")"
mkdir -p "$T/empty"
sprint multirank --programs "$T/empty" --tiny --out "$T/bad2" > "$T/bad2.txt" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "missing: $(pwd)/$T/empty/train_gpt (--programs)" "$T/bad2/multirank.log" \
    && pass "--programs without the programs: exit 1, the missing one named" || fail "--programs empty" "exit $rc: $(tail -n 3 "$T/bad2.txt")"

# ---- the sprint, both parts
t1=$SECONDS
sprint sprint --programs "$P" --kit "$K" --tiny --budget 1500 --out "$T/out" > "$T/stdout" 2>&1
rc=$?
took=$((SECONDS - t1))
O=$T/out
[ $rc = 0 ] && pass "gpu_check.sh sprint --programs --tiny: exit 0 after $took s" \
    || fail "gpu_check.sh sprint" "exit $rc after $took s: $(grep -A8 '^failed (' "$T/stdout" | head -n 12 | tr '\n' ' ')"
files=$(cd "$O" 2>/dev/null && ls | tr '\n' ' ')
[ "$files" = "sprint1.log sprint1.md sprint1_files.tar.gz sprint2.log sprint2.md sprint2_files.tar.gz " ] \
    && pass "6 files (at most 8 come back): $files" || fail "the files" "'$files'"
for s in sprint1 sprint2; do
    if tail -n 1 "$O/$s.log" 2>/dev/null | grep -q "^all checks of $s passed$" && grep -q "^command: scripts/gpu_check.sh sprint " "$O/$s.log" &&
       grep -q "^device:  NVIDIA H100 80GB HBM3" "$O/$s.md"; then pass "$s.log complete (headed, its last line) and $s.md headed"
    else fail "$s.log / $s.md" "last line '$(tail -n 1 "$O/$s.log" 2>/dev/null)'"; fi
done

# sprint1
m=$O/sprint1.md
grep -q '^GPU  *NVIDIA H100' "$m" && grep -q '^mpirun / mpicxx' "$m" && pass "sprint1.md: the environment table" \
    || fail "sprint1.md environment" "$(sed -n '/## environment/,/## fp8/p' "$m" | head -n 5 | tr '\n' ' ')"
n=$(grep -cE '^\| fp8_gemm .*\| exit 0 \|' "$m")
[ "$n" = 2 ] && grep -qE '^\| fp8_gemm \(torch_cublaslt\) \| not run: .*nvidia.cublas' "$m" \
    && pass "sprint1.md: fp8_gemm (default libraries, --trainer) ran; PyTorch's cuBLASLt: not run, said why" \
    || fail "sprint1.md fp8_gemm rows" "$(grep -E '^\| fp8_gemm' "$m" | tr '\n' ' ')"
if grep -qE '^\| dev/probe/fp8_torch.py \| not run: torch has no CUDA device \|' "$m" &&
   grep -qE '^\| dev/probe/lt_trace.py \| not run: a trace is missing ' "$m"; then pass "sprint1.md: PyTorch's control and lt_trace.py: not run, said why"
else fail "sprint1.md torch control rows" "$(grep -E '^\| dev/probe' "$m" | tr '\n' ' ')"; fi
nr='not run \(--tiny: test_gpt on gpt3_tiny_hd64 only\)'
n=$(grep -cE "^\| gpt3_tiny_hd64 \| [1-9][0-9]* passed, 0 failed \| $nr \| $nr \|\$" "$m")
[ "$n" = 1 ] && pass "sprint1.md: test_gpt on the kit's gpt3_tiny_hd64 (--tiny), no failure" \
    || fail "sprint1.md test_gpt rows" "$(grep -E '^\| (gpt3|llama)' "$m" | tr '\n' ' ')"
want=("fp32 one rank" "fp32 dp2 zero3 (2 ranks" "fp32 tp2 sp (2 ranks" "fp32 pp2 (2 ranks" "fp32 pp2 vpp2 (2 ranks"
      "fp32 dp4 zero2 (4 ranks" "fp32 tp2 pp2 dp2 zero1 sp (8 ranks) (8 ranks" "bf16 one rank" "bf16 dp2 zero3 ("
      "bf16.dp2_zero3 equals the one-rank run bf16.one_rank" "bf16 dp2 zero3 run twice: bitwise equal"
      "rank 1 stalled at step 3: every rank ended" "--resume auto after the stall")
missing=""
for w in "${want[@]}"; do grep -qF -- "- [PASS] $w" "$m" || missing+=" '$w'"; done
[ -z "$missing" ] && grep -q "^## multirank: 13 passed, 0 failed" "$m" && pass "sprint1.md: the 13 multirank checks passed" \
    || fail "sprint1.md multirank" "missing:$missing; $(grep -E '^## multirank|^- \[FAIL\]' "$m" | head -n 4 | tr '\n' ' ')"
grep -qE -- "- \[PASS\] rank 1 stalled .*nccl emulation: deadlock: rank 0 \(world rank 0\) waited 10 s \(EMU_NCCL_TIMEOUT\)" "$m" \
    && pass "the stall: the emulation's timeout named the rank and the operation" \
    || fail "the stall's message" "$(grep -F 'stalled' "$m" | cut -c1-300)"
n=$(grep -cE '^\| gpt3_1.3b \| -b 8 -t 2048 (--gelu-fusion (off|on)|--gemm-algos tune) \| [0-9]+ \|' "$m")
[ "$n" = 3 ] && grep -q '^GEMM algorithms (--gemm-algos tune), [1-9][0-9]* GEMMs of the first step' "$O/sprint1.log" \
    && pass "sprint1.md: gpt3_1.3b with --gelu-fusion off and on and with --gemm-algos tune, tokens/s in the three rows; the algorithms' table in sprint1.log" \
    || fail "sprint1.md GELU and GEMM-algorithm rows" "$n rows: $(grep -A5 'GELU in the epilogue' "$m" | tr '\n' ' ')"
tar -xzf "$O/sprint1_files.tar.gz" -C "$T" 2>/dev/null
c=$T/sprint1/multirank/fp32.tp2_pp2_dp2_zero1_sp.cmd
if grep -qF "NCCL_HOSTID=llmc-rank-\$OMPI_COMM_WORLD_RANK exec" "$c" 2>/dev/null && grep -q -- "-x LLMC_SHARE_GPU=1" "$c" &&
   [ -f "$T/sprint1/multirank/fp32.stall.log" ] && ! find "$T/sprint1" -name '*.safetensors' | grep -q .; then
    pass "sprint1_files.tar.gz: the run logs and commands (mpirun, one NCCL_HOSTID per rank), no checkpoints"
else fail "sprint1_files.tar.gz" "$(head -c 300 "$c" 2>/dev/null)"; fi

# sprint2
m=$O/sprint2.md
n=$(grep -cE '^\| (gpt3_1.3b|llama3.2_1b) \| -b [48] -t 2048 \| [0-9]+ \|' "$m")
[ "$n" = 4 ] && pass "sprint2.md: bf16 and fp8 delayed rows with tokens/s on both models" \
    || fail "sprint2.md rows" "$n rows: $(grep -E '^\| (gpt3|llama)' "$m" | tr '\n' ' ')"
if grep -qE '^\| gpt3_1.3b \| -b 8 -t 2048, fp16 build, loss scale from 1024 \| [0-9]+ \|' "$m" &&
   grep -qE '^- fp16 gpt3_1.3b: 0 of 3 steps skipped; last step: loss [0-9.]+ \|.*\| loss scale 1024.0$' "$m"; then
    pass "sprint2.md: gpt3_1.3b in the fp16 build, tokens/s, no step skipped, the loss scale: $(grep -m1 '^- fp16' "$m")"
else fail "sprint2.md fp16 row" "$(grep -E 'fp16' "$m" | tr '\n' ' ')"; fi
if grep -qE '^\| gpt3_1.3b \| -b 8 -t 2048 --attention cudnn \| [0-9]+ \|' "$m" &&
   grep -qE '^- test_attention on this GPU \(exit 0\): [1-9][0-9]* passed, 0 failed$' "$m" &&
   grep -q "^attention: cuDNN 91900's flash attention (--attention cudnn)" "$O/sprint2.log"; then
    pass "sprint2.md: cuDNN's attention: test_attention passed, gpt3_1.3b --attention cudnn row with tokens/s"
else fail "sprint2.md cuDNN attention" "$(grep -E 'cudnn|test_attention' "$m" | tr '\n' ' ')"; fi
grep -qE '^\| gpt3_1.3b \| -b 8 -t 2048 --attention wgmma \| [0-9]+ \|' "$m" &&
    grep -qE '^- --attention wgmma: attention: --attention wgmma: forward version [34], backward version 7 of llmc/attention.cuh$' "$m" \
    && pass "sprint2.md: gpt3_1.3b --attention wgmma row with tokens/s, the versions in a note: $(grep -m1 '^- --attention wgmma' "$m")" \
    || fail "sprint2.md --attention wgmma row" "$(grep -E 'wgmma' "$m" | tr '\n' ' ')"
grep -qE '^\| gpt3_2.7b \| -b 8 -t 2048 --gpu-mem 79 \| [0-9]+ \|' "$m" && grep -qE '^- gpt3_2.7b: ' "$m" \
    && pass "sprint2.md: gpt3_2.7b under --recompute auto, tokens/s, the mode in a note: $(grep -m1 '^- gpt3_2.7b' "$m")" \
    || fail "sprint2.md gpt3_2.7b row" "$(grep -E '2.7b' "$m" | tr '\n' ' ')"
n=$(grep -c "^profile of steps 2-3 of this run (the 2 after the first), rank 0's compute stream: per step" "$O/sprint2.log")
[ "$n" = 6 ] && ! grep -q "emulation: .* kernel launches and matmuls in the profiled steps on 1 rank, [1-9][0-9]* outside every class" "$O/sprint2.log" \
    && [ "$(grep -c "emulation: .* kernel launches and matmuls in the profiled steps on 1 rank, 0 outside every class" "$O/sprint2.log")" = 6 ] \
    && pass "sprint2: the step profile's table (SPRINT_PROFILE_FLAGS) after both bf16 runs, the --attention cudnn and wgmma runs, gpt3_2.7b's and gpt3_125m's, every launch in a class" \
    || fail "sprint2 step profile" "$n profile tables in sprint2.log"
grep -qE '^- fp8 delayed against bf16 on gpt3_125m, 4 steps: mean relative loss difference from step 2 [0-9.e-]+ ' "$m" \
    && pass "sprint2.md: FlagPerf's loss rule computed" || fail "sprint2.md loss rule" "$(grep -m1 'fp8' "$m")"
if grep -q '^- train_gpt.py --compile: not in the sprint; on an H200 at f1abce4 ours ran at 0.92' "$m" &&
   grep -q '^- SDPA in the attention sweep: not run: .* has no torch with CUDA' "$m" && ! grep -q '^- attention sweep and documents: not run' "$m"; then
    pass "sprint2.md: torch's --compile row left to its stage, SDPA not run, both said why"
else fail "sprint2.md not-run notes" "$(grep '^- ' "$m" | tr '\n' ' ')"; fi
# the attention sweep (--tiny: T 128, one shape per head dim), then with 1, 4 and 16 documents at T 256
num='[0-9]+\.[0-9]+'
nf=$(grep -cE "^\| attention_forward \| 1x128x2x2x(64|80|128) \| [34] \| 1 \| $num \|" "$m")
nb=$(grep -cE "^\| attention_backward \| 1x128x2x2x(64|80|128) \| [3-7] \| 1 \| $num \|" "$m")
grep -q '^## attention sweep (1x128x2x2x64,1x128x2x2x80,1x128x2x2x128)$' "$m" && [ "$nf" = 6 ] && [ "$nb" = 15 ] \
    && pass "sprint2.md: the attention sweep's table (forward versions 3 and 4, backward versions 3 to 7, at 3 shapes)" \
    || fail "sprint2.md attention sweep" "$nf forward, $nb backward rows: $(grep -A3 '^## attention sweep' "$m" | tr '\n' ' ')"
rows() { grep -E "^\| $1 \| 1x256x2x2x64 \| $2 \| 3 \| 1 \| $num \| $num \| $num \| $3 \| $4 \| $5 \|$" "$6" | wc -l; }
tar -xzf "$O/sprint2_files.tar.gz" -C "$T" 2>/dev/null
d=$T/sprint2/attention_docs
ok=1
for k in "1 1\.000 1\.000 1\.000" "4 $num 0\.400 0\.253" "16 $num 0\.400 0\.066"; do
    read -r n r pr vis <<< "$k"
    for w in "attention_forward" "attention_forward \(llmc\)" "attention_backward" "attention forward \+ backward"; do
        [ "$(rows "$w" "$n" "$r" "$pr" "$vis" "$m")" = 1 ] || { ok=0; echo "  sprint2.md: no single row '$w' docs $n"; }
    done
    [ "$(rows "attention_forward" "$n" "$r" "$pr" "$vis" "$d/attention_forward.log")" = 1 ] || { ok=0; echo "  $d/attention_forward.log: no docs $n row"; }
    [ "$(rows "attention_backward" "$n" "$r" "$pr" "$vis" "$d/attention_backward.log")" = 1 ] || { ok=0; echo "  $d/attention_backward.log: no docs $n row"; }
done
if [ $ok = 1 ] && grep -q '^## attention with documents (1x256x2x2x64, --docs 1,4,16; ' "$m" &&
   grep -q '^\[PASS\] attention_forward v3 B=2 T=256 H=4 KV=2 hd=128 documents ' "$d/attention_forward.log" &&
   grep -q '^\[PASS\] attention_backward v3 B=2 T=256 H=4 KV=2 hd=128 documents ' "$d/attention_backward.log" &&
   grep -qF -- "--docs 1,4,16 --skip-matrix --reps 1 --warmup 0   (limit " "$O/sprint2.log"; then
    pass "sprint2: attention with 1, 4 and 16 documents: both logs (sprint2_files.tar.gz) and sprint2.md hold every docs row, ratio and prediction"
else fail "sprint2 attention with documents" "$(grep -A4 '^## attention with documents' "$m" | tr '\n' ' ')"; fi

echo "gpu sprint: $fails failed ($((SECONDS - t0)) s)"
[ $fails -eq 0 ] && rm -rf "$T"
[ $fails -eq 0 ]
