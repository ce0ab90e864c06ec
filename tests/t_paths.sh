#!/usr/bin/env bash
# Paths by class: every flag that takes a path, in train_gpt_cpu, the host-side modes of train_gpt
# and build/prepare, given a directory, a FIFO, an empty file, an unreadable file, a dangling
# symbolic link, a file that grows while it is read (inputs), or a file where a directory is
# needed, a missing parent directory, an unwritable directory, a FIFO in the way (outputs): each
# must exit with status 1 within 10 s (a FIFO must not hang the open), dump no core, and print a
# message naming the flag and the path (llmc/utils.h's open_input / read_file_bytes /
# fopen_check / check_output_dir), before any step is trained. About a minute.
# train_gpt checks every path of a training run before it looks for a GPU, so its classes are checked
# here with or without one.
# A path flag the run does not open is checked all the same, at start (llmc/run/flags.h's check_given_paths):
# --tokenizer with -g 0 or several ranks, the data, -o, --resume and --save-safetensors under --export-init,
# --plan or train_gpt's --print-config and --estimate-memory: exit 1 naming the flag and the path, nothing
# trained, nothing written. A tokenizer's name (gpt2, llama3) is no path and is not checked.
set -u
d=build/t_paths
rm -rf "$d" && mkdir -p "$d"
chmod 755 "$d"
status=0
[ -x ./train_gpt_cpu ] || { echo "[FAIL] setup: ./train_gpt_cpu is not built"; exit 1; }
[ -x build/prepare ] || { echo "[FAIL] setup: build/prepare is not built (make build/prepare)"; exit 1; }

# An unreadable file: root reads anything, so a root run checks it as user nobody
as_user=()
if [ "$(id -u)" = 0 ]; then
    if command -v setpriv > /dev/null; then as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    else as_user=(SKIP); fi
fi

# expect_fail NAME FLAG PATH PATTERN CMD...: exit status exactly 1 within 10 s, no core file, no step
# trained, and a message holding "FLAG 'PATH'" (fixed string) and PATTERN (extended regular expression);
# and $d/unused, where expect_unused's runs put their outputs, left empty
expect_fail() {
    local name=$1 flag=$2 path=$3 pattern=$4; shift 4
    rm -f core core.*
    timeout 10 "$@" > "$d/out.txt" 2>&1 < /dev/null
    local rc=$?
    local wrote; wrote=$(ls -A "$d/unused" 2> /dev/null)
    if [ $rc -eq 1 ] && ! ls core core.* > /dev/null 2>&1 && grep -qF -- "$flag '$path'" "$d/out.txt" &&
       grep -qE -- "$pattern" "$d/out.txt" && ! grep -q "^step " "$d/out.txt" && [ -z "$wrote" ]; then
        echo "[PASS] $name"
    else
        echo "[FAIL] $name: want exit 1, no step and a message with \"$flag '$path'\" matching '$pattern'; got exit $rc$(grep -q "^step " "$d/out.txt" && echo ", trained")${wrote:+, wrote $wrote}: $(grep -m1 error "$d/out.txt" || tail -c 300 "$d/out.txt")"
        status=1
    fi
}

# expect_unused NAME FLAG PATH PATTERN CMD...: expect_fail for a path flag the run does not open; the
# run's own outputs go to $d/unused, which must stay empty
expect_unused() {
    rm -rf "$d/unused" && mkdir -p "$d/unused"
    expect_fail "$@"
    rm -rf "$d/unused"
}
u="$d/unused"

# input fixtures, one folder per file name ending (a Megatron prefix X must not find an X.bin
# beside it): $(in_dir EXT)/CLASS$EXT
in_dir() { echo "$d/in${1:-_none}"; }
make_inputs() {  # EXT
    local e=$1 i
    i=$(in_dir "$e")
    mkdir -p "$i/dir$e"
    mkfifo "$i/fifo$e"
    : > "$i/empty$e"
    ln -s "$PWD/$i/nowhere$e" "$i/dangling$e"
    head -c 4096 data/mobydick.txt > "$i/unreadable$e" && chmod 000 "$i/unreadable$e"
}
for e in "" .txt .bin .safetensors .tiktoken; do make_inputs "$e"; done
mkdir -p "$d/in" "$d/pub" && chmod 777 "$d/pub"  # pub: writable by anyone
mkfifo "$d/in/fifo" && ln -s "$PWD/$d/in/nowhere" "$d/in/dangling" && mkdir "$d/in/dir"

# check_inputs PROGRAM_LABEL FLAG EXT CMD...: the command with the path appended after FLAG
# (positional when FLAG is "input")
check_inputs() {
    local label=$1 flag=$2 e=$3; shift 3
    local c p arg
    for c in dir fifo empty dangling unreadable; do
        p="$(in_dir "$e")/$c$e"
        if [ "$flag" = input ]; then arg=("$p"); else arg=("$flag" "$p"); fi
        case $c in
            dir) pat="is a directory" ;;
            fifo) pat="is a FIFO" ;;
            empty) pat="is empty|holds no document|fewer|truncated: 0 bytes" ;;
            dangling) pat="does not exist \(dangling symbolic link" ;;
            unreadable) pat="Permission denied" ;;
        esac
        if [ $c = unreadable ] && [ "${as_user[0]:-}" = SKIP ]; then echo "[SKIP] $label $flag unreadable: root without setpriv"; continue; fi
        if [ $c = unreadable ]; then expect_fail "$label $flag $c file" "$flag" "$p" "$pat" ${as_user[@]+"${as_user[@]}"} "$@" "${arg[@]}"
        else expect_fail "$label $flag $c file" "$flag" "$p" "$pat" "$@" "${arg[@]}"; fi
    done
}

tiny=(./train_gpt_cpu -c gpt3_tiny --vocab 256 --layers 1 -b 2 -t 16 -x 2 -v 0 -g 0 -o "" -i data/mobydick.txt)
echo "== train_gpt_cpu inputs"
check_inputs train_gpt_cpu -i .txt "${tiny[@]}"
check_inputs train_gpt_cpu -i .bin "${tiny[@]}"
check_inputs train_gpt_cpu -i "" "${tiny[@]}"
check_inputs train_gpt_cpu -j .txt "${tiny[@]}"
check_inputs train_gpt_cpu -j .bin "${tiny[@]}"
check_inputs train_gpt_cpu --init-from .safetensors "${tiny[@]}"
check_inputs train_gpt_cpu --tokenizer .tiktoken "${tiny[@]}" -g 4
check_inputs train_gpt_cpu --eval "" "${tiny[@]}"

# --resume: a checkpoint directory, or what is inside it
./train_gpt_cpu "${tiny[@]:1}" -o "$d/run" > "$d/run.log" 2>&1 || echo "[FAIL] setup: a 2-step run with -o failed"
ck="$d/run/ckpt_00000002"
expect_fail "train_gpt_cpu --resume a file" --resume "$ck/DONE" "is a file; a checkpoint directory was expected" "${tiny[@]}" --resume "$ck/DONE"
expect_fail "train_gpt_cpu --resume a FIFO" --resume "$d/in/fifo" "is a FIFO" "${tiny[@]}" --resume "$d/in/fifo"
expect_fail "train_gpt_cpu --resume a dangling link" --resume "$d/in/dangling" "dangling symbolic link" "${tiny[@]}" --resume "$d/in/dangling"
for f in DONE shard_00000.json shard_00000.bin; do
    for c in fifo empty dir; do
        bad="$d/ck_${c}_${f//./_}"
        cp -r "$ck" "$bad" && rm "$bad/$f"
        case $c in fifo) mkfifo "$bad/$f"; pat="is a FIFO" ;; empty) : > "$bad/$f"; pat="is empty" ;; dir) mkdir "$bad/$f"; pat="is a directory" ;; esac
        [ "$c$f" = emptyshard_00000.bin ] && pat="shard_00000.bin is 0 bytes, shard_00000.json records"  # raw data: its size is checked
        expect_fail "train_gpt_cpu --resume with $f a $c" --resume "$bad" "$pat" "${tiny[@]}" -x 4 --resume "$bad"
    done
done

# outputs: -o, --export-init, --save-safetensors, --eval-scores
echo "== train_gpt_cpu outputs"
: > "$d/a_file"
mkdir -p "$d/ro" && chmod 755 "$d/ro"   # writable by its owner only: unwritable for nobody
check_outputs() {  # LABEL FLAG KIND(dir|file) CMD...
    local label=$1 flag=$2 kind=$3; shift 3
    if [ $kind = dir ]; then
        expect_fail "$label $flag a file" "$flag" "$d/a_file" "is a file; a directory is needed" "$@" "$flag" "$d/a_file"
        expect_fail "$label $flag through a file" "$flag" "$d/a_file/sub" "a file in its path" "$@" "$flag" "$d/a_file/sub"
        expect_fail "$label $flag a FIFO" "$flag" "$d/in/fifo" "is a FIFO" "$@" "$flag" "$d/in/fifo"
        [ "${as_user[0]:-}" = SKIP ] || expect_fail "$label $flag unwritable" "$flag" "$d/ro/out" "not writable: Permission denied" ${as_user[@]+"${as_user[@]}"} "$@" "$flag" "$d/ro/out"
    else
        expect_fail "$label $flag a directory" "$flag" "$d/in/dir" "is a directory; a file is written here" "$@" "$flag" "$d/in/dir"
        expect_fail "$label $flag a FIFO" "$flag" "$d/in/fifo" "is a FIFO" "$@" "$flag" "$d/in/fifo"
        expect_fail "$label $flag missing parent" "$flag" "$d/none/x.out" "its directory '$d/none' does not exist" "$@" "$flag" "$d/none/x.out"
        expect_fail "$label $flag through a file" "$flag" "$d/a_file/x.out" "has a file in its path|is a file, not a directory" "$@" "$flag" "$d/a_file/x.out"
        [ "${as_user[0]:-}" = SKIP ] || expect_fail "$label $flag unwritable" "$flag" "$d/ro/x.out" "Permission denied" ${as_user[@]+"${as_user[@]}"} "$@" "$flag" "$d/ro/x.out"
    fi
}
check_outputs train_gpt_cpu -o dir "${tiny[@]}"
check_outputs train_gpt_cpu --export-init file ./train_gpt_cpu -c gpt3_tiny --vocab 256 --layers 1
check_outputs train_gpt_cpu --save-safetensors file "${tiny[@]}"
check_outputs train_gpt_cpu --eval-scores file "${tiny[@]}"

# a file that grows while it is read: a writer appends to it all the time
grow_check() {  # NAME FLAG FILE CMD...
    local name=$1 flag=$2 f=$3; shift 3
    ( while :; do printf '%0100d' 0 >> "$f"; done ) &
    local w=$! s0
    s0=$(stat -c %s "$f"); sleep 0.2
    if [ "$(stat -c %s "$f")" -gt "$s0" ]; then
        expect_fail "$name" "$flag" "$f" "changed size while being read" "$@" "$flag" "$f"
    else echo "[FAIL] $name: the writer did not extend the file"; status=1; fi
    kill $w; wait $w 2> /dev/null
    rm -f "$f"
}
echo "== files that change while read"
head -c 30000000 /dev/zero | tr '\0' 'a' > "$d/grow.txt"
grow_check "train_gpt_cpu -i a growing file" -i "$d/grow.txt" "${tiny[@]}"
# (safetensors files are read a tensor at a time: a valid file of the run's model, appended to while its tensors are
# read; the model's 50257-token vocabulary makes the file 30 MB, read over some tens of milliseconds)
grow=(./train_gpt_cpu -c gpt3_tiny --layers 1 -b 2 -t 16 -x 2 -v 0 -g 0 -o "" -i data/mobydick.txt)
"${grow[@]:0:5}" --export-init "$d/grow.safetensors" > /dev/null 2>&1
grow_check "train_gpt_cpu --init-from a growing file" --init-from "$d/grow.safetensors" "${grow[@]}"

# path flags the run does not open: checked all the same, before any work
echo "== train_gpt_cpu: path flags the run does not open"
mkdir -p "$d/ck_nodone"  # a checkpoint directory without its DONE marker
exp=(./train_gpt_cpu -c gpt3_tiny --vocab 256 --layers 1 --export-init "$u/init.safetensors")  # reads --init-from only
plan=(./train_gpt_cpu -c gpt3_tiny --vocab 256 --layers 1 -b 2 -t 16 --plan)                   # reads nothing
expect_unused "train_gpt_cpu -g 0: --tokenizer missing" --tokenizer "$d/none.tiktoken" "no such file" "${tiny[@]}" -o "$u/o" --tokenizer "$d/none.tiktoken"
expect_unused "train_gpt_cpu -g 0: --tokenizer a directory" --tokenizer "$(in_dir .tiktoken)/dir.tiktoken" "is a directory" "${tiny[@]}" -o "$u/o" --tokenizer "$(in_dir .tiktoken)/dir.tiktoken"
if command -v mpirun > /dev/null; then  # several ranks draw no sample
    expect_unused "train_gpt_cpu on 2 ranks: --tokenizer missing" --tokenizer "$d/none.tiktoken" "no such file" \
        mpirun --oversubscribe --allow-run-as-root -np 2 "${tiny[@]}" -o "$u/o" -g 4 --tokenizer "$d/none.tiktoken"
else echo "[SKIP] train_gpt_cpu on 2 ranks: no mpirun"; fi
expect_unused "train_gpt_cpu --export-init: -i missing" -i "$d/none.bin" "no llm.c shard matches it" "${exp[@]}" -i "$d/none.bin"
expect_unused "train_gpt_cpu --export-init: -i a directory" -i "$(in_dir .txt)/dir.txt" "is a directory" "${exp[@]}" -i "$(in_dir .txt)/dir.txt"
expect_unused "train_gpt_cpu --export-init: -j a FIFO" -j "$(in_dir .bin)/fifo.bin" "is a FIFO" "${exp[@]}" -j "$(in_dir .bin)/fifo.bin"
expect_unused "train_gpt_cpu --export-init: --resume missing" --resume "$d/none" "no such checkpoint directory" "${exp[@]}" --resume "$d/none"
expect_unused "train_gpt_cpu --export-init: --resume incomplete" --resume "$d/ck_nodone" "no DONE marker" "${exp[@]}" --resume "$d/ck_nodone"
expect_unused "train_gpt_cpu --export-init: -o a file" -o "$d/a_file" "is a file; a directory is needed" "${exp[@]}" -o "$d/a_file"
expect_unused "train_gpt_cpu --export-init: --save-safetensors missing parent" --save-safetensors "$d/none/x.out" "does not exist" "${exp[@]}" --save-safetensors "$d/none/x.out"
expect_unused "train_gpt_cpu --resume: --init-from missing (a resumed run reads no --init-from)" --init-from "$d/none.safetensors" "cannot open: No such file" "${tiny[@]}" -x 4 --resume "$ck" --init-from "$d/none.safetensors"
expect_unused "train_gpt_cpu --plan: --init-from missing" --init-from "$d/none.safetensors" "cannot open: No such file" "${plan[@]}" --init-from "$d/none.safetensors"
expect_unused "train_gpt_cpu --plan: --init-from a dangling link" --init-from "$(in_dir .safetensors)/dangling.safetensors" "dangling symbolic link" "${plan[@]}" --init-from "$(in_dir .safetensors)/dangling.safetensors"
expect_unused "train_gpt_cpu --plan: --export-init through a file" --export-init "$d/a_file/x.out" "has a file in its path|is a file, not a directory" "${plan[@]}" --export-init "$d/a_file/x.out"
expect_unused "train_gpt_cpu --plan: -i a dangling link" -i "$(in_dir .txt)/dangling.txt" "dangling symbolic link" "${plan[@]}" -i "$(in_dir .txt)/dangling.txt"
expect_unused "train_gpt_cpu: --save-safetensors missing parent, before the first step" --save-safetensors "$d/none/x.out" "does not exist" "${tiny[@]}" --save-safetensors "$d/none/x.out"
# a tokenizer's name is no path: -g 0 --tokenizer llama3 trains where data/tokenizers is not
mkdir -p "$d/elsewhere"
if (cd "$d/elsewhere" && timeout 60 "$OLDPWD/train_gpt_cpu" "${tiny[@]:1}" -i "$OLDPWD/data/mobydick.txt" --tokenizer llama3 > out.txt 2>&1) &&
   grep -q "^step " "$d/elsewhere/out.txt"; then
    echo "[PASS] train_gpt_cpu -g 0: --tokenizer llama3 is a name, unchecked (no data/tokenizers here)"
else echo "[FAIL] train_gpt_cpu -g 0: --tokenizer llama3 is a name, unchecked: $(tail -c 300 "$d/elsewhere/out.txt")"; status=1; fi

# build/prepare: inputs (positional), --tokenizer, --out
echo "== build/prepare"
prep=(build/prepare --tokenizer bytes --out "$d/prep/x")
mkdir -p "$d/prep"
for c in dir fifo dangling unreadable; do
    p="$d/in.txt/$c.txt"
    case $c in dir) pat="is a directory" ;; fifo) pat="is a FIFO" ;; dangling) pat="dangling symbolic link" ;; unreadable) pat="Permission denied" ;; esac
    if [ $c = unreadable ]; then
        [ "${as_user[0]:-}" = SKIP ] || expect_fail "prepare input $c" input "$p" "$pat" ${as_user[@]+"${as_user[@]}"} "${prep[@]}" "$p"
    else expect_fail "prepare input $c" input "$p" "$pat" "${prep[@]}" "$p"; fi
done
check_inputs prepare --tokenizer .tiktoken build/prepare --out "$d/pub/y" data/mobydick.txt
expect_fail "prepare --out missing parent" --out "$d/none/x" "does not exist" build/prepare --tokenizer bytes data/mobydick.txt --out "$d/none/x"
expect_fail "prepare --out through a file" --out "$d/a_file/x" "has a file in its path|is a file, not a directory" build/prepare --tokenizer bytes data/mobydick.txt --out "$d/a_file/x"
[ "${as_user[0]:-}" = SKIP ] || expect_fail "prepare --out unwritable" --out "$d/ro/x" "Permission denied" ${as_user[@]+"${as_user[@]}"} build/prepare --tokenizer bytes data/mobydick.txt --out "$d/ro/x"

# train_gpt: its host-side modes and a training run's paths (no GPU needed)
if [ -x ./train_gpt ]; then
    echo "== train_gpt"
    gpu=(./train_gpt -c gpt3_tiny --vocab 256 --layers 1)
    check_inputs train_gpt --init-from .safetensors "${gpu[@]}" --export-init "$d/gpu_init.safetensors"
    # (a shape the attention kernels take: the shapes are checked before the tokenizer is opened)
    check_inputs train_gpt --tokenizer .tiktoken ./train_gpt -c llama3.2_1b -b 1 -t 2048 -x 1 -o "" -g 4
    check_outputs train_gpt --export-init file "${gpu[@]}"
    check_outputs train_gpt --print-config file "${gpu[@]}"
    # a training run: every path is checked before the device is looked for, so these run without a GPU too
    run=(./train_gpt -c gpt3_tiny --vocab 256 --layers 1 --heads 2 --kv-heads 2 -b 2 -t 64 -x 2 -v 0 -g 0 -o "" -i data/mobydick.txt)
    check_inputs train_gpt -i .txt "${run[@]}"
    check_inputs train_gpt -i .bin "${run[@]}"
    check_inputs train_gpt -j .txt "${run[@]}"
    check_inputs train_gpt -j .bin "${run[@]}"
    check_inputs train_gpt --init-from .safetensors "${run[@]}"
    check_inputs train_gpt --tokenizer .tiktoken "${run[@]}" -g 4
    check_inputs train_gpt --eval "" "${run[@]}"
    expect_fail "train_gpt --resume a file" --resume "$ck/DONE" "is a file; a checkpoint directory was expected" "${run[@]}" --resume "$ck/DONE"
    expect_fail "train_gpt --resume a FIFO" --resume "$d/in/fifo" "is a FIFO" "${run[@]}" --resume "$d/in/fifo"
    expect_fail "train_gpt --resume a dangling link" --resume "$d/in/dangling" "dangling symbolic link" "${run[@]}" --resume "$d/in/dangling"
    for f in DONE shard_00000_json shard_00000_bin; do  # the directories made for train_gpt_cpu above
        for c in fifo empty dir; do
            case $c in fifo) pat="is a FIFO" ;; empty) pat="is empty" ;; dir) pat="is a directory" ;; esac
            [ "$c$f" = emptyshard_00000_bin ] && pat="shard_00000.bin is 0 bytes, shard_00000.json records"
            expect_fail "train_gpt --resume with $f a $c" --resume "$d/ck_${c}_$f" "$pat" "${run[@]}" -x 4 --resume "$d/ck_${c}_$f"
        done
    done
    check_outputs train_gpt -o dir "${run[@]}"
    check_outputs train_gpt --save-safetensors file "${run[@]}"
    check_outputs train_gpt --eval-scores file "${run[@]}"
    # path flags the run does not open: the host modes read none of the training run's paths; -g 0 no tokenizer
    expect_unused "train_gpt --print-config: -i missing" -i "$d/none.bin" "no llm.c shard matches it" "${gpu[@]}" --print-config "$u/config.json" -i "$d/none.bin"
    expect_unused "train_gpt --print-config: --init-from a FIFO" --init-from "$d/in/fifo" "is a FIFO" "${gpu[@]}" --print-config "$u/config.json" --init-from "$d/in/fifo"
    expect_unused "train_gpt --estimate-memory: --resume missing" --resume "$d/none" "no such checkpoint directory" "${gpu[@]}" --estimate-memory 80 --resume "$d/none"
    expect_unused "train_gpt --export-init: -o a file" -o "$d/a_file" "is a file; a directory is needed" "${gpu[@]}" --export-init "$u/init.safetensors" -o "$d/a_file"
    expect_unused "train_gpt --plan: -j a directory" -j "$(in_dir .txt)/dir.txt" "is a directory" "${gpu[@]}" --plan -j "$(in_dir .txt)/dir.txt"
    expect_unused "train_gpt -g 0: --tokenizer missing" --tokenizer "$d/none.tiktoken" "no such file" "${run[@]}" --tokenizer "$d/none.tiktoken"
else
    echo "[SKIP] train_gpt: not built (make train_gpt)"
fi
# the emulated CUDA trainer trains here: -g 0 with a missing rank file stops before its first step
if [ -x build/train_gpt_emu ]; then
    expect_unused "train_gpt_emu -g 0: --tokenizer missing" --tokenizer "$d/none.tiktoken" "no such file" \
        build/train_gpt_emu -c gpt3_tiny --vocab 256 --layers 1 --heads 2 --kv-heads 2 -b 1 -t 64 -x 1 -v 0 -g 0 -o "$u/o" \
        -i data/mobydick.txt --tokenizer "$d/none.tiktoken"
else
    echo "[SKIP] train_gpt_emu: not built (make build/train_gpt_emu)"
fi
chmod -R u+rwx "$d" 2> /dev/null
exit $status
