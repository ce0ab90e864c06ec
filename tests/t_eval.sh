#!/usr/bin/env bash
# tests/t_eval.sh: multiple-choice evaluation in the loop (--eval, llmc/run/mc_eval.h) and validation split over the
# data-parallel ranks, on tests/data/mc_small.jsonl (7 hand-made examples of 3 or 4 endings, scored as bytes by
# llama_tiny: vocabulary 256, the bytes tokenizer of a .txt run). Checks:
#   1. PyTorch: every ending's summed loss of train_gpt_cpu at step 0 (the initial weights) against train_gpt.py
#      --mc-eval on the same weights (one unpadded forward per ending), relative 1e-5 (t_reference's logit
#      tolerance); the run's logged acc and acc_norm equal PyTorch's.
#   2. llm.c's eval file: the same tokens written by train_gpt.py as llm.c's .bin give scores identical to the jsonl's
#      at every evaluation.
#   3. layouts of the CPU trainer: dp2, tp2, pp2 and dp2 ZeRO 3, each ending's score at steps 0, 1 and 2 within
#      relative 1e-5 of one process and the accuracies equal; the validation losses (split over dp now) within 1e-5.
#   4. the CUDA trainer emulated on the CPU (fp32 build) against the CPU trainer: one rank, dp2, tp2 and pp2, scores
#      within relative 1e-4 (the fp32 build's logit tolerance), accuracies equal; the layouts' validation losses within
#      1e-5.
#   5. the log: metrics.jsonl's eval lines, summary.json's eval_acc and eval_acc_norm, the step line.
#   6. bad input: exit 1 with a message naming the file and the line (or example) for every class of fault.
# OMP_NUM_THREADS=1, mpirun --oversubscribe: about 5 minutes on 2 busy cores.
set -u
d=build/t_eval
rm -rf "$d" && mkdir -p "$d"
status=0
export OMP_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe --allow-run-as-root)
EV=tests/data/mc_small.jsonl
RUN=(-c llama_tiny -i data/mobydick.txt -b 2 -t 64 -d 256 -x 2 -v 1 --val-batches 5 -g 0 --eval "$EV")
check() { /usr/bin/python3 tests/eval_checks.py "$@"; }
val_within() {  # RUN REF TOL: the worst |val_loss difference| of two runs' metrics.jsonl, and whether it is within TOL
    local l
    l=$(/usr/bin/python3 tests/metrics_checks.py diff "$d/$1/metrics.jsonl" "$d/$2/metrics.jsonl" 0 val_loss 0 1000000000)
    echo "$l"
    /usr/bin/python3 tests/metrics_checks.py within "$l" "$3"
}
pass_fail() {  # NAME CMD...: [PASS] NAME: its output, or [FAIL]
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then echo "[PASS] $name: $out"; else echo "[FAIL] $name: $out"; status=1; fi
}

# 1. against PyTorch at the initial weights
./train_gpt_cpu -c llama_tiny --export-init "$d/init.safetensors" > "$d/init.log" 2>&1 ||
    { echo "[FAIL] train_gpt_cpu --export-init: $(tail -1 "$d/init.log")"; exit 1; }
/usr/bin/python3 train_gpt.py --mc-eval "$d/init.safetensors" --eval "$EV" --eval-bin "$d/mc_small.bin" > "$d/py.jsonl" 2> "$d/py.log" ||
    { echo "[FAIL] train_gpt.py --mc-eval: $(tail -1 "$d/py.log")"; exit 1; }
./train_gpt_cpu "${RUN[@]}" -o "$d/one" --eval-scores "$d/one.scores" > "$d/one.log" 2>&1 ||
    { echo "[FAIL] train_gpt_cpu --eval: $(grep -m1 error "$d/one.log")"; exit 1; }
pass_fail "train_gpt_cpu's ending scores at step 0 against PyTorch's (relative 1e-5), acc and acc_norm equal" \
    check pytorch "$d/one.scores" "$d/py.jsonl" 1e-5 "$d/one/metrics.jsonl"

# 2. llm.c's binary eval file
./train_gpt_cpu "${RUN[@]/$EV/$d/mc_small.bin}" -o "" --eval-scores "$d/bin.scores" > "$d/bin.log" 2>&1
pass_fail "llm.c's eval .bin of the same tokens: scores identical to the jsonl's" check same "$d/bin.scores" "$d/one.scores" 0 3

# 3. layouts of the CPU trainer
for c in "dp2|2|--dp 2" "tp2|2|--tp 2" "pp2|2|--pp 2" "dp2_zero3|2|--dp 2 --zero 3"; do
    IFS='|' read -r name np flags <<< "$c"
    # shellcheck disable=SC2086
    timeout 300 "${MPIRUN[@]}" -np "$np" ./train_gpt_cpu "${RUN[@]}" $flags -o "$d/$name" --eval-scores "$d/$name.scores" \
        > "$d/$name.log" 2>&1 || { echo "[FAIL] train_gpt_cpu $name: $(grep -m1 error "$d/$name.log")"; status=1; continue; }
    pass_fail "train_gpt_cpu $name: ending scores at steps 0, 1, 2 within 1e-5 of one process, accuracies equal" \
        check same "$d/$name.scores" "$d/one.scores" 1e-5 3
    pass_fail "train_gpt_cpu $name: validation losses (split over dp) within 1e-5 of one process" val_within "$name" one 1e-5
done

# 4. the CUDA trainer, emulated (fp32 build)
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the CUDA emulation's fiber switch is x86-64 only"
else
    timeout 600 build/train_gpt_fp32_emu "${RUN[@]}" -o "$d/emu" --eval-scores "$d/emu.scores" > "$d/emu.log" 2>&1 ||
        { echo "[FAIL] train_gpt (fp32, emulated) --eval: $(grep -m1 error "$d/emu.log")"; status=1; }
    pass_fail "train_gpt (fp32, emulated): ending scores at steps 0, 1, 2 within 1e-4 of train_gpt_cpu, accuracies equal" \
        check same "$d/emu.scores" "$d/one.scores" 1e-4 3
    for c in "dp2|--dp 2" "tp2|--tp 2" "pp2|--pp 2"; do
        IFS='|' read -r name flags <<< "$c"
        # shellcheck disable=SC2086
        timeout 600 "${MPIRUN[@]}" -np 2 build/train_gpt_fp32_emu "${RUN[@]}" $flags -o "$d/emu_$name" \
            --eval-scores "$d/emu_$name.scores" > "$d/emu_$name.log" 2>&1 ||
            { echo "[FAIL] train_gpt (fp32, emulated) $name --eval: $(grep -m1 error "$d/emu_$name.log")"; status=1; continue; }
        pass_fail "train_gpt (fp32, emulated) $name: ending scores within 1e-4 of train_gpt_cpu, accuracies equal" \
            check same "$d/emu_$name.scores" "$d/one.scores" 1e-4 3
        pass_fail "train_gpt (fp32, emulated) $name: validation losses within 1e-5 of train_gpt_cpu's one process" \
            val_within "emu_$name" one 1e-5
    done
fi

# 5. the log
pass_fail "metrics.jsonl has eval_acc and eval_acc_norm at steps 0, 1, 2; summary.json the last; the step line" \
    check log "$d/one" "$d/one.log" 0,1,2

# 6. bad input: exit 1, no step, a message naming the file and the place
bad() {  # NAME CONTENT PATTERN [FLAGS...]: CONTENT written to a file given to --eval
    local name=$1 content=$2 pattern=$3 f="$d/bad.jsonl"
    shift 3
    printf '%b' "$content" > "$f"
    timeout 60 ./train_gpt_cpu -c llama_tiny -i data/mobydick.txt -b 2 -t 64 -x 1 -v 1 -g 0 -o "" --eval "$f" "$@" > "$d/bad.txt" 2>&1
    local rc=$?
    if [ $rc -eq 1 ] && grep -qF "$f" "$d/bad.txt" && grep -qE -- "$pattern" "$d/bad.txt" && ! grep -q "^step " "$d/bad.txt"; then
        echo "[PASS] bad --eval file: $name"
    else
        echo "[FAIL] bad --eval file: $name: want exit 1 naming $f and matching '$pattern'; got exit $rc: $(head -c 300 "$d/bad.txt")"
        status=1
    fi
}
ok='{"ctx": "The whale", "endings": ["swam.", "sang."], "label": 0}'
bad "no ctx" '{"endings": ["a", "b"], "label": 0}\n' 'line 1: no string field "ctx"'
bad "no endings" "$ok\n{\"ctx\": \"x\", \"label\": 0}\n" 'line 2: no array field "endings"'
bad "no label" '{"ctx": "x", "endings": ["a", "b"]}\n' 'line 1: no field "label"'
bad "a label that is not an integer" '{"ctx": "x", "endings": ["a", "b"], "label": 0.5}\n' 'line 1: "label" is not an integer'
bad "a label out of range" "$ok\n\n{\"ctx\": \"x\", \"endings\": [\"a\", \"b\"], \"label\": 2}\n" 'line 3: label 2 is out of range \(2 endings'
bad "one ending" '{"ctx": "x", "endings": ["a"], "label": 0}\n' 'line 1: 1 endings; a multiple-choice example needs 2 or more'
bad "an ending longer than the context window" '{"ctx": "The whale", "endings": ["a very long ending indeed", "b"], "label": 0}\n' \
    'line 1: the context and ending 0 are 35 tokens, more than the 17 a row of -t 16 scores' -t 16
bad "not JSON" "$ok\nnot json\n" 'line 2: not a JSON object'
bad "an empty file" '' 'is empty'
bad "blank lines only" '\n  \n' 'no examples'
bad "a truncated llm.c file" "$(head -c 1100 "$d/mc_small.bin" | od -An -v -tx1 | tr -d ' \n' | sed 's/../\\x&/g')" \
    'example 1: its size field|example 1: the file ends'
bad "a token past the vocabulary" "$(head -c 1024 "$d/mc_small.bin" | od -An -v -tx1 | tr -d ' \n' | sed 's/../\\x&/g')\xff\xff\x16\x00\x00\x00\x00\x00\x02\x00\x01\x00\x2c\x01\x01\x00\x41\x00\x01\x00\x42\x00" \
    'example 1: token 300 is not below the vocabulary size 256'
f="$d/needs_tokenizer.jsonl"
echo "$ok" > "$f"
timeout 60 ./train_gpt_cpu -c gpt3_tiny --vocab 301 -b 2 -t 64 -x 1 -g 0 -o "" --eval "$f" > "$d/bad.txt" 2>&1
if [ $? -eq 1 ] && grep -q "tokenized with the run's tokenizer, and this run has none (--tokenizer)" "$d/bad.txt" && grep -qF "$f" "$d/bad.txt"; then
    echo "[PASS] bad --eval file: a jsonl file in a run without a tokenizer names --tokenizer"
else echo "[FAIL] bad --eval file: a jsonl file without a tokenizer: $(head -c 300 "$d/bad.txt")"; status=1; fi
timeout 60 ./train_gpt_cpu -c llama_tiny -i data/mobydick.txt -x 1 -g 0 -o "" --eval "$d/none.jsonl" > "$d/bad.txt" 2>&1
if [ $? -eq 1 ] && grep -q "\-\-eval '$d/none.jsonl': cannot open" "$d/bad.txt"; then echo "[PASS] a missing --eval file names the flag"
else echo "[FAIL] a missing --eval file: $(head -c 300 "$d/bad.txt")"; status=1; fi

[ $status -eq 0 ] && rm -rf "$d"
exit $status
