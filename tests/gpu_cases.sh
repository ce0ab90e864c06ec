# tests/gpu_cases.sh (sourced): the reference states the CUDA trainer is tested on, made as
# tests/t_reference.sh makes them (train_gpt_cpu --export-init, then train_gpt.py --ref) with shapes the
# CUDA kernels take (T = 64): the tiny presets at head dim 64 (C = 128, 2 heads; llama_switches_hd64: LLaMA with
# Qwen's q, k, v biases, Baichuan2's NormHead and Qwen3's QK-norm), head dim 80 (GPT with ALiBi positions, as BLOOM
# and Baichuan2-13B, 5 heads: slopes that are not a plain series) and 128 (GQA), and a mid-size model, gpt3_125m's
# widths (C 768, 12 heads, GPT-2 vocabulary) with 2 layers; and packed documents (train_gpt.py --eod-token: learned
# positions, and RoPE with GQA and the loss mask), whose rows of 64 tokens hold about 4 documents each.
# Used by tests/t_gpu.sh (on a GPU) and tests/t_gpu_emulated.sh (the kernels emulated on the CPU).

# name | model flags | train_gpt.py flags
gpu_cases=(
  "gpt3_tiny_hd64|-c gpt3_tiny --layers 2 --vocab 301 --heads 2 --kv-heads 2 --seq 64|--schedule cosine"
  "llama_tiny_gqa_hd64|-c llama_tiny --layers 2 --vocab 301 --heads 2 --kv-heads 1 --seq 64|--schedule linear"
  "llama32_style_hd64|-c llama_tiny --layers 2 --vocab 301 --heads 2 --kv-heads 1 --seq 64 --tied 1 --rope-theta 500000 --rope-scaling 4,1,4,64|--schedule wsd --decay-frac 0.3"
  "llama_switches_hd64|-c llama_tiny --layers 2 --vocab 301 --heads 2 --kv-heads 1 --seq 64 --qkv-bias 1 --norm-head 1 --qk-norm 1|--schedule cosine"
  "flagperf_style_hd64|-c llama_tiny --layers 2 --vocab 301 --heads 2 --kv-heads 1 --seq 64 --pos learned --bias 1 --tied 1|--schedule cosine --clip 0.5"
  "gpt_rope_mqa_hd64|-c gpt3_tiny --layers 2 --vocab 301 --heads 2 --pos rope --kv-heads 1 --tied 0 --seq 64|--schedule constant --accum 1 --batch 3 --lr 3e-4"
  "gpt_alibi_hd80|-c gpt3_tiny --layers 2 --vocab 301 --embd 400 --heads 5 --kv-heads 5 --ffn 1600 --pos alibi --seq 64|--schedule cosine"
  "llama_gqa_hd128|-c llama_tiny --layers 2 --vocab 301 --embd 512 --heads 4 --kv-heads 2 --ffn 1408 --seq 64|--schedule linear --lr 3e-4"
  "gpt3_125m_2_layers|-c gpt3_125m --layers 2 --seq 64|--schedule cosine --batch 2 --accum 2"
  "gpt_documents|-c gpt3_tiny --layers 2 --vocab 301 --heads 2 --kv-heads 2 --seq 64|--schedule cosine --eod-token 7 --eod-frac 0.06 --reset-position-ids --reset-attention-mask"
  "llama_documents|-c llama_tiny --layers 2 --vocab 301 --heads 2 --kv-heads 1 --seq 64|--schedule linear --eod-token 300 --eod-frac 0.06 --reset-position-ids --reset-attention-mask --eod-mask-loss"
)

# make_gpu_states DIR PYTHON [NAME...]: DIR/NAME.safetensors for the named cases (every case when none is
# named), appended to the array gpu_state_files; a case that cannot be made prints [FAIL] and sets
# gpu_states_status=1. Needs ./train_gpt_cpu.
make_gpu_states() {
    local d=$1 py=$2
    shift 2
    gpu_state_files=()
    gpu_states_status=0
    local c name mflags pflags
    for c in "${gpu_cases[@]}"; do
        IFS='|' read -r name mflags pflags <<< "$c"
        if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
        ./train_gpt_cpu $mflags --export-init "$d/$name.init.safetensors" > "$d/$name.export.log" 2>&1 \
            || { echo "[FAIL] $name: export failed: $(tail -2 "$d/$name.export.log")"; gpu_states_status=1; continue; }
        "$py" train_gpt.py --ref "$d/$name.init.safetensors" --out "$d/$name.safetensors" --seq 64 $pflags \
            > "$d/$name.py.log" 2>&1 \
            || { echo "[FAIL] $name: train_gpt.py failed: $(tail -2 "$d/$name.py.log")"; gpu_states_status=1; continue; }
        gpu_state_files+=("$d/$name.safetensors")
    done
}
