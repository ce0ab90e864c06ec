#!/usr/bin/env bash
# The CUDA trainer against the PyTorch reference (test_gpt.cu): logits, loss, every gradient, the
# reference's AdamW steps, recompute modes, bitwise determinism, bit-exact resume. Runs only where a
# GPU is present (else prints [SKIP] no GPU and exits 0); it builds nothing: make train_gpt_cpu
# test_gpt first (scripts/gpu_check.sh does).
# The reference states are made as tests/t_reference.sh makes them (train_gpt_cpu --export-init, then
# train_gpt.py --ref), with shapes the CUDA kernels take (T = 64): the tiny presets at head dim 64, head
# dims 80 and 128 (GQA), and a mid-size model, gpt3_125m's widths (C 768, 12 heads, GPT-2 vocabulary)
# with 2 layers. Both builds run on every state: test_gpt (bf16) and test_gpt_fp32.
# A few minutes, most of it train_gpt.py making the reference states on the CPU (gpt3_125m_2_layers: 2-3).
set -u
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
    echo "[SKIP] no GPU"
    exit 0
fi
for b in train_gpt_cpu test_gpt test_gpt_fp32; do
    [ -x "./$b" ] || { echo "[FAIL] ./$b is not built: run make train_gpt_cpu test_gpt test_gpt_fp32"; exit 1; }
done
# train_gpt.py needs PyTorch: the python3 on PATH when it has it (GPU machines), else Debian's
PY=/usr/bin/python3
if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch' >/dev/null 2>&1; then PY=$(command -v python3); fi
d=build/t_gpu
rm -rf "$d" && mkdir -p "$d"
status=0
# name | model flags | train_gpt.py flags
cases=(
  "gpt3_tiny_hd64|-c gpt3_tiny --layers 2 --vocab 301 --heads 2 --kv-heads 2 --seq 64|--schedule cosine"
  "llama_tiny_gqa_hd64|-c llama_tiny --layers 2 --vocab 301 --heads 2 --kv-heads 1 --seq 64|--schedule linear"
  "llama32_style_hd64|-c llama_tiny --layers 2 --vocab 301 --heads 2 --kv-heads 1 --seq 64 --tied 1 --rope-theta 500000 --rope-scaling 4,1,4,64|--schedule wsd --decay-frac 0.3"
  "flagperf_style_hd64|-c llama_tiny --layers 2 --vocab 301 --heads 2 --kv-heads 1 --seq 64 --pos learned --bias 1 --tied 1|--schedule cosine --clip 0.5"
  "gpt_rope_mqa_hd64|-c gpt3_tiny --layers 2 --vocab 301 --heads 2 --pos rope --kv-heads 1 --tied 0 --seq 64|--schedule constant --accum 1 --batch 3 --lr 3e-4"
  "gpt_hd80|-c gpt3_tiny --layers 2 --vocab 301 --embd 320 --heads 4 --kv-heads 4 --ffn 1280 --seq 64|--schedule cosine"
  "llama_gqa_hd128|-c llama_tiny --layers 2 --vocab 301 --embd 512 --heads 4 --kv-heads 2 --ffn 1408 --seq 64|--schedule linear --lr 3e-4"
  "gpt3_125m_2_layers|-c gpt3_125m --layers 2 --seq 64|--schedule cosine --batch 2 --accum 2"
)
files=()
for c in "${cases[@]}"; do
    IFS='|' read -r name mflags pflags <<< "$c"
    ./train_gpt_cpu $mflags --export-init "$d/$name.init.safetensors" > "$d/$name.export.log" 2>&1 \
        || { echo "[FAIL] $name: export failed: $(tail -2 "$d/$name.export.log")"; status=1; continue; }
    "$PY" train_gpt.py --ref "$d/$name.init.safetensors" --out "$d/$name.safetensors" --seq 64 $pflags > "$d/$name.py.log" 2>&1 \
        || { echo "[FAIL] $name: train_gpt.py failed: $(tail -2 "$d/$name.py.log")"; status=1; continue; }
    files+=("$d/$name.safetensors")
done
# the bf16 trainer at its derived tolerances, then the fp32 build at tight ones (test_gpt.cu explains both)
if [ ${#files[@]} -gt 0 ]; then
    ./test_gpt ref "${files[@]}" || status=1
    ./test_gpt_fp32 ref "${files[@]}" || status=1
fi
exit $status
