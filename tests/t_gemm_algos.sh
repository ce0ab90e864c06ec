#!/usr/bin/env bash
# train_gpt --gemm-algos (llmc/matmul_algos.cuh) on an emulated GPU (build/train_gpt_emu), 3 steps of a tiny GPT:
#   - tune, with algorithm 0 of every GEMM made 100 ms slower (EMU_LT_SLOW_ALGOS=1, tests/cuda_emu/include/cublasLt.h):
#     the table after the first step has a row per GEMM, each "tuned" and none on algorithm 1 of 3 (the slow one);
#     OUT/gemm_algos.txt holds one line per row;
#   - that file replayed (--gemm-algos FILE): every row "file", and the losses bitwise the tuned run's (the emulated
#     algorithms compute alike: this checks the plumbing; on a GPU the replay is what makes a tuned run repeatable);
#     the file names the GPU and cuBLASLt it was timed on ("# device:"), so the replay on the same prints no note, and
#     one whose line names another GPU, or has none, trains with a note naming both;
#   - 2 ranks of a pipeline (--pp 2) tuning: the file holds every rank's GEMMs, gathered to rank 0, so the fp32 LM-head
#     weight gradient (d_type 0), which only the last stage runs, is in it; that file replayed on the 2 ranks trains,
#     every row of rank 0's table "file";
#   - the default (heuristic) prints no table;
#   - bad values: a file that is not there, a malformed line, a field out of range, a key recorded twice, an algorithm
#     this cuBLASLt refuses: exit 1 with a message naming the flag or the file (and its line), no step trained.
# About two minutes on 2 cores.
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the CUDA emulation's fiber switch is x86-64 only"; exit 0; fi
d=build/t_gemm_algos
rm -rf "$d" && mkdir -p "$d"
status=0
PY=/usr/bin/python3
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; status=1; }
if ! make -s build/train_gpt_emu > "$d/build.log" 2>&1; then
    fail "build/train_gpt_emu builds: $(grep -m 3 error "$d/build.log")"; exit 1
fi
run=(build/train_gpt_emu -c gpt3_tiny --vocab 301 --layers 2 --heads 2 --kv-heads 2 -b 1 -t 64 -d 64 -x 3 -v 0 -g 0
     -i data/mobydick.txt -j "")
# rows LOG: the table's rows (after its title and its header line)
rows() { awk '/^GEMM algorithms/ { on = 1; next } on && /^ +m +n +k / { next } on && /^ +[0-9]+ +[0-9]+ +[0-9]+ / { print; next }
              on { exit }' "$1"; }

EMU_LT_SLOW_ALGOS=1 timeout 600 "${run[@]}" -o "$d/tune" --gemm-algos tune > "$d/tune.log" 2>&1
rc=$?
n=$(rows "$d/tune.log" | wc -l)
tuned=$(rows "$d/tune.log" | grep -c ' tuned ')
slow=$(rows "$d/tune.log" | grep -c ' 1 of 3 ')
lines=$(grep -vc '^#' "$d/tune/gemm_algos.txt" 2>/dev/null)
if [ $rc = 0 ] && [ "$n" -ge 10 ] && [ "$tuned" = "$n" ] && [ "$slow" = 0 ] && [ "${lines:-0}" = "$n" ]; then
    pass "--gemm-algos tune: $n GEMMs timed, none kept on the slow algorithm 1 of 3; gemm_algos.txt holds $lines lines"
else fail "--gemm-algos tune: exit $rc, $n rows, $tuned tuned, $slow on the slow algorithm, ${lines:-no} lines written: $(grep -m1 error "$d/tune.log")"; fi

timeout 600 "${run[@]}" -o "$d/replay" --gemm-algos "$d/tune/gemm_algos.txt" > "$d/replay.log" 2>&1
rc=$?
m=$(rows "$d/replay.log" | grep -c ' file ')
same=$($PY tests/metrics_checks.py diff "$d/replay/metrics.jsonl" "$d/tune/metrics.jsonl" 1 loss 0 3 2>&1)
if [ $rc = 0 ] && [ "$n" -ge 10 ] && [ "$m" = "$n" ] && [ "$same" = 0 ]; then
    pass "--gemm-algos FILE: all $m GEMMs run the recorded algorithm; losses bitwise the tuned run's"
else fail "--gemm-algos FILE: exit $rc, $m of $n rows from the file, loss difference $same: $(grep -m1 error "$d/replay.log")"; fi
dev=$(sed -n 's/^# device: //p' "$d/tune/gemm_algos.txt")
if grep -q '^NVIDIA H100 80GB HBM3 (emulated), cuBLASLt 130000$' <<< "$dev" && ! grep -q '^note: --gemm-algos' "$d/replay.log"; then
    pass "--gemm-algos FILE: the file names its device ($dev); replayed there, no note"
else fail "--gemm-algos FILE: device line '$dev', replay notes: $(grep -m1 '^note: --gemm-algos' "$d/replay.log")"; fi
sed 's/^# device: .*/# device: NVIDIA A100-SXM4-80GB, cuBLASLt 120805/' "$d/tune/gemm_algos.txt" > "$d/other.txt"
grep -v '^# device: ' "$d/tune/gemm_algos.txt" > "$d/unnamed.txt"
for f in other unnamed; do
    out=$(timeout 600 "${run[@]}" -o "" -x 1 --gemm-algos "$d/$f.txt" 2>&1)
    rc=$?
    want="NVIDIA A100-SXM4-80GB, cuBLASLt 120805"; [ $f = unnamed ] && want="a device it does not name"
    note=$(grep -m1 '^note: --gemm-algos' <<< "$out")
    if [ $rc = 0 ] && grep -qF "was timed on $want; this run has NVIDIA H100 80GB HBM3 (emulated), cuBLASLt 130000" <<< "$note"; then
        pass "--gemm-algos FILE from $([ $f = other ] && echo 'another GPU' || echo 'no named device'): trains, with a note: $(cut -c1-140 <<< "$note")"
    else fail "--gemm-algos FILE from $f: exit $rc, note '$note'"; fi
done

source tests/mpi_needed.sh
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
EMU_LT_SLOW_ALGOS=1 timeout 600 "${MPIRUN[@]}" -np 2 "${run[@]}" -d 128 -x 1 --pp 2 -o "$d/tune_pp" --gemm-algos tune \
    > "$d/tune_pp.log" 2>&1
rc=$?
head32=$(grep -v '^#' "$d/tune_pp/gemm_algos.txt" 2>/dev/null | awk '$7 == 0' | wc -l)
n_pp=$(grep -vc '^#' "$d/tune_pp/gemm_algos.txt" 2>/dev/null)
if [ $rc = 0 ] && [ "$head32" = 1 ] && [ "${n_pp:-0}" -ge 10 ]; then
    pass "--gemm-algos tune on 2 pipeline stages: $n_pp GEMMs in the file, the last stage's fp32 LM-head weight gradient among them"
else fail "--gemm-algos tune on 2 pipeline stages: exit $rc, ${n_pp:-no} lines, $head32 with an fp32 output: $(grep -m1 error "$d/tune_pp.log")"; fi
timeout 600 "${MPIRUN[@]}" -np 2 "${run[@]}" -d 128 -x 1 --pp 2 -o "" --gemm-algos "$d/tune_pp/gemm_algos.txt" \
    > "$d/replay_pp.log" 2>&1
rc=$?
m=$(rows "$d/replay_pp.log" | grep -c ' file ')
n0=$(rows "$d/replay_pp.log" | wc -l)
if [ $rc = 0 ] && [ "$n0" -ge 1 ] && [ "$m" = "$n0" ]; then
    pass "--gemm-algos FILE on 2 pipeline stages: trains; all $m rows of rank 0's table from the file"
else fail "--gemm-algos FILE on 2 pipeline stages: exit $rc, $m of $n0 rows from the file: $(grep -m1 error "$d/replay_pp.log")"; fi

timeout 600 "${run[@]}" -o "" -x 1 > "$d/default.log" 2>&1
rc=$?
if [ $rc = 0 ] && ! grep -q '^GEMM algorithms' "$d/default.log"; then pass "--gemm-algos heuristic (the default): no table"
else fail "the default: exit $rc, $(grep -c '^GEMM algorithms' "$d/default.log") tables"; fi

# bad values: exit 1, the message, no step
t=$d/tune/gemm_algos.txt
printf '1 2 3\n' > "$d/short.txt"
{ cat "$t"; grep -v '^#' "$t" | head -n 1; } > "$d/twice.txt"
awk '!/^#/ && !done { $(NF - 7) = 7; done = 1 } { print }' "$t" > "$d/refused.txt"  # algorithm 7: EMU_LT_ALGOS is 3
awk '!/^#/ && !done { $4 = 2; done = 1 } { print }' "$t" > "$d/range.txt"              # trans_a 2
check_bad() {  # check_bad LABEL PATTERN VALUE
    local out rc
    out=$(timeout 300 "${run[@]}" -o "$d/bad" --gemm-algos "$3" 2>&1)
    rc=$?
    if [ $rc = 1 ] && grep -qF -- "$2" <<< "$out" && ! grep -q '^step ' <<< "$out" && [ ! -d "$d/bad/ckpt_00000001" ]; then
        pass "--gemm-algos $1: exit 1, no step: $(grep -m1 -F -- "$2" <<< "$out" | cut -c1-160)"
    else fail "--gemm-algos $1: exit $rc, want 1 and '$2': $(tail -n 2 <<< "$out" | tr '\n' ' ' | cut -c1-300)"; fi
}
check_bad "a file that is not there" "flag --gemm-algos: cannot read '$d/none.txt'" "$d/none.txt"
check_bad "a malformed line" "--gemm-algos $d/short.txt:1: expected 16 integers" "$d/short.txt"
check_bad "a field out of range" "--gemm-algos $d/range.txt:3: a field out of range" "$d/range.txt"
check_bad "a key recorded twice" "--gemm-algos $d/twice.txt:$(($(wc -l < "$t") + 1)): the GEMM" "$d/twice.txt"
check_bad "an algorithm cuBLASLt refuses" "--gemm-algos $d/refused.txt: cuBLASLt refuses the algorithm recorded" "$d/refused.txt"
[ $status -eq 0 ] && rm -rf "$d"
exit $status
