#!/usr/bin/env bash
# Resume is bit-exact: a run interrupted after a checkpoint and resumed produces the same
# losses and byte-identical weights and optimizer state as the uninterrupted run, without the
# seeded initialisation it does not need.
set -u
d=build/t_resume
rm -rf "$d" && mkdir -p "$d"
args=(-c llama_tiny -i data/mobydick.txt --layers 2 -b 4 -t 32 -x 8 -v 4 --val-batches 2 -g 0 -n 4 --keep 5)
status=0
ok() { if eval "$2"; then echo "[PASS] $1"; else echo "[FAIL] $1"; status=1; fi; }

./train_gpt_cpu "${args[@]}" -o "$d/full" --save-safetensors "$d/full.safetensors" > "$d/full.log" 2>&1
ok "uninterrupted run writes checkpoints at steps 4 and 8" "[ -f $d/full/ckpt_00000004/DONE ] && [ -f $d/full/ckpt_00000008/DONE ]"
# the interrupted run: the same directory as it stood after step 4
mkdir -p "$d/cut" && cp -r "$d/full/ckpt_00000004" "$d/cut/"
./train_gpt_cpu "${args[@]}" -o "$d/cut" --resume auto > "$d/cut.log" 2>&1
ok "resume finds the step-4 checkpoint" "grep -q 'resumed from .*ckpt_00000004 at step 4' $d/cut.log"
# the checkpoint holds every value: a resumed run makes no seeded initialisation (minutes at 7B on one thread)
ok "the fresh run initialises, the resumed run does not" "grep -q '^initialised ' $d/full.log && ! grep -q '^initialised ' $d/cut.log"
ok "the checkpoint holds a shard, its index, the index and the state" "[ \"\$(ls $d/full/ckpt_00000008 | tr '\n' ' ')\" = 'DONE index.json shard_00000.bin shard_00000.json state.json ' ]"
for f in DONE index.json shard_00000.bin shard_00000.json state.json; do
    ok "resumed $f identical to the uninterrupted run" "cmp -s $d/full/ckpt_00000008/$f $d/cut/ckpt_00000008/$f"
done
grep -E '^step +[5-8]/8' "$d/full.log" | sed 's/| [0-9.]* ms.*//' > "$d/full.steps"
grep -E '^step +[5-8]/8' "$d/cut.log" | sed 's/| [0-9.]* ms.*//' > "$d/cut.steps"
ok "steps 5-8 print identical loss, lr and norm" "[ -s $d/full.steps ] && cmp -s $d/full.steps $d/cut.steps"
# the single-file form of earlier checkpoints (whole tensors in model.safetensors and optim.safetensors, made here
# by build/ckpt_convert) still resumes, to the same bits
./build/ckpt_convert "$d/full/ckpt_00000004" --single "$d/single" > "$d/convert.log" 2>&1
./train_gpt_cpu "${args[@]}" -o "$d/single" --resume auto > "$d/single.log" 2>&1
ok "a single-file checkpoint resumes to the same step-8 weights and moments" \
    "[ -f $d/single/ckpt_00000004/model.safetensors ] && grep -q 'resumed from .*single/ckpt_00000004 at step 4' $d/single.log && cmp -s $d/full/ckpt_00000008/shard_00000.bin $d/single/ckpt_00000008/shard_00000.bin"
# the converter's Hugging Face file of the last checkpoint is the run's own --save-safetensors, byte for byte
./build/ckpt_convert "$d/full/ckpt_00000008" --hf "$d/converted.safetensors" >> "$d/convert.log" 2>&1
ok "build/ckpt_convert --hf of the step-8 checkpoint equals --save-safetensors" "[ -s $d/full.safetensors ] && cmp -s $d/full.safetensors $d/converted.safetensors"
# resuming a finished run changes nothing and says so
./train_gpt_cpu "${args[@]}" -o "$d/cut" --resume "$d/cut/ckpt_00000008" > "$d/again.log" 2>&1
ok "resume at the final step trains no further" "grep -q 'at step 8' $d/again.log && ! grep -qE '^step +[0-9]+/8' $d/again.log"
exit $status
