#!/usr/bin/env bash
# Bad input stops with exit status 1 and a clear message naming the file or flag, before any step is
# trained, never a crash (a signal) or a hang; a damaged checkpoint is refused, never trained from. A
# process the environment calls one of several ranks but no MPI launcher started as one (RANK and
# WORLD_SIZE, Slurm's variables, another MPI's mpiexec, or a build without MPI) would train alone: it stops,
# saying how to start it (llmc/parallel/comm_mpi.h's comm_check_world).
set -u
d=build/t_bad
rm -rf "$d" && mkdir -p "$d"
status=0
PY=/usr/bin/python3
tiny=(-c gpt3_tiny --layers 1 -b 2 -t 16 -x 2 -v 0 -g 0 -o "")

# expect_fail NAME NAMED PATTERN CMD...: CMD must exit with status exactly 1 (the trainers' die(): not a
# crash, a signal, an abort or a timeout) within 60 s, train no step, and print NAMED (the file or flag at
# fault, as a fixed string) and PATTERN (the problem, an extended regular expression)
expect_fail() {
    local name=$1 named=$2 pattern=$3; shift 3
    timeout 60 "$@" > "$d/out.txt" 2>&1
    local rc=$?
    if [ $rc -eq 1 ] && grep -qF -- "$named" "$d/out.txt" && grep -qE -- "$pattern" "$d/out.txt" && ! grep -q "^step " "$d/out.txt"; then
        echo "[PASS] $name"
    else
        echo "[FAIL] $name: want exit 1, no step and a message naming '$named' and matching '$pattern'; got exit $rc: $(head -c 300 "$d/out.txt" | tr '\n' ' ')"
        status=1
    fi
}

expect_fail "unknown preset names the preset" "-c" "unknown preset 'gpt5' \(flag -c\)" ./train_gpt_cpu -c gpt5
expect_fail "unknown flag names the flag" "--frobnicate" "unknown flag '--frobnicate'" ./train_gpt_cpu --frobnicate 1
expect_fail "flag without value" "-x" "'-x' is unknown or lacks a value" ./train_gpt_cpu -x
expect_fail "non-numeric value names the flag" "-b" "flag -b expects an integer, got .two." ./train_gpt_cpu -b two
expect_fail "heads that do not divide embd" "--heads 3" "--embd 100 is not divisible by --heads 3" ./train_gpt_cpu --embd 100 --heads 3
expect_fail "unknown --naming names the flag" "--naming" "flag --naming expects gpt2, llama, baichuan or qwen, got 'mistral'" ./train_gpt_cpu --naming mistral
expect_fail "NormHead with a tied head names both flags" "--norm-head 1" "needs an untied LM head \(--tied 0\)" ./train_gpt_cpu -c gpt3_tiny --norm-head 1
expect_fail "ALiBi with a RoPE flag names the flag" "--rope-theta" "flag --rope-theta sets RoPE, but --pos alibi has no rotary positions" ./train_gpt_cpu -c llama_tiny --pos alibi --rope-theta 500000
expect_fail "ALiBi with RoPE frequency scaling (a preset's) names the flag" "--rope-scaling" "RoPE frequency scaling \(--rope-scaling\) with --pos alibi" ./train_gpt_cpu -c llama3.2_1b --pos alibi
expect_fail "an unknown --pos names the flag and the choices" "--pos" "flag --pos expects learned, rope or alibi, got 'nope'" ./train_gpt_cpu --pos nope
expect_fail "kv heads that do not divide heads" "--kv-heads 3" "--heads 4 is not divisible by --kv-heads 3" ./train_gpt_cpu -c llama_tiny --kv-heads 3
expect_fail "sequence longer than the model's" "-t 4096" "flag -t 4096 exceeds the model's sequence length" ./train_gpt_cpu -t 4096
expect_fail "total batch not a multiple of the micro-batch" "-d 100" "flag -d 100 is not a multiple" ./train_gpt_cpu "${tiny[@]}" -d 100
# documents (llmc/documents.h): the end-of-document token in the vocabulary, or one to take from the tokenizer
expect_fail "--eod-token outside the vocabulary names the flag" "--eod-token" "token 60000 is outside the vocabulary \[0, 50257\)" ./train_gpt_cpu "${tiny[@]}" --eod-token 60000
expect_fail "a negative --eod-token names the flag" "--eod-token" "expects a token id >= 0, got '-3'" ./train_gpt_cpu "${tiny[@]}" --eod-token -3
expect_fail "--reset-attention-mask 2 names the flag" "--reset-attention-mask" "expects 0 or 1, got '2'" ./train_gpt_cpu "${tiny[@]}" --reset-attention-mask 2
expect_fail "documents on byte data without --eod-token say what to give" "--eod-token" "the byte tokenizer has none" ./train_gpt_cpu "${tiny[@]}" -i data/mobydick.txt -j "" --reset-position-ids 1
expect_fail "documents with no tokenizer for the vocabulary say what to give" "--eod-token" "no tokenizer is known for this vocabulary" ./train_gpt_cpu "${tiny[@]}" --vocab 301 --eod-mask-loss 1
expect_fail "missing data file names the file" "$d/nope.txt" "-i '$d/nope.txt': cannot open: No such file" ./train_gpt_cpu "${tiny[@]}" -i "$d/nope.txt"

# a directory where a file is expected (fopen opens one for reading on Linux; it must not reach a read)
mkdir -p "$d/a_dir.txt"
expect_fail "a directory as the tokenizer file" "$d/a_dir.txt" "is a directory" ./train_gpt_cpu "${tiny[@]}" -g 4 --tokenizer "$d/a_dir.txt"
expect_fail "a directory as the data file" "$d/a_dir.txt" "directory|not a regular file" ./train_gpt_cpu "${tiny[@]}" -i "$d/a_dir.txt"
expect_fail "a directory as --init-from" "$d/a_dir.txt" "is a directory" ./train_gpt_cpu "${tiny[@]}" --init-from "$d/a_dir.txt"

# llm.c shards: wrong magic, truncated, bad version
/usr/bin/python3 tests/bad_shards.py "$d"
expect_fail "shard with wrong magic names the file" "$d/magic.bin" "magic.bin.: bad magic 12345" ./train_gpt_cpu "${tiny[@]}" -i "$d/magic.bin"
expect_fail "truncated shard names the file" "$d/trunc.bin" "trunc.bin.: truncated: the header declares 1000 tokens" ./train_gpt_cpu "${tiny[@]}" -i "$d/trunc.bin"
expect_fail "unknown shard version" "$d/version.bin" "version.bin.: unsupported version 7" ./train_gpt_cpu "${tiny[@]}" -i "$d/version.bin"
expect_fail "file shorter than a shard header" "$d/short.bin" "short.bin.: truncated: 100 bytes" ./train_gpt_cpu "${tiny[@]}" -i "$d/short.bin"
expect_fail "tokens beyond the vocabulary" "$d/good.bin" "holds token 199 but the model's vocabulary is 100" ./train_gpt_cpu "${tiny[@]}" --vocab 100 -i "$d/good.bin"
if timeout 60 ./train_gpt_cpu "${tiny[@]}" -i "$d/good.bin" > "$d/out.txt" 2>&1; then
    echo "[PASS] a valid shard trains"
else
    echo "[FAIL] a valid shard trains: $(tail -3 "$d/out.txt")"; status=1
fi

# safetensors for --init-from: missing, truncated, wrong model
./train_gpt_cpu "${tiny[@]}" --export-init "$d/init.safetensors" > /dev/null
head -c 2000 "$d/init.safetensors" > "$d/trunc.safetensors"
printf 'garbage' > "$d/garbage.safetensors"
expect_fail "missing safetensors names the file" "$d/none.safetensors" "--init-from '$d/none.safetensors': cannot open: No such file" ./train_gpt_cpu "${tiny[@]}" --init-from "$d/none.safetensors"
expect_fail "truncated safetensors names the file" "$d/trunc.safetensors" "trunc.safetensors.: not a valid safetensors file" ./train_gpt_cpu "${tiny[@]}" --init-from "$d/trunc.safetensors"
expect_fail "garbage safetensors names the file" "$d/garbage.safetensors" "garbage.safetensors.: not a valid safetensors file" ./train_gpt_cpu "${tiny[@]}" --init-from "$d/garbage.safetensors"
expect_fail "safetensors of another model is refused, naming the field" "$d/init.safetensors" "differs from the requested one \(n_embd: 128 in the file, 64 in this run\)" ./train_gpt_cpu "${tiny[@]}" --embd 64 --init-from "$d/init.safetensors"
expect_fail "safetensors without the q, k, v biases --qkv-bias asks for" "$d/init.safetensors" "\(qkv_bias: false in the file, true in this run\)" ./train_gpt_cpu "${tiny[@]}" --qkv-bias 1 --init-from "$d/init.safetensors"
expect_fail "safetensors without the QK-norm weights --qk-norm asks for" "$d/init.safetensors" "\(qk_norm: false in the file, true in this run\)" ./train_gpt_cpu "${tiny[@]}" --qk-norm 1 --init-from "$d/init.safetensors"

# checkpoints: corrupt, half-written, other model; auto-resume skips the half-written one
ck=(-c gpt3_tiny --layers 1 -b 2 -t 16 -v 0 -g 0 -o "$d/ck" -n 2)
./train_gpt_cpu "${ck[@]}" -x 4 > /dev/null 2>&1
cp -r "$d/ck/ckpt_00000004" "$d/ck_corrupt"
printf '\x01' | dd of="$d/ck_corrupt/shard_00000.bin" bs=1 seek=5000 conv=notrunc status=none
expect_fail "corrupt checkpoint is refused" "$d/ck_corrupt" "shard_00000.bin is corrupt" ./train_gpt_cpu "${ck[@]}" -x 6 --resume "$d/ck_corrupt"
# a sharded checkpoint damaged: a shard missing or truncated, the index naming a file that is not there, shards of two
# steps, a piece missing behind renewed hashes: exit 1 naming the file before anything is loaded
bad_ck() { rm -rf "$d/ck_$1" && cp -r "$d/ck/ckpt_00000004" "$d/ck_$1"; }
bad_ck nobin && rm "$d/ck_nobin/shard_00000.bin"
expect_fail "checkpoint without its shard's data is refused" "$d/ck_nobin" "missing file shard_00000.bin" ./train_gpt_cpu "${ck[@]}" -x 6 --resume "$d/ck_nobin"
bad_ck short && truncate -s -4096 "$d/ck_short/shard_00000.bin"
expect_fail "truncated shard is refused" "$d/ck_short" "shard_00000.bin is [0-9]* bytes, shard_00000.json records [0-9]* \(truncated" ./train_gpt_cpu "${ck[@]}" -x 6 --resume "$d/ck_short"
bad_ck nojson && rm "$d/ck_nojson/shard_00000.json"
expect_fail "index naming a missing shard is refused" "$d/ck_nojson" "missing file shard_00000.json" ./train_gpt_cpu "${ck[@]}" -x 6 --resume "$d/ck_nojson"
bad_ck mixed && cp "$d/ck/ckpt_00000002"/shard_00000.* "$d/ck_mixed/" && $PY tests/ckpt_edit.py "$d/ck_mixed" "$d/ck_mixed2"
expect_fail "shards of two steps are refused" "$d/ck_mixed2" "shard_00000.json is of step 2, index.json of step 4" ./train_gpt_cpu "${ck[@]}" -x 6 --resume "$d/ck_mixed2"
bad_ck hole && $PY -c "import json,sys; p=sys.argv[1]+'/shard_00000.json'; j=json.load(open(p)); j['pieces']=j['pieces'][:-1]; open(p,'w').write(json.dumps(j))" "$d/ck_hole" &&
    $PY tests/ckpt_edit.py "$d/ck_hole" "$d/ck_hole2"
expect_fail "a piece missing from every shard is refused" "$d/ck_hole2" "is incomplete or inconsistent: no v of tensor [a-z0-9_.]*" ./train_gpt_cpu "${ck[@]}" -x 6 --resume "$d/ck_hole2"
cp -r "$d/ck/ckpt_00000004" "$d/ck/ckpt_00000006" && rm "$d/ck/ckpt_00000006/DONE"
expect_fail "half-written checkpoint is refused by path" "$d/ck/ckpt_00000006" "incomplete \(no DONE marker" ./train_gpt_cpu "${ck[@]}" -x 6 --resume "$d/ck/ckpt_00000006"
timeout 60 ./train_gpt_cpu "${ck[@]}" -x 6 --resume auto > "$d/out.txt" 2>&1
if grep -q "resumed from $d/ck/ckpt_00000004 at step 4" "$d/out.txt"; then echo "[PASS] auto-resume skips the half-written checkpoint"; else echo "[FAIL] auto-resume skips the half-written checkpoint"; status=1; fi
expect_fail "checkpoint of another model is refused" "$d/ck/ckpt_00000004" "written for a different model \(ffn: [0-9]+ in the checkpoint, 256 in this run\)" ./train_gpt_cpu "${ck[@]}" --ffn 256 -x 6 --resume "$d/ck/ckpt_00000004"

# one of several ranks by the environment, not by MPI: every such process stops, naming the variables and the way to
# start it (mpirun -np N); the CPU trainer's ranks are MPI's (train_gpt's may start from RANK and WORLD_SIZE alone)
txt=(./train_gpt_cpu "${tiny[@]}" -o "$d/ranks" -i data/mobydick.txt)
for r in 0 1; do
    expect_fail "RANK=$r WORLD_SIZE=2 without mpirun" "RANK, WORLD_SIZE" "rank $r of 2 .*mpirun -np 2 \./train_gpt_cpu" env RANK=$r WORLD_SIZE=2 "${txt[@]}"
done
expect_fail "Slurm's SLURM_PROCID and SLURM_NTASKS=4 without an MPI launch" "SLURM_" "rank 3 of 4 .*mpirun -np 4" env SLURM_PROCID=3 SLURM_NTASKS=4 "${txt[@]}"
expect_fail "MPICH's PMI_SIZE=2 (another MPI's mpiexec)" "PMI_SIZE" "rank 1 of 2 .*mpirun -np 2" env PMI_SIZE=2 PMI_RANK=1 "${txt[@]}"
if [ -e "$d/ranks" ]; then echo "[FAIL] one of several ranks by the environment writes nothing: $d/ranks exists"; status=1
else echo "[PASS] one of several ranks by the environment writes nothing"; fi
if timeout 60 env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 "${txt[@]}" > "$d/out.txt" 2>&1 && grep -q "^step " "$d/out.txt"; then
    echo "[PASS] RANK=0 WORLD_SIZE=1 trains as one process"
else echo "[FAIL] RANK=0 WORLD_SIZE=1 trains as one process: $(tail -2 "$d/out.txt" | tr '\n' ' ')"; status=1; fi
exit $status
