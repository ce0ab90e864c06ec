#!/usr/bin/env bash
# test_gpt (the program tests/t_gpu.sh runs on a GPU) run on the CPU: train_gpt.cu and test_gpt.cu built with
# g++ against the host emulation of CUDA and cuBLASLt in tests/cuda_emu (by tests/cuda_emu/build.sh; every kernel
# runs as written, its threads emulated as fibers), on reference states of tests/gpu_cases.sh: the bf16 build on
# head dims 64 (GPT, LLaMA GQA, LLaMA with Qwen's q, k, v biases, Baichuan2's NormHead and Qwen3's QK-norm), 80 (GPT
# with ALiBi) and 128, and packed documents (learned positions; RoPE, GQA and the loss mask), the fp32 build on the
# three head-dim-64 states, the fp16 build (-DENABLE_FP16) on them too (--core: every check but the resume and the ZeRO
# levels; its attention at head dims 80 and 128 is tests/t_attention.sh's). The checks of test_gpt: logits, loss,
# gradients, recompute, accumulation, the optimizer, 10 steps, weight update, determinism; and on the bf16 pass's
# head-dim-64 states and the fp32 pass's GPT state also the resume and the ZeRO levels on one GPU (the others run
# test_gpt's --core: those two run no kernel the other checks do not, and cost most at the larger head dims).
# A second bf16 pass on gpt3_tiny_hd64 runs in the emulation's race mode: the blocks of every launch
# in a shuffled order (EMU_ORDER=2), the threads of a block in random orders with warps run ahead, and the
# shared-memory race detector (EMU_SCHED=random, tests/cuda_emu/include/cuda_emu.h). A third bf16 pass on
# gpt3_tiny_hd64 runs the stream mode build (tests/cuda_emu/include/cuda_emu_streams.h): every kernel, copy and
# product queued on its stream and run in a seeded order, with the happens-before checker on every access. It checks the CUDA
# trainer's logic against PyTorch, not the GPU's arithmetic (exact host math instead of fast-math
# intrinsics) or speed.
# x86-64 only (the fiber switch). About 7 minutes alone on 2 cores, 11 in `make test` beside another script.
# A shorter run (scripts/mutation_bench.py uses these): EMU_PASSES, some of "bf16 race streams fp32 fp16" (default
# all five); EMU_CASES, the states of the bf16 pass (default the seven above; the fp32 pass takes the
# head-dim-64 ones among them, the fp16 pass too, the race and streams passes gpt3_tiny_hd64 when named); EMU_STATES_DIR, a directory that
# already holds NAME.safetensors for those cases (made from another tree), instead of making them here.
set -u
if [ "$(uname -m)" != x86_64 ]; then echo "[SKIP] the emulation's fiber switch is x86-64 only"; exit 0; fi
[ -x ./train_gpt_cpu ] || { echo "[FAIL] ./train_gpt_cpu is not built: run make train_gpt_cpu"; exit 1; }
passes=${EMU_PASSES:-bf16 race streams fp32 fp16}
cases=${EMU_CASES:-gpt3_tiny_hd64 llama_tiny_gqa_hd64 llama_switches_hd64 gpt_alibi_hd80 llama_gqa_hd128 gpt_documents llama_documents}
for p in $passes; do
    case $p in bf16|race|streams|fp32|fp16) ;; *) echo "[FAIL] EMU_PASSES: unknown pass '$p' (bf16, race, streams, fp32, fp16)"; exit 1 ;; esac
done
has() { case " $1 " in *" $2 "*) return 0 ;; esac; return 1; }
d=$(pwd)/build/t_gpu_emulated
rm -rf "$d" && mkdir -p "$d/run"
status=0

# the builds for the passes asked (bf16 serves bf16 and race), in parallel
flags=(-std=c++17 -O2 -fopenmp -pthread -fno-strict-aliasing -Wno-unknown-pragmas -I"$(pwd)")
builds=()
{ has "$passes" bf16 || has "$passes" race; } && builds+=(bf16)
has "$passes" fp32 && builds+=(fp32)
has "$passes" fp16 && builds+=(fp16)
has "$passes" streams && builds+=(streams)
pids=()
for b in "${builds[@]}"; do
    case $b in
        bf16) bash tests/cuda_emu/build.sh test_gpt.cu "$d/test_gpt_emu" "${flags[@]}" > "$d/build_bf16.log" 2>&1 & ;;
        fp32) bash tests/cuda_emu/build.sh test_gpt.cu "$d/test_gpt_fp32_emu" "${flags[@]}" -DENABLE_FP32 > "$d/build_fp32.log" 2>&1 & ;;
        fp16) bash tests/cuda_emu/build.sh test_gpt.cu "$d/test_gpt_fp16_emu" "${flags[@]}" -DENABLE_FP16 > "$d/build_fp16.log" 2>&1 & ;;
        streams) bash tests/cuda_emu/build.sh test_gpt.cu "$d/test_gpt_streams_emu" "${flags[@]}" -DEMU_STREAMS > "$d/build_streams.log" 2>&1 & ;;
    esac
    pids+=($!)
done
for i in "${!builds[@]}"; do
    b=${builds[$i]}
    if wait "${pids[$i]}"; then echo "[PASS] test_gpt.cu builds against the emulation ($b)"
    else echo "[FAIL] test_gpt.cu builds against the emulation ($b): $(grep -m 3 error "$d/build_$b.log")"; status=1; fi
done
[ $status -eq 0 ] || exit 1

bf16_states=()
if [ -n "${EMU_STATES_DIR:-}" ]; then
    for c in $cases; do
        f=$EMU_STATES_DIR/$c.safetensors
        if [ -f "$f" ]; then bf16_states+=("$f"); else echo "[FAIL] EMU_STATES_DIR: $f is missing"; status=1; fi
    done
else
    source tests/gpu_cases.sh
    # shellcheck disable=SC2086
    make_gpu_states "$d" /usr/bin/python3 $cases
    [ $gpu_states_status -eq 0 ] || status=1
    bf16_states=("${gpu_state_files[@]}")
fi
fp32_states=()
race_state=""
bf16_args=() bf16_core=() fp32_args=() fp32_core=()  # test_gpt's arguments: every check, then --core states
# (the fp16 pass takes the fp32 pass's states, each with --core: the resume and the ZeRO levels move fp32 master weights,
# moments and checkpoint bytes that no precision changes)
for f in "${bf16_states[@]}"; do
    case $f in */gpt3_tiny_hd64.safetensors|*/llama_tiny_gqa_hd64.safetensors|*/llama_switches_hd64.safetensors) fp32_states+=("$f") ;; esac
    case $f in */gpt3_tiny_hd64.safetensors) race_state=$f ;; esac
    case $f in *_hd64.safetensors) bf16_args+=("$f") ;; *) bf16_core+=("$f") ;; esac
    case $f in */gpt3_tiny_hd64.safetensors) fp32_args+=("$f") ;; *_hd64.safetensors) fp32_core+=("$f") ;; esac
done
[ ${#bf16_core[@]} -gt 0 ] && bf16_args+=(--core "${bf16_core[@]}")
[ ${#fp32_core[@]} -gt 0 ] && fp32_args+=(--core "${fp32_core[@]}")
# test_gpt writes its checkpoints under build/t_gpu of the working directory: run it in $d/run.
# run_emu LOG LABEL CMD...: the checks of one run, labelled, as they come; a run that stops early (an
# emulation error: a race, a deadlock, a misaligned access) without a [FAIL] line gets one naming the first
# error.
run_emu() {
    local log=$1 label=$2
    shift 2
    "$@" 2>&1 | tee "$log" | grep --line-buffered -E '^\[(PASS|FAIL)\]|^EMU' | sed -u "s/^\[\(PASS\|FAIL\)\] /&$label/"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ]; then
        status=1
        grep -q '^\[FAIL\]' "$log" || echo "[FAIL] ${label}test_gpt stopped (status $rc): $(grep -m 1 -E 'EMU|error' "$log")"
    fi
}
cd "$d/run"
if has "$passes" bf16 && [ ${#bf16_states[@]} -gt 0 ]; then
    run_emu "$d/bf16.log" "" "$d/test_gpt_emu" ref "${bf16_args[@]}"
fi
if has "$passes" race; then
    if [ -n "$race_state" ]; then
        run_emu "$d/bf16_race.log" "race mode: " env EMU_ORDER=2 EMU_SCHED=random "$d/test_gpt_emu" ref "$race_state"
    else echo "[FAIL] the race pass runs on gpt3_tiny_hd64, which EMU_CASES does not name"; status=1; fi
fi
if has "$passes" streams; then
    if [ -n "$race_state" ]; then
        run_emu "$d/bf16_streams.log" "stream mode: " env EMU_STREAM_SEED=3 "$d/test_gpt_streams_emu" ref "$race_state"
        if grep -q "EMU STREAM RACE" "$d/bf16_streams.log"; then
            echo "[FAIL] stream mode: the happens-before checker reports: $(grep -m 1 'EMU STREAM RACE' "$d/bf16_streams.log")"; status=1
        else echo "[PASS] stream mode: no unordered pair of accesses in any check of test_gpt"; fi
    else echo "[FAIL] the streams pass runs on gpt3_tiny_hd64, which EMU_CASES does not name"; status=1; fi
fi
if has "$passes" fp32; then
    if [ ${#fp32_states[@]} -gt 0 ]; then run_emu "$d/fp32.log" "" "$d/test_gpt_fp32_emu" ref "${fp32_args[@]}"
    else echo "[FAIL] the fp32 pass runs on the head-dim-64 states, which EMU_CASES does not name"; status=1; fi
fi
if has "$passes" fp16; then
    if [ ${#fp32_states[@]} -gt 0 ]; then run_emu "$d/fp16.log" "" "$d/test_gpt_fp16_emu" ref --core "${fp32_states[@]}"
    else echo "[FAIL] the fp16 pass runs on the head-dim-64 states, which EMU_CASES does not name"; status=1; fi
fi
exit $status
