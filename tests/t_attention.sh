#!/usr/bin/env bash
# The tensor-core flash attention of llmc/attention.cuh against attention in double precision
# (tests/test_attention.cu: forward and backward, head dims 64, 80, 128, GQA and MQA, odd tile counts, at
# tolerances set by the kernels' bf16 roundings). Always under the CUDA emulation of tests/cuda_emu (built
# with g++ by tests/cuda_emu/build.sh), twice: the default schedule, and EMU_SCHED=random
# (warps run ahead in random orders, shared-memory race detector, cp.async data landing only at its wait).
# Where a GPU is present, also built with nvcc for the Makefile's targets (sm_80, sm_90a, sm_100a) and run for
# real; otherwise that part prints [SKIP]. The emulated build includes cuDNN's attention (llmc/attention_cudnn.cuh against
# the emulated cuDNN of tests/cuda_emu/include/cudnn_graph.h, which interprets the graph it is given). Documents
# (--reset-attention-mask's doc) for the flash kernels and llmc/attention_rowwise.cuh's. Then the fp16 build's kernels
# (-DENABLE_FP16), emulated, default schedule. About 60 s on 2 cores.
set -u
d=$(pwd)/build/t_attention
rm -rf "$d" && mkdir -p "$d"
status=0

if [ "$(uname -m)" != x86_64 ]; then
    echo "[SKIP] test_attention emulated: the emulation's fiber switch is x86-64 only"
elif ! bash tests/cuda_emu/build.sh tests/test_attention.cu "$d/test_attention_emu" \
        -std=c++17 -O2 -pthread -fno-strict-aliasing -Wno-unknown-pragmas -I"$(pwd)" -DUSE_CUDNN > "$d/build_emu.log" 2>&1; then
    echo "[FAIL] tests/test_attention.cu builds against the emulation: $(grep -m 3 error "$d/build_emu.log")"; status=1
else
    echo "[PASS] tests/test_attention.cu builds against the emulation"
    for sched in default random; do
        EMU_SCHED=$sched "$d/test_attention_emu" > "$d/emu_$sched.log" 2>&1 || status=1
        grep -E '^\[(PASS|FAIL)\]' "$d/emu_$sched.log" | sed "s/^\[\(PASS\|FAIL\)\] /&emulated, EMU_SCHED=$sched: /"
        # an emulation error (a race, a deadlock) ends the program before its checks: name it
        if ! grep -q "^  attention docs=edges .*hd=128 alibi rowwise" "$d/emu_$sched.log"; then
            echo "[FAIL] test_attention emulated, EMU_SCHED=$sched: did not finish: $(grep -m 2 -E 'EMU|error' "$d/emu_$sched.log" | tr '\n' ' ')"
            status=1
        fi
    done
    # cuDNN's plan building (llmc/attention_cudnn.cuh) against the emulated cuDNN's hooks: configurations that fail to
    # build are passed over for the next; a graph no engine takes stops with a message naming the graph and cuDNN's reason
    if EMU_DNN_BAD_PLANS=2 "$d/test_attention_emu" cudnn > "$d/bad_plans.log" 2>&1 && grep -q '^\[PASS\]' "$d/bad_plans.log"; then
        echo "[PASS] cuDNN attention: the first two engine configurations fail to build, the third runs and checks"
    else echo "[FAIL] cuDNN attention with EMU_DNN_BAD_PLANS=2: $(grep -m 2 -E 'FAIL|error' "$d/bad_plans.log" | tr '\n' ' ')"; status=1; fi
    EMU_DNN_NO_ENGINE=1 "$d/test_attention_emu" cudnn > "$d/no_engine.log" 2>&1; rc=$?
    if [ $rc = 1 ] && grep -q "cuDNN 91900 has no engine for the attention graph (forward, B 1 T 128 H 4 KV 2 hd 64): EMU cuDNN: no engine" "$d/no_engine.log"; then
        echo "[PASS] cuDNN attention: no engine for the graph stops with exit 1 and cuDNN's reason"
    else echo "[FAIL] cuDNN attention with EMU_DNN_NO_ENGINE=1: exit $rc: $(head -c 300 "$d/no_engine.log")"; status=1; fi
    # the fp16 build's kernels (-DENABLE_FP16: mma.sync .f16), every case at fp16's bounds, the default schedule
    if ! bash tests/cuda_emu/build.sh tests/test_attention.cu "$d/test_attention_fp16_emu" \
            -std=c++17 -O2 -pthread -fno-strict-aliasing -Wno-unknown-pragmas -I"$(pwd)" -DENABLE_FP16 -DUSE_CUDNN > "$d/build_emu_fp16.log" 2>&1; then
        echo "[FAIL] tests/test_attention.cu builds against the emulation (fp16): $(grep -m 3 error "$d/build_emu_fp16.log")"; status=1
    else
        "$d/test_attention_fp16_emu" > "$d/emu_fp16.log" 2>&1 || status=1
        grep -E '^\[(PASS|FAIL)\]' "$d/emu_fp16.log" | sed "s/^\[\(PASS\|FAIL\)\] /&emulated, fp16: /"
        if ! grep -q "^  attention docs=edges .*hd=128 alibi rowwise" "$d/emu_fp16.log"; then
            echo "[FAIL] test_attention emulated, fp16: did not finish: $(grep -m 2 -E 'EMU|error' "$d/emu_fp16.log" | tr '\n' ' ')"
            status=1
        fi
    fi
fi

if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
    echo "[SKIP] test_attention on a GPU: no GPU"
    exit $status
fi
NVCC=$(command -v nvcc 2>/dev/null || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")
if ! "$NVCC" -O3 --use_fast_math -std=c++17 -I. -Xcompiler -Wall,-Wno-unused-function \
        -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_100a,code=sm_100a \
        --expt-relaxed-constexpr -Xcompiler -fopenmp \
        tests/test_attention.cu -o "$d/test_attention" -lcublasLt -lgomp > "$d/build_gpu.log" 2>&1; then
    echo "[FAIL] tests/test_attention.cu builds with nvcc: $(grep -m 3 error "$d/build_gpu.log")"; exit 1
fi
if grep -qi warning "$d/build_gpu.log"; then
    echo "[FAIL] tests/test_attention.cu builds with nvcc without warnings: $(grep -m 2 -i warning "$d/build_gpu.log")"; status=1
fi
"$d/test_attention" > "$d/gpu.log" 2>&1 || status=1
grep -E '^\[(PASS|FAIL)\]' "$d/gpu.log" | sed 's/^\[\(PASS\|FAIL\)\] /&GPU: /'
grep -q '^  attention docs=edges .*hd=128 alibi rowwise' "$d/gpu.log" || { echo "[FAIL] test_attention on the GPU did not finish: $(tail -2 "$d/gpu.log")"; status=1; }
exit $status
