#!/usr/bin/env bash
# tests/t_gpu_kit.sh: the GPU kit (make gpu-kit, scripts/gpu_kit.sh) and the stages of
# scripts/gpu_check.sh, without a GPU.
#   - make gpu-kit succeeds; the kit and the tree that travels with it stay under 64 MiB
#   - the MANIFEST lists every file of the kit, and sha256sum and stat agree with it; its commit is HEAD, its
#     dirty flag git's, its sources digest this checkout's
#   - every program is in the kit (gunzip gives the Makefile's build output byte for byte) with sm_80, sm_90a
#     and sm_100a code; the portable train_gpt_cpu links no MPI and runs; every reference state of
#     tests/gpu_cases.sh is either in the kit or named as made on the device; the Llama 3 rank file is there
#     with its official SHA-256 (its own check: it needs the network once)
#   - every stage answers --help; every stage refuses with exit 1 and a message, writing nothing, when
#     nvidia-smi finds no GPU; a bad stage name or flag exits 1 naming it
#   - with an nvidia-smi that reports a GPU but no device to run on, a stage runs its plumbing end to end: it
#     takes train_gpt from the kit, and its log (header: date, device, commit, command) equals what it printed,
#     last line included, once the script has exited
# A few seconds when the programs are built (make test builds the kit first); without nvcc it prints [SKIP].
set -u
cd "$(dirname "$0")/.."
unset MAKEFLAGS MFLAGS MAKELEVEL  # run from `make test -jN`, a nested make would warn about the jobserver
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
    echo "[SKIP] gpu kit: nvcc not found (PATH or $CUDA_HOME/bin); nothing to check"
    exit 0
fi
source scripts/gpu_lib.sh
fails=0
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1: $2"; fails=$((fails + 1)); }
K=gpukit
T=build/t_gpu_kit
rm -rf "$T" && mkdir -p "$T"

# ---- make gpu-kit
t0=$SECONDS
if make --no-print-directory gpu-kit > "$T/make.log" 2>&1; then pass "make gpu-kit ($((SECONDS - t0)) s)"
else fail "make gpu-kit" "$(tail -n 5 "$T/make.log")"; echo "1 failed"; exit 1; fi
if grep -q "^kit: $K, .* MiB in [0-9]* files; with the tree" "$T/make.log" && grep -q "^files:$" "$T/make.log"; then
    pass "make gpu-kit prints the kit's size and manifest"
else fail "make gpu-kit output" "no size line or manifest in $T/make.log"; fi
M=$K/MANIFEST

# ---- size: the kit, and the files that travel with the tree (tracked, and untracked not ignored)
kit_b=$(find "$K" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
tree_b=$(git ls-files -z -co --exclude-standard | xargs -0 stat -c %s | awk '{ s += $1 } END { print s + 0 }')
if [ $((kit_b + tree_b)) -lt $((64 * 1048576)) ]; then
    pass "kit $((kit_b / 1048576)) MiB + tree $((tree_b / 1048576)) MiB < 64 MiB"
else fail "kit size" "kit $kit_b B + tree $tree_b B >= 64 MiB"; fi

# ---- manifest against the files
sed -n '/^files:$/,$p' "$M" | tail -n +2 > "$T/files"
awk '{ print $1 "  " $3 }' "$T/files" > "$T/sums"
if [ -s "$T/sums" ] && (cd "$K" && sha256sum --quiet -c "../$T/sums") > "$T/sha.log" 2>&1; then
    pass "manifest sha256 of $(wc -l < "$T/sums") files match (sha256sum -c)"
else fail "manifest sha256" "$(head -n 3 "$T/sha.log")"; fi
bad_size=$(while read -r sha size path; do [ "$(stat -c %s "$K/$path")" = "$size" ] || echo "$path"; done < "$T/files")
[ -z "$bad_size" ] && pass "manifest sizes match" || fail "manifest sizes" "$bad_size"
unlisted=$(cd "$K" && find . -type f ! -name MANIFEST | sed 's|^\./||' | LC_ALL=C sort | comm -23 - <(awk '{ print $3 }' "../$T/files" | LC_ALL=C sort))
[ -z "$unlisted" ] && pass "every file of the kit is in the manifest" || fail "manifest completeness" "not listed: $unlisted"
head_commit=$(git rev-parse HEAD 2>/dev/null)
[ "$(manifest_field "$M" commit)" = "$head_commit" ] && pass "manifest commit is HEAD ($head_commit)" \
    || fail "manifest commit" "'$(manifest_field "$M" commit)' is not HEAD $head_commit"
dirty=no; [ -n "$(git status --porcelain --untracked-files=no)" ] && dirty=yes
[ "$(manifest_field "$M" dirty)" = "$dirty" ] && pass "manifest dirty flag ($dirty) is git's" \
    || fail "manifest dirty flag" "'$(manifest_field "$M" dirty)', git says $dirty"
[ "$(manifest_field "$M" sources_sha256)" = "$(kit_sources_digest)" ] && pass "manifest sources digest is this checkout's" \
    || fail "manifest sources digest" "differs from kit_sources_digest"
nv=$( (command -v nvcc || echo "$CUDA_HOME/bin/nvcc") | head -n 1)
nvv=$("$nv" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
case "$(manifest_field "$M" nvcc)" in "$nvv "*) pass "manifest nvcc $nvv" ;; *) fail "manifest nvcc" "'$(manifest_field "$M" nvcc)', nvcc says $nvv" ;; esac
grep -q '^nvcc_flags: .*arch=compute_80,code=sm_80.*arch=compute_90a,code=sm_90a.*arch=compute_100a,code=sm_100a' "$M" \
    && pass "manifest build flags name sm_80, sm_90a and sm_100a" \
    || fail "manifest build flags" "$(grep '^nvcc_flags' "$M")"

# ---- contents
while IFS='|' read -r kpath cpath; do
    case "$kpath" in *.gz) ;; *) continue ;; esac
    src=$cpath
    case "$cpath" in train_gpt_cpu) src=build/gpukit/train_gpt_cpu ;; build/ckpt_convert) src=build/gpukit/ckpt_convert ;; esac
    if [ ! -f "$K/$kpath" ]; then
        if [ "$kpath" = probe/nccl_ranks.gz ] && grep -q '^missing: build/nccl_ranks (this build found no NCCL)' "$M"; then
            echo "[SKIP] $kpath: this build found no NCCL (the manifest says so; the stage builds it on the device)"
        elif grep -qF "missing: $cpath (this build found no cuDNN)" "$M"; then
            echo "[SKIP] $kpath: this build found no cuDNN (the manifest says so; sprint2 then notes cuDNN's attention as not run)"
        else fail "kit $kpath" "missing"; fi
        continue
    fi
    if gunzip -c "$K/$kpath" | cmp -s - "$src"; then pass "kit $kpath is $src"
    else fail "kit $kpath" "gunzip differs from $src"; fi
done < <(kit_placements)
gunzip -c "$K/bin/train_gpt.gz" > "$T/train_gpt" && gunzip -c "$K/bin/train_gpt_cpu.gz" > "$T/train_gpt_cpu"
chmod +x "$T/train_gpt" "$T/train_gpt_cpu"
archs=$(bash scripts/fatbin_archs.sh "$T/train_gpt" | tr '\n' ' ')
[ "$archs" = "sm_100a sm_80 sm_90a " ] && pass "kit's train_gpt holds sm_80, sm_90a and sm_100a code" \
    || fail "kit's train_gpt architectures" "'$archs'"
if ldd "$T/train_gpt_cpu" | grep -qi mpi; then fail "kit's train_gpt_cpu" "links MPI: $(ldd "$T/train_gpt_cpu" | grep -i mpi)"
elif "$T/train_gpt_cpu" --help 2>&1 | grep -q gpt3_125m; then pass "kit's train_gpt_cpu links no MPI and runs (--help)"
else fail "kit's train_gpt_cpu --help" "$("$T/train_gpt_cpu" --help 2>&1 | tail -n 2)"; fi
source tests/gpu_cases.sh
on_device=" $(manifest_field "$M" states_on_device) "
nstates=0
for c in "${gpu_cases[@]}"; do
    name=${c%%|*}
    if [ -f "$K/states/$name.safetensors" ]; then nstates=$((nstates + 1))
    else case "$on_device" in *" $name "*) ;; *) fail "kit state $name" "neither in $K/states nor in states_on_device" ;; esac; fi
done
[ $nstates -gt 0 ] && pass "kit holds $nstates reference states; made on the device:$on_device" || fail "kit states" "none"
llama_sha=$(sed -n 's/^sha_llama3=//p' dev/data/fetch_tokenizers.sh)
if [ -f "$K/data/tokenizers/llama3.tiktoken" ] && [ "$(sha256sum "$K/data/tokenizers/llama3.tiktoken" | cut -d' ' -f1)" = "$llama_sha" ]; then
    pass "kit holds data/tokenizers/llama3.tiktoken with its official SHA-256"
else fail "kit llama3.tiktoken" "$(grep '^missing: data/tokenizers/llama3' "$M" || echo "absent or wrong SHA-256")"; fi

# ---- the stages' command line
stages=$(bash scripts/gpu_check.sh --help | awk '/^  stages \(/ { on = 1; next } on && /^    [a-z]/ { print $1 } /^  --out/ { exit }')
[ "$(echo $stages)" = "sprint1 sprint2 sprint probe correct kernels bench-small bench-large torch-small torch-large fp8 multirank all" ] \
    && pass "gpu_check.sh --help lists the stages" || fail "gpu_check.sh --help" "stages listed: $(echo $stages)"
# an nvidia-smi that finds no GPU, as the real one says it (exit 6); the real GPU hidden as well
mkdir -p "$T/nogpu"
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' > "$T/nogpu/nvidia-smi"
chmod +x "$T/nogpu/nvidia-smi"
for s in $stages; do
    if bash scripts/gpu_check.sh "$s" --help > "$T/help.txt" 2>&1 && grep -q "usage: scripts/gpu_check.sh" "$T/help.txt"; then
        pass "gpu_check.sh $s --help"
    else fail "gpu_check.sh $s --help" "$(head -n 2 "$T/help.txt")"; fi
    PATH="$(pwd)/$T/nogpu:$PATH" CUDA_VISIBLE_DEVICES="" bash scripts/gpu_check.sh "$s" --out "$T/out_$s" > "$T/o.txt" 2> "$T/e.txt"
    rc=$?
    if [ $rc = 1 ] && grep -q "error: stage '$s' needs a GPU and nvidia-smi finds none" "$T/e.txt" && [ ! -e "$T/out_$s" ]; then
        pass "gpu_check.sh $s without a GPU: exit 1, a message, nothing written"
    else fail "gpu_check.sh $s without a GPU" "exit $rc, stderr '$(head -c 200 "$T/e.txt")', out dir $([ -e "$T/out_$s" ] && echo made || echo absent)"; fi
done
PATH="$(pwd)/$T/nogpu:$PATH" bash scripts/gpu_probe.sh > /dev/null 2> "$T/e.txt"
[ $? = 1 ] && grep -q "needs a GPU" "$T/e.txt" && pass "gpu_probe.sh without a GPU: exit 1, a message" || fail "gpu_probe.sh without a GPU" "$(cat "$T/e.txt")"
expect_error() {  # expect_error NAME PATTERN ARGS...: exit 1 and PATTERN on stderr
    local name=$1 pat=$2 rc; shift 2
    bash scripts/gpu_check.sh "$@" > /dev/null 2> "$T/e.txt"; rc=$?
    [ $rc = 1 ] && grep -q -- "$pat" "$T/e.txt" && pass "$name" || fail "$name" "exit $rc, stderr '$(cat "$T/e.txt")'"
}
expect_error "bad stage name: exit 1 naming it" "unknown stage 'benchmark'" benchmark
expect_error "bad flag: exit 1 naming it" "unknown flag '--fast'" probe --fast
expect_error "flag without its value: exit 1" "--out needs a directory" probe --out
expect_error "bad --steps: exit 1" "--steps expects a positive integer, got 'x'" bench-small --steps x
expect_error "two stages: exit 1" "one stage at a time" probe correct
expect_error "bad --budget: exit 1" "--budget expects seconds (at least 60), got '10'" correct --budget 10

# ---- the plumbing of one stage, with an nvidia-smi that reports an H100 (tests/fakegpu) and no device visible to CUDA
PATH="$(pwd)/tests/fakegpu:$PATH" CUDA_VISIBLE_DEVICES="" bash scripts/gpu_check.sh bench-small --steps 2 --out "$T/stage" > "$T/stage.stdout" 2>&1
rc=$?
log=$T/stage/bench-small.log
if [ $rc = 1 ] && [ -f "$log" ] && cmp -s "$log" "$T/stage.stdout" && tail -n 1 "$log" | grep -q "^  train_gpt llama3.2_1b$"; then
    pass "bench-small with no usable device: exit 1, its log complete at exit (equal to what it printed, up to the last failure)"
else fail "bench-small plumbing" "exit $rc; log $(wc -l < "$log" 2>/dev/null) lines, printed $(wc -l < "$T/stage.stdout") lines, last: $(tail -n 1 "$log" 2>/dev/null)"; fi
hdr_ok=1
for k in "date:    20" "device:  NVIDIA H100 80GB HBM3" "commit:  $head_commit" "command: scripts/gpu_check.sh bench-small --steps 2 --out $T/stage"; do
    grep -q "^$k" "$log" 2>/dev/null || { hdr_ok=0; fail "bench-small log header" "no line '$k'"; }
done
[ $hdr_ok = 1 ] && pass "bench-small log header: date, device, commit, command"
grep -q "^  train_gpt: from the kit$" "$log" 2>/dev/null && pass "bench-small takes train_gpt from the kit" \
    || fail "bench-small kit use" "$(grep -E '^  (train_gpt|building|missing)' "$log" 2>/dev/null | head -n 3)"
rows=$(grep -cE '^\| (gpt3_125m|gpt3_1.3b|llama3.2_1b) \|' "$T/stage/bench-small.md" 2>/dev/null)
[ "$rows" = 3 ] && pass "bench-small table has its 3 presets" || fail "bench-small table" "$rows preset rows"
[ "$(sed -n '2,8p' "$T/stage/bench-small.md" 2>/dev/null)" = "$(sed -n '2,8p' "$log")" ] \
    && pass "bench-small table headed as its log (date, device, commit, command)" \
    || fail "bench-small table header" "$(head -n 3 "$T/stage/bench-small.md" 2>/dev/null)"
nfiles=$(find "$T/stage" -type f | wc -l)
[ "$nfiles" = 2 ] && pass "bench-small writes 2 files (log, table)" || fail "bench-small files" "$nfiles: $(ls "$T/stage")"

# a kit built from other sources: its programs are not used, make builds (here: finds up to date) train_gpt
cp -r "$K" "$T/stale"
sed -i 's/^sources_sha256: .*/sources_sha256: 0000/' "$T/stale/MANIFEST"
PATH="$(pwd)/tests/fakegpu:$PATH" CUDA_VISIBLE_DEVICES="" bash scripts/gpu_check.sh bench-small --steps 1 --kit "$T/stale" \
    --out "$T/stage_stale" > /dev/null 2>&1
log=$T/stage_stale/bench-small.log
if grep -q "^kit:     $T/stale: programs and states not used: built from other sources" "$log" 2>/dev/null \
    && grep -q "^  building with make -j[0-9]*: train_gpt$" "$log" && ! grep -q "from the kit" "$log"; then
    pass "a kit of other sources is not used: make builds train_gpt"
else fail "stale kit" "$(grep -E '^kit:|^  (building|train_gpt)' "$log" 2>/dev/null | head -n 3)"; fi
# a kit program that does not resolve its libraries here (ldd -r) is left out and built with make
rm -rf "$T/unres" && cp -r "$K" "$T/unres"
printf 'int kit_test_f(void) { return 0; }\n' > "$T/l.c"
printf 'int kit_test_f(void);\nint main(void) { return kit_test_f(); }\n' > "$T/m.c"
if gcc -shared -fPIC "$T/l.c" -o "$T/libkittest.so" && gcc "$T/m.c" -L"$T" -lkittest -o "$T/m"; then
    rm -f "$T/libkittest.so"
    gzip -9 -n -c "$T/m" > "$T/unres/bin/train_gpt.gz"
    sha=$(sha256sum "$T/unres/bin/train_gpt.gz" | cut -d' ' -f1); size=$(stat -c %s "$T/unres/bin/train_gpt.gz")
    sed -i "s|^[0-9a-f]* [0-9]* bin/train_gpt.gz\$|$sha $size bin/train_gpt.gz|" "$T/unres/MANIFEST"
    PATH="$(pwd)/tests/fakegpu:$PATH" CUDA_VISIBLE_DEVICES="" bash scripts/gpu_check.sh bench-small --steps 1 --kit "$T/unres" \
        --out "$T/stage_unres" > /dev/null 2>&1
    log=$T/stage_unres/bench-small.log
    if grep -q "^  train_gpt.kit does not resolve here: .*libkittest.so => not found" "$log" 2>/dev/null \
        && grep -q "^  building with make -j[0-9]*: train_gpt$" "$log" && cmp -s train_gpt "$T/train_gpt"; then
        pass "a kit program whose libraries do not resolve (ldd -r) is built with make instead"
    else fail "unresolved kit program" "$(grep -E 'resolve|building|from the kit' "$log" 2>/dev/null | head -n 3)"; fi
else fail "unresolved kit program" "gcc could not build the test program"; fi

echo "gpu kit: $fails failed"
[ $fails -eq 0 ]
