# scripts/gpu_lib.sh (sourced): what the GPU kit's builder (scripts/gpu_kit.sh), the staged GPU checks
# (scripts/gpu_check.sh) and tests/t_gpu.sh share: the kit's layout, the source files its builds and states
# are made from, the reading of its MANIFEST, git's view of the checkout and the python3 that has PyTorch.
#
# The kit (make gpu-kit, default folder gpukit/) holds (programs gzip-compressed, NAME.gz: a third of the size):
#   bin/        train_gpt test_gpt train_gpt_fp32 test_gpt_fp32 (sm_80 + sm_90a + sm_100a); train_gpt_cudnn (--attention
#               cudnn) and test_attention (ours and cuDNN's attention against the reference) where cuDNN was found;
#               train_gpt_cpu built
#               for any x86-64-v3 CPU without MPI (it writes the reference states' initial weights), and ckpt_convert
#               built the same way (the multirank checks read checkpoints as whole tensors with it)
#   devcuda/    the dev/cuda programs (dev/cuda/Makefile's PROGRAMS: devcuda_programs)
#   probe/      ceilings, nccl_ranks, fp8_gemm (dev/probe)
#   states/     the reference states of tests/gpu_cases.sh small enough to carry
#   data/       the git-ignored data files a GPU run reads (data/tokenizers/llama3.tiktoken)
#   MANIFEST    commit, dirty flag, nvcc version, build flags, the sources' digest, each file's sha256 and size

devcuda_programs() {  # dev/cuda/Makefile's PROGRAMS, as make reads them (one line)
    make -s --no-print-directory -C dev/cuda print-programs
}

kit_placements() {  # prints "KITPATH|CHECKOUTPATH" for every program and data file a kit can hold (.gz: compressed)
    local p
    for p in train_gpt test_gpt train_gpt_fp32 test_gpt_fp32 train_gpt_fp16 test_gpt_fp16 train_gpt_cpu; do echo "bin/$p.gz|$p"; done
    for p in $(devcuda_programs); do echo "devcuda/$p.gz|build/devcuda/$p"; done
    for p in ceilings nccl_ranks fp8_gemm; do echo "probe/$p.gz|build/$p"; done
    echo "bin/ckpt_convert.gz|build/ckpt_convert"
    echo "bin/test_fp8.gz|build/test_fp8"
    echo "bin/train_gpt_cudnn.gz|build/train_gpt_cudnn"
    echo "bin/test_attention.gz|build/test_attention"
    echo "data/tokenizers/llama3.tiktoken|data/tokenizers/llama3.tiktoken"
}

# The files the kit's programs and states are made from, sorted (paths relative to the repository root).
# Their digest is the kit's freshness key: it needs no git, so it also works in a copy of the tree.
kit_source_files() {
    ls -1 train_gpt.cu test_gpt.cu train_gpt_cpu.cpp train_gpt.py Makefile $(find llmc -type f) dev/cuda/Makefile dev/ckpt_convert.cpp \
        dev/cuda/*.cu dev/cuda/*.h dev/probe/*.cu tests/check.h tests/ref_state.h tests/gpu_cases.sh tests/test_fp8.cu \
        tests/test_attention.cu 2>/dev/null \
        | LC_ALL=C sort
}
kit_sources_digest() {  # one sha256 over every source file's sha256 and path
    kit_source_files | xargs sha256sum | sha256sum | cut -d' ' -f1
}

manifest_field() {  # manifest_field MANIFEST KEY: the value of a "key: value" header line
    sed -n "s/^$2: //p" "$1" | head -n 1
}

# kit_verify KITDIR: every file the manifest lists is present with its sha256 and size; prints the first
# problem and returns 1 otherwise
kit_verify() {
    local kit=$1 sha size path got n=0
    [ -f "$kit/MANIFEST" ] || { echo "no $kit/MANIFEST"; return 1; }
    while read -r sha size path; do
        [ -f "$kit/$path" ] || { echo "$kit/$path is listed in the manifest but missing"; return 1; }
        got=$(sha256sum "$kit/$path" | cut -d' ' -f1)
        [ "$got" = "$sha" ] || { echo "$kit/$path: sha256 $got, the manifest says $sha"; return 1; }
        [ "$(stat -c %s "$kit/$path")" = "$size" ] || { echo "$kit/$path: size differs from the manifest"; return 1; }
        n=$((n + 1))
    done < <(sed -n '/^files:$/,$p' "$kit/MANIFEST" | tail -n +2)
    [ $n -gt 0 ] || { echo "$kit/MANIFEST lists no files"; return 1; }
}

# git's view of the checkout: git_commit prints HEAD (nothing without git), git_dirty "yes" when a tracked
# file has uncommitted changes, else "no"; git_commit_desc "COMMIT" or "COMMIT (with uncommitted changes)"
git_commit() { git rev-parse HEAD 2>/dev/null; }
git_dirty() {
    if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then echo yes; else echo no; fi
}
git_commit_desc() {
    local c
    c=$(git_commit) || return 0
    if [ "$(git_dirty)" = yes ]; then c="$c (with uncommitted changes)"; fi
    echo "$c"
}

# the python3 on PATH when it has PyTorch (GPU machines), else Debian's, which has it as python3-torch
python_with_torch() {
    if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch' >/dev/null 2>&1; then command -v python3
    else echo /usr/bin/python3; fi
}
