# train_gpt Makefile, in llm.c's manner: detect what the machine has, build what it can.
# After the flags and what was found come the rules, in this order: the trainers, the test programs, the
# tools, the GPU programs of dev/, then the test tooling (`make test`, the emulated builds, fuzzing,
# sanitizers, the GPU kit).
# Trainers:
#   make train_gpt_cpu     CPU reference trainer (OpenMP; MPI when mpicxx is found)
#   make train_gpt         CUDA trainer (needs nvcc; NCCL when found); one GPU needs neither NCCL nor MPI
#   make train_gpt USE_CUDNN=1   the same with cuDNN's attention available (--attention cudnn); make
#                          build/train_gpt_cudnn builds that one under its own name (the GPU kit's)
#   make test_gpt          GPU tests against the PyTorch reference states (tests/t_gpu.sh runs them)
#   make train_gpt_fp32 test_gpt_fp32   the same two built with -DENABLE_FP32 (floatX = float), for tight
#                          tests; `make train_gpt PRECISION=FP32` builds the fp32 trainer under the usual name
#   make train_gpt_fp16 test_gpt_fp16   the same two built with -DENABLE_FP16 (floatX = half, trained under a loss
#                          scale: docs/flags.md); `make train_gpt PRECISION=FP16` under the usual name
# Test programs:
#   make test_gpt_cpu      the CPU trainer's unit tests (tests/t_cpu_units.sh)
#   make build/test_datasets build/test_parallel build/test_comm_mpi build/test_tokenizer   unit-test programs `make test` runs
#   make build/test_launch build/test_comm   rank discovery and id exchange (llmc/parallel/launch.h); the NCCL
#                          backend llmc/parallel/comm_nccl.cuh with nvcc (tests/t_comm.sh)
#   make build/test_fp8    the fp8 casts, scales and GEMMs (llmc/fp8.cuh, llmc/matmul_fp8.cuh) with nvcc (tests/t_fp8.sh)
# Tools:
#   make build/prepare     text / JSONL -> llm.c shards or a Megatron indexed data set (docs/data_formats.md)
#   make build/ckpt_convert  a checkpoint -> one Hugging Face file, or whole tensors (docs/checkpoints.md)
# GPU (programs built with nvcc for sm_80, sm_90a and sm_100a, GENCODE below):
#   make devcuda           the kernel playground dev/cuda (its own Makefile lists the programs) into
#                          build/devcuda/; make build/devcuda/norm builds one (tests/t_devcuda_build.sh)
#   make devcuda-attn-resources   ptxas registers / spills per kernel of the attention and classifier programs
#   make resources         per kernel of train_gpt.cu, for sm_80 and sm_90a: registers, spills, shared memory and
#                          blocks per SM (ptxas -v; blocks per SM computed, docs/resources.md; tests/t_resources.sh)
#   make build/ceilings    probe: copy bandwidth and cuBLASLt bf16/fp8 GEMM ceilings (dev/probe/)
#   make build/nccl_ranks  probe: NCCL collectives with several ranks on one GPU (only when NCCL is found)
#   make build/fp8_gemm    probe: why cuBLASLt refuses fp8 GEMMs (the PyTorch-style call, then one change at a time)
#   make probe-config      prints the nvcc and NCCL this Makefile found (tests/t_probe_build.sh)
# Test tooling:
#   make deps              installs what the tests need and the machine lacks (scripts/install_deps.sh)
#   make test              deps, then build everything buildable and run every test (CI's command);
#                          the last line is "N passed, N failed, N skipped"
#   make test-quick        the tests that take seconds, for development (QUICK_TESTS below)
#   make coverage          the suite with every emulated program built for gcov: the device code's coverage
#   make build/test_comm_emu   tests/test_comm.cu against the emulated CUDA runtime and NCCL (tests/t_comm.sh)
#   make build/train_gpt_emu build/train_gpt_fp32_emu build/train_gpt_fp16_emu   train_gpt.cu's main against the
#                          emulated CUDA and NCCL
#                          (tests/cuda_emu), for mpirun on the CPU (tests/t_gpu_multirank.sh, t_gpu_tp.sh, t_gpu_pp.sh);
#                          every emulated build, these and the tests' own, is tests/cuda_emu/build.sh
#   make fuzz_datasets     libFuzzer targets of the data set parsers (clang), not part of `make test`:
#                          build/fuzz_datasets_idx, _npz (npy and npz) and _shard
#   make fuzz_tokenizer    libFuzzer target build/fuzz_tokenizer (clang), not part of `make test`
#   make fuzz_formats      libFuzzer targets of the file formats (clang), not part of `make test`:
#                          build/fuzz_formats_safetensors, _ckpt (state.json and DONE) and _json
#   make fuzz_datasets_run fuzz_tokenizer_run fuzz_formats_run FUZZ_SECONDS=180   runs each fuzz target that long
#   make test-asan         the CPU programs built with AddressSanitizer + UBSan in a copy of the tree
#                          (build/asan/), then the CPU tests (ASAN_TESTS) against them; not part of `make test`
#   make gpu-kit           the git-ignored folder gpukit/ that travels to a GPU machine: builds what is
#                          missing (the CUDA programs above, a portable train_gpt_cpu, the small reference
#                          states), assembles it with its MANIFEST and prints both; fails over 64 MiB
#                          (scripts/gpu_lib.sh describes its layout, docs/gpu.md the plan that uses it)
#   make clean
# Variables: PRECISION=BF16|FP16|FP32 (CUDA), USE_CUDNN=1 (train_gpt with --attention cudnn), NO_MPI=1, NO_NCCL=1, NO_OMP=1,
# CUDA_HOME, NCCL_HOME, CUDNN_HOME, BUILD=build.

CXX ?= g++
CUDA_HOME ?= /usr/local/cuda
BUILD ?= build
PYTHON ?= /usr/bin/python3

# ---- CPU flags ---------------------------------------------------------------------------------
CXXFLAGS ?= -O3 -march=native
# -fno-math-errno: sqrt needs no errno branch, so loops over it (AdamW) vectorise; no result changes.
# -ffp-contract=off: a * b + c is two roundings wherever it is written, and a fused multiply-add only where the code
# says std::fma. Left to the compiler, the choice follows the CPU's tuning (GCC forms fewer FMAs in accumulation
# chains for AMD's Zen under -march=native), so the same source computed other bits on other machines.
CXXFLAGS += -fno-math-errno -ffp-contract=off -std=c++17 -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -I.
LDLIBS += -lm
ifeq ($(NO_OMP),)
  CXXFLAGS += -fopenmp
endif

# MPI: use mpicxx's flags when it is on PATH (the CPU trainer's parallel layouts need it).
MPICXX := $(shell command -v mpicxx 2>/dev/null)
ifeq ($(NO_MPI),)
  ifneq ($(MPICXX),)
    MPI_CFLAGS := $(shell $(MPICXX) --showme:compile 2>/dev/null) -DUSE_MPI
    MPI_LIBS := $(shell $(MPICXX) --showme:link 2>/dev/null)
  endif
endif

# ---- CUDA flags --------------------------------------------------------------------------------
NVCC := $(shell command -v nvcc 2>/dev/null || (test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc))
# Blackwell (sm_100a) where this nvcc knows it (12.8 and newer); an older one builds sm_80 and sm_90a
NVCC_SM100 := $(if $(NVCC),$(shell $(NVCC) --list-gpu-arch 2>/dev/null | grep -qx compute_100 && echo yes))
GENCODE_SM100 := -gencode arch=compute_100a,code=sm_100a
GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a $(if $(NVCC_SM100),$(GENCODE_SM100))
NVCC_FLAGS ?= -O3 --use_fast_math -std=c++17 -I. -Xcompiler -Wall,-Wno-unused-function $(GENCODE) --expt-relaxed-constexpr
NVCC_LDLIBS := -lcublas -lcublasLt
PRECISION ?= BF16
ifeq ($(PRECISION),FP32)
  NVCC_FLAGS += -DENABLE_FP32
else ifeq ($(PRECISION),FP16)
  NVCC_FLAGS += -DENABLE_FP16
else ifneq ($(PRECISION),BF16)
  $(error PRECISION=$(PRECISION): the CUDA trainer builds BF16 (the default), FP16 or FP32)
endif
# cuDNN, for --attention cudnn (llmc/attention_cudnn.cuh): USE_CUDNN=1 builds train_gpt with it; $(BUILD)/train_gpt_cudnn
# always does. Headers and library from CUDNN_HOME, the CUDA install, or Python's nvidia.cudnn wheel (which ships only
# libcudnn.so.9: linked by that name); a place with the headers and no library is passed over (the kit then lacks the
# two cuDNN programs, and says so).
ifeq ($(origin CUDNN_HOME),undefined)
CUDNN_HOME := $(shell for d in $(CUDA_HOME) /usr /usr/local $$($(PYTHON) -c 'import nvidia.cudnn;print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null); do \
                  if [ -f $$d/include/cudnn_graph.h ] && ls $$d/lib*/libcudnn.so* > /dev/null 2>&1; then echo $$d; break; fi; done)
endif
CUDNN_FLAGS := -DUSE_CUDNN $(if $(CUDNN_HOME),-I$(CUDNN_HOME)/include)
CUDNN_LDLIBS := $(if $(CUDNN_HOME),-L$(CUDNN_HOME)/lib -L$(CUDNN_HOME)/lib64 -Xlinker -rpath=$(CUDNN_HOME)/lib) \
                $(if $(wildcard $(CUDNN_HOME)/lib/libcudnn.so $(CUDNN_HOME)/lib64/libcudnn.so),-lcudnn,-l:libcudnn.so.9)
NEED_CUDNN = @test -n "$(CUDNN_HOME)" || { echo "error: $@ needs cuDNN (no include/cudnn_graph.h with lib*/libcudnn.so* beside it under CUDA_HOME, /usr, /usr/local or the nvidia.cudnn wheel of $(PYTHON)); set CUDNN_HOME"; exit 1; }
# NCCL: system install, NCCL_HOME, or the headers and library inside Python's NCCL wheel.
NCCL_HOME ?= $(shell for d in $(CUDA_HOME) /usr /usr/local $$($(PYTHON) -c 'import nvidia.nccl;print(list(nvidia.nccl.__path__)[0])' 2>/dev/null); do \
                 if [ -f $$d/include/nccl.h ]; then echo $$d; break; fi; done)
ifeq ($(NO_NCCL),)
  ifneq ($(NCCL_HOME),)
    NVCC_FLAGS += -DUSE_NCCL -I$(NCCL_HOME)/include
    # Python's wheel ships only libnccl.so.2 (no unversioned symlink): link that file by name
    NCCL_LIBNAME := $(if $(wildcard $(NCCL_HOME)/lib/libnccl.so $(NCCL_HOME)/lib64/libnccl.so),-lnccl,-l:libnccl.so.2)
    NCCL_LDLIBS := -L$(NCCL_HOME)/lib -L$(NCCL_HOME)/lib64 -Xlinker -rpath=$(NCCL_HOME)/lib $(NCCL_LIBNAME)
  endif
endif
# the first line of every nvcc recipe: a clear error where no nvcc was found
NEED_NVCC = @test -n "$(NVCC)" || { echo "error: $@ needs nvcc (none on PATH or in CUDA_HOME=$(CUDA_HOME)/bin)"; exit 1; }

HEADERS := $(wildcard llmc/*.h llmc/*/*.h)
CUDA_HEADERS := $(wildcard llmc/*.cuh llmc/*/*.cuh)
DATASETS_HEADERS := llmc/data/datasets.h llmc/data/dataloader.h llmc/data/zip_npy.h llmc/rng.h llmc/utils.h
TOKENIZER_HEADERS := llmc/data/tokenizer.h llmc/data/unicode_tables.h llmc/utils.h

.PHONY: all deps test test_all test-quick coverage coverage_run clean
all: train_gpt_cpu test_gpt_cpu

# ---- the trainers ------------------------------------------------------------------------------
train_gpt_cpu: train_gpt_cpu.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) $(MPI_CFLAGS) $< -o $@ $(LDLIBS) $(MPI_LIBS)

# The CUDA trainer, test_gpt (which includes train_gpt.cu) and their fp32 builds (-DENABLE_FP32). NCCL, when
# found, is linked (data parallel; without it they train on one GPU). They need no OpenMP; with it (unless
# NO_OMP=1) llmc/init.h spreads the seeded initialisation over the host's threads (the same weights as on
# one thread, which takes about 30 s for a 7B model).
# Their host code is built for x86-64-v3 (AVX2 and FMA) on an x86-64 machine, so that llmc/init.h's loop vectorises
# (about 4 ns a value against 50 without; the same bits either way, llmc/rng.h).
TRAIN_GPT_FLAGS := $(if $(NO_OMP),,-Xcompiler -fopenmp) -Xcompiler -fno-math-errno \
                   $(if $(filter x86_64,$(shell uname -m)),-Xcompiler -march=x86-64-v3)
TRAIN_GPT_LIBS := $(NVCC_LDLIBS) $(NCCL_LDLIBS) $(if $(NO_OMP),,-lgomp)

train_gpt: train_gpt.cu $(HEADERS) $(CUDA_HEADERS)
	$(NEED_NVCC)
	$(if $(USE_CUDNN),$(NEED_CUDNN))
	$(NVCC) $(NVCC_FLAGS) $(TRAIN_GPT_FLAGS) $(if $(USE_CUDNN),$(CUDNN_FLAGS)) $< -o $@ $(TRAIN_GPT_LIBS) $(if $(USE_CUDNN),$(CUDNN_LDLIBS))

# the trainer with cuDNN's attention available (--attention cudnn), for the GPU kit and the sprint
$(BUILD)/train_gpt_cudnn: train_gpt.cu $(HEADERS) $(CUDA_HEADERS)
	$(NEED_NVCC)
	$(NEED_CUDNN)
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $(TRAIN_GPT_FLAGS) $(CUDNN_FLAGS) $< -o $@ $(TRAIN_GPT_LIBS) $(CUDNN_LDLIBS)

test_gpt: test_gpt.cu train_gpt.cu tests/check.h $(HEADERS) $(CUDA_HEADERS)
	$(NEED_NVCC)
	$(NVCC) $(NVCC_FLAGS) $(TRAIN_GPT_FLAGS) $< -o $@ $(TRAIN_GPT_LIBS)

train_gpt_fp32: train_gpt.cu $(HEADERS) $(CUDA_HEADERS)
	$(NEED_NVCC)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $(TRAIN_GPT_FLAGS) $< -o $@ $(TRAIN_GPT_LIBS)

test_gpt_fp32: test_gpt.cu train_gpt.cu tests/check.h $(HEADERS) $(CUDA_HEADERS)
	$(NEED_NVCC)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $(TRAIN_GPT_FLAGS) $< -o $@ $(TRAIN_GPT_LIBS)

train_gpt_fp16: train_gpt.cu $(HEADERS) $(CUDA_HEADERS)
	$(NEED_NVCC)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP16 $(TRAIN_GPT_FLAGS) $< -o $@ $(TRAIN_GPT_LIBS)

test_gpt_fp16: test_gpt.cu train_gpt.cu tests/check.h $(HEADERS) $(CUDA_HEADERS)
	$(NEED_NVCC)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP16 $(TRAIN_GPT_FLAGS) $< -o $@ $(TRAIN_GPT_LIBS)

# ---- test programs -----------------------------------------------------------------------------
test_gpt_cpu: test_gpt_cpu.cpp train_gpt_cpu.cpp tests/check.h $(HEADERS)
	$(CXX) $(CXXFLAGS) $(MPI_CFLAGS) $< -o $@ $(LDLIBS) $(MPI_LIBS)

$(BUILD)/test_datasets: tests/test_datasets.cpp $(DATASETS_HEADERS)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

# tests/t_parallel.sh runs it, and runs train_gpt_cpu under mpirun in every parallel layout of its matrix
$(BUILD)/test_parallel: tests/test_parallel.cpp tests/check.h $(HEADERS)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

# tests/t_comm_mpi.sh runs it in one process and under mpirun: llmc/parallel/comm_mpi.h's calls split into pieces
$(BUILD)/test_comm_mpi: tests/test_comm_mpi.cpp tests/check.h llmc/parallel/comm_mpi.h llmc/utils.h
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $(MPI_CFLAGS) $< -o $@ $(LDLIBS) $(MPI_LIBS)

$(BUILD)/test_tokenizer: tests/tokenizer/test_tokenizer.cpp $(TOKENIZER_HEADERS)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

# tests/t_comm.sh: llmc/parallel/launch.h's id exchange (plain C++, no MPI), and llmc/parallel/comm_nccl.cuh's test program
# built with nvcc against NCCL (GPU); its emulated build, for mpirun on the CPU, is $(BUILD)/test_comm_emu below
COMM_NCCL_DEPS := tests/test_comm.cu llmc/parallel/comm_nccl.cuh llmc/parallel/comm_timeout.h llmc/parallel/launch.h llmc/parallel/topology.h llmc/cuda_common.cuh llmc/utils.h
$(BUILD)/test_launch: tests/test_launch.cpp llmc/parallel/launch.h llmc/utils.h
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

$(BUILD)/test_comm: $(COMM_NCCL_DEPS)
	$(NEED_NVCC)
	@test -n "$(NCCL_LDLIBS)" || { echo "error: $@ needs NCCL and this build has none (set NCCL_HOME=<dir with include/nccl.h and lib/>)"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $< -o $@ $(NVCC_LDLIBS) $(NCCL_LDLIBS)

# tests/t_fp8.sh: tests/test_fp8.cu with nvcc (llmc/fp8.cuh and llmc/matmul_fp8.cuh for GENCODE's architectures; it runs
# where a GPU of compute capability 8.9+ is present); the script builds its emulated twin itself
# tests/test_attention.cu on a GPU with cuDNN's attention beside ours (the GPU kit's; tests/t_attention.sh builds its own)
$(BUILD)/test_attention: tests/test_attention.cu tests/check.h llmc/attention.cuh llmc/attention_cudnn.cuh llmc/mma.cuh \
        llmc/attention_rowwise.cuh llmc/cuda_common.cuh llmc/packed.cuh llmc/precision.cuh llmc/ref_ops.h \
        llmc/cpu_gemm.h llmc/json.h llmc/model_config.h llmc/rope_tables.h llmc/utils.h
	$(NEED_NVCC)
	$(NEED_CUDNN)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $(CUDNN_FLAGS) $(if $(NO_OMP),,-Xcompiler -fopenmp) $< -o $@ $(CUDNN_LDLIBS) $(if $(NO_OMP),,-lgomp)

$(BUILD)/test_fp8: tests/test_fp8.cu tests/check.h llmc/fp8.cuh llmc/matmul_fp8.cuh llmc/matmul.cuh llmc/cuda_common.cuh \
        llmc/packed.cuh llmc/precision.cuh llmc/utils.h
	$(NEED_NVCC)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $< -o $@ $(NVCC_LDLIBS)

# ---- tools -------------------------------------------------------------------------------------
$(BUILD)/prepare: dev/data/prepare.cpp llmc/data/tokenizer.h llmc/data/unicode_tables.h llmc/json.h llmc/utils.h
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

$(BUILD)/ckpt_convert: dev/ckpt_convert.cpp $(HEADERS)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

# ---- dev/cuda, the kernel playground ---------------------------------------------------------------
# dev/cuda/Makefile lists the programs and builds them; here with this Makefile's nvcc and flags, into
# $(BUILD)/devcuda/ (each binary's compile log beside it, <binary>.log).
DEVCUDA_ARGS = --no-print-directory -C dev/cuda OUT=$(abspath $(BUILD)/devcuda) NVCC="$(NVCC)" NVCC_FLAGS="$(NVCC_FLAGS)"

.PHONY: devcuda devcuda-attn-resources
devcuda:
	@$(MAKE) $(DEVCUDA_ARGS)

$(BUILD)/devcuda/%: dev/cuda/%.cu dev/cuda/common.h dev/cuda/ceilings.h dev/cuda/attention_cases.h $(HEADERS) $(CUDA_HEADERS)
	@$(MAKE) $(DEVCUDA_ARGS) $(abspath $@)

# dev/cuda/attention_sdpa.py (PyTorch scaled_dot_product_attention at the same shapes) needs no build.
devcuda-attn-resources:
	$(NEED_NVCC)
	@mkdir -p $(BUILD)/devcuda
	@for f in attention_forward attention_backward fused_classifier; do \
	    $(NVCC) $(NVCC_FLAGS) -Xcompiler -fopenmp -Xptxas -v -c dev/cuda/$$f.cu -o $(BUILD)/devcuda/$$f.resources.o \
	        > $(BUILD)/devcuda/$$f.resources.log 2>&1 || { cat $(BUILD)/devcuda/$$f.resources.log; exit 1; }; \
	    grep -E "Compiling entry|registers|spill" $(BUILD)/devcuda/$$f.resources.log | sed -e 's/ptxas info *: //'; \
	done

# ---- resources: what ptxas gives each kernel of the trainer -------------------------------------------
# train_gpt.cu compiled as the trainer is (NVCC_FLAGS and TRAIN_GPT_FLAGS), but to an object only, one architecture
# at a time (RESOURCE_ARCHS, not GENCODE's list) and with -Xptxas -v; the log and the PTX nvcc kept (for the kernels'
# __launch_bounds__) go to $(RESOURCES)/<arch>.log and .ptx. scripts/resources.py prints, per architecture and kernel,
# the registers, spills and static shared memory ptxas gave it, the block size and dynamic shared memory of its
# launch, and the blocks per SM those allow (computed from the documented per-SM limits, not measured);
# tests/t_resources.sh holds that no kernel the presets use spills. The table as of now: docs/resources.md.
RESOURCE_ARCHS := sm_80 sm_90a
RESOURCES := $(BUILD)/resources/$(if $(filter FP32,$(PRECISION)),fp32,bf16)
RESOURCE_LOGS := $(RESOURCE_ARCHS:%=$(RESOURCES)/%.log)
RESOURCE_FLAGS = $(filter-out $(GENCODE),$(NVCC_FLAGS)) $(TRAIN_GPT_FLAGS) -Xptxas -v

.PHONY: resources
resources: $(RESOURCE_LOGS)
	@$(PYTHON) scripts/resources.py $(RESOURCE_LOGS:.log=)

$(RESOURCES)/sm_%.log: train_gpt.cu $(HEADERS) $(CUDA_HEADERS)
	$(NEED_NVCC)
	@rm -rf $(RESOURCES)/keep_sm_$* && mkdir -p $(RESOURCES)/keep_sm_$*
	@echo "$(NVCC) $(RESOURCE_FLAGS) -gencode arch=compute_$*,code=sm_$* -c $< > $@"
	@$(NVCC) $(RESOURCE_FLAGS) -gencode arch=compute_$*,code=sm_$* --keep --keep-dir $(RESOURCES)/keep_sm_$* \
	    -c $< -o $(RESOURCES)/sm_$*.o > $@.tmp 2>&1 || { cat $@.tmp; exit 1; }
	@mv $(RESOURCES)/keep_sm_$*/train_gpt.ptx $(RESOURCES)/sm_$*.ptx && rm -rf $(RESOURCES)/keep_sm_$* && mv $@.tmp $@

# ---- GPU probes (dev/probe/) ---------------------------------------------------------------------
PROBE_DEPS := llmc/cuda_common.cuh llmc/utils.h

# what the probe build found, for tests/t_probe_build.sh and scripts/gpu_probe.sh
.PHONY: probe-config
probe-config:
	@echo "nvcc=$(NVCC)"
	@echo "nccl_home=$(if $(NCCL_LDLIBS),$(NCCL_HOME))"
	@echo "nccl_ldlibs=$(NCCL_LDLIBS)"
	@echo "cudnn_home=$(CUDNN_HOME)"

# the copy ceiling is measured with dev/cuda/ceilings.h
$(BUILD)/ceilings: dev/probe/ceilings.cu $(PROBE_DEPS) dev/cuda/ceilings.h
	$(NEED_NVCC)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $< -o $@ $(NVCC_LDLIBS)

# why cuBLASLt refuses fp8 GEMMs: the setups side by side (the trainer's own call included)
$(BUILD)/fp8_gemm: dev/probe/fp8_gemm.cu $(PROBE_DEPS) $(HEADERS) $(CUDA_HEADERS)
	$(NEED_NVCC)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $< -o $@ $(NVCC_LDLIBS) -ldl

$(BUILD)/nccl_ranks: dev/probe/nccl_ranks.cu $(PROBE_DEPS)
	$(NEED_NVCC)
	@test -n "$(NCCL_LDLIBS)" || { echo "error: $@ needs NCCL and this build has none (NO_NCCL is set, or no nccl.h under CUDA_HOME, /usr, /usr/local or the nvidia.nccl wheel of $(PYTHON)); set NCCL_HOME=<dir with include/nccl.h and lib/> or PYTHON=<python3 with the wheel>"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $< -o $@ $(NCCL_LDLIBS)

# ---- test tooling: make test, test-quick -------------------------------------------------------
# what `make test` builds before it runs tests/t_*.sh: every program of this Makefile that this machine can
# build, but the fuzzers and the sanitized copies
ALL_TEST_DEPS := train_gpt_cpu test_gpt_cpu $(BUILD)/prepare $(BUILD)/ckpt_convert $(BUILD)/test_datasets $(BUILD)/test_parallel $(BUILD)/test_comm_mpi \
                 $(BUILD)/test_tokenizer $(BUILD)/test_launch \
                 $(if $(MPI_CFLAGS),$(BUILD)/test_comm_emu $(BUILD)/train_gpt_emu $(BUILD)/train_gpt_fp32_emu $(BUILD)/train_gpt_fp16_emu \
                 $(BUILD)/train_gpt_streams_emu) $(BUILD)/test_gpt_emu $(BUILD)/test_gpt_fp32_emu $(BUILD)/fp8_gemm_emu $(BUILD)/gpukit/states/made
ifneq ($(NVCC),)
  ALL_TEST_DEPS += train_gpt test_gpt train_gpt_fp32 test_gpt_fp32 train_gpt_fp16 test_gpt_fp16 devcuda $(BUILD)/ceilings $(BUILD)/fp8_gemm $(BUILD)/test_fp8 \
                   $(if $(NCCL_LDLIBS),$(BUILD)/nccl_ranks $(BUILD)/test_comm) gpu-kit $(RESOURCE_LOGS)
endif
# the tests that take seconds (t_attention, t_matmul_emulated and t_widths about half a minute each on 2 cores)
QUICK_TESTS := t_cpu_units t_datasets t_tokenizer t_bad_inputs t_resume t_attention t_matmul_emulated t_widths t_comm t_comm_mpi

deps:
	@bash scripts/install_deps.sh

# `make test` first installs missing dependencies (or names the command), then re-reads this
# Makefile so that MPI and NCCL detection sees them; it builds with TEST_JOBS jobs and runs up to
# TEST_JOBS test scripts at once (scripts/run_tests.sh -j; default: the machine's cores).
TEST_JOBS ?= $(shell nproc 2> /dev/null || echo 1)
test: deps
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) test_all

test_all: $(ALL_TEST_DEPS)
	@bash scripts/run_tests.sh -j $(TEST_JOBS)

test-quick: train_gpt_cpu test_gpt_cpu $(BUILD)/prepare $(BUILD)/test_datasets $(BUILD)/test_tokenizer
	@bash scripts/run_tests.sh $(QUICK_TESTS)

# `make coverage`: how much of the device code `make test` executes. Every emulated program is built with gcc's
# --coverage (tests/cuda_emu/build.sh with EMU_COVERAGE), the suite's scripts that run emulated programs run (logs in
# $(BUILD)/coverage_logs; the others execute no device code), and scripts/coverage.py sums the counts of all
# programs and processes: lines and branches of train_gpt.cu and of each header under llmc/, the kernels' lines, and
# every line never executed ($(BUILD)/coverage/unexecuted.txt). The instrumented programs are deleted afterwards, so
# the next build makes them plain.
EMU_PROGRAMS := $(BUILD)/train_gpt_emu $(BUILD)/train_gpt_fp32_emu $(BUILD)/train_gpt_fp16_emu $(BUILD)/train_gpt_streams_emu $(BUILD)/test_comm_emu
COVERAGE_TESTS = $(basename $(notdir $(shell grep -l -e '_emu' -e 'cuda_emu/build.sh' tests/t_*.sh)))
coverage: deps
	rm -rf $(BUILD)/coverage $(BUILD)/coverage_logs $(EMU_PROGRAMS)
	-EMU_COVERAGE=$(abspath $(BUILD)/coverage) TEST_LOG_DIR=$(BUILD)/coverage_logs $(MAKE) --no-print-directory -j$(TEST_JOBS) coverage_run
	rm -f $(EMU_PROGRAMS)
	$(PYTHON) scripts/coverage.py $(BUILD)/coverage --unexecuted $(BUILD)/coverage/unexecuted.txt
coverage_run: $(ALL_TEST_DEPS)
	@bash scripts/run_tests.sh -j $(TEST_JOBS) $(COVERAGE_TESTS)

# ---- emulated builds: CUDA sources built with g++ against the host emulation ---------------------
# tests/cuda_emu/build.sh SOURCE OUTPUT FLAGS... -- LIBS... is the one recipe of every emulated build, these and the
# ones tests/t_attention.sh, t_fp8.sh, t_gpu_emulated.sh and t_matmul_emulated.sh make: it copies the sources with
# their kernel launches rewritten (tests/cuda_emu/rewrite.py) into OUTPUT_src/ and compiles SOURCE's copy with the
# emulation's headers first on the include path. The builds differ only in their flags.
EMU_BUILD = CXX="$(CXX)" PYTHON="$(PYTHON)" bash tests/cuda_emu/build.sh
EMU_DEPS := tests/cuda_emu/build.sh tests/cuda_emu/rewrite.py tests/cuda_emu/streams.cpp \
            $(wildcard tests/cuda_emu/include/*.h tests/cuda_emu/include/llmc/* tests/cuda_emu/include/nvtx3/*)

# tests/t_comm.sh: llmc/parallel/comm_nccl.cuh's test program against the emulated CUDA runtime and NCCL (NCCL over
# MPI), for mpirun on the CPU
$(BUILD)/test_comm_emu: $(COMM_NCCL_DEPS) $(EMU_DEPS)
	@test -n "$(MPI_CFLAGS)" || { echo "error: $@ needs MPI (mpicxx on PATH, NO_MPI unset)"; exit 1; }
	$(EMU_BUILD) tests/test_comm.cu $@ -std=c++17 -O1 -Wall -Wextra -Wno-unused-parameter -Wno-unused-function \
	    -Wno-unknown-pragmas -pthread -DUSE_NCCL $(MPI_CFLAGS) -- $(MPI_LIBS)

# tests/t_gpu_multirank.sh and tests/t_gpu_pp.sh: train_gpt.cu's own main built with g++ against the emulated CUDA
# runtime, cuBLASLt and NCCL (tests/cuda_emu), as the nvcc build with NCCL is (-DUSE_NCCL; MPI's headers and library
# serve only the emulated NCCL, not -DUSE_MPI): each process one emulated GPU, several under mpirun. The bf16 build,
# the fp32 one (-DENABLE_FP32) and the fp16 one (-DENABLE_FP16), each from its own rewritten copy of the sources ($@_src).
EMU_TRAIN_FLAGS := -std=c++17 -O2 -fopenmp -pthread -fno-strict-aliasing -Wall -Wextra -Wno-unused-parameter \
                   -Wno-unused-function -Wno-unknown-pragmas -DUSE_NCCL -DUSE_CUDNN
$(BUILD)/train_gpt_emu: train_gpt.cu $(HEADERS) $(CUDA_HEADERS) $(EMU_DEPS)
	@test -n "$(MPI_CFLAGS)" || { echo "error: $@ needs MPI (mpicxx on PATH, NO_MPI unset) for the emulated NCCL"; exit 1; }
	$(EMU_BUILD) train_gpt.cu $@ $(EMU_TRAIN_FLAGS) $(filter-out -DUSE_MPI,$(MPI_CFLAGS)) -- $(MPI_LIBS)

$(BUILD)/train_gpt_fp32_emu: train_gpt.cu $(HEADERS) $(CUDA_HEADERS) $(EMU_DEPS)
	@test -n "$(MPI_CFLAGS)" || { echo "error: $@ needs MPI (mpicxx on PATH, NO_MPI unset) for the emulated NCCL"; exit 1; }
	$(EMU_BUILD) train_gpt.cu $@ $(EMU_TRAIN_FLAGS) -DENABLE_FP32 $(filter-out -DUSE_MPI,$(MPI_CFLAGS)) -- $(MPI_LIBS)

$(BUILD)/train_gpt_fp16_emu: train_gpt.cu $(HEADERS) $(CUDA_HEADERS) $(EMU_DEPS)
	@test -n "$(MPI_CFLAGS)" || { echo "error: $@ needs MPI (mpicxx on PATH, NO_MPI unset) for the emulated NCCL"; exit 1; }
	$(EMU_BUILD) train_gpt.cu $@ $(EMU_TRAIN_FLAGS) -DENABLE_FP16 $(filter-out -DUSE_MPI,$(MPI_CFLAGS)) -- $(MPI_LIBS)

# tests/t_gpu_sprint.sh: what scripts/gpu_check.sh sprint runs on a GPU, built against the emulation for its run on the
# CPU (gpu_check.sh --programs): test_gpt.cu (bf16, fp32 and fp16, as tests/t_gpu_emulated.sh builds them) and the fp8 probe
$(BUILD)/test_gpt_emu: test_gpt.cu train_gpt.cu tests/check.h tests/ref_state.h $(HEADERS) $(CUDA_HEADERS) $(EMU_DEPS)
	$(EMU_BUILD) test_gpt.cu $@ -std=c++17 -O2 -fopenmp -pthread -fno-strict-aliasing -Wno-unknown-pragmas -I.

$(BUILD)/test_gpt_fp32_emu: test_gpt.cu train_gpt.cu tests/check.h tests/ref_state.h $(HEADERS) $(CUDA_HEADERS) $(EMU_DEPS)
	$(EMU_BUILD) test_gpt.cu $@ -std=c++17 -O2 -fopenmp -pthread -fno-strict-aliasing -Wno-unknown-pragmas -I. -DENABLE_FP32

$(BUILD)/test_gpt_fp16_emu: test_gpt.cu train_gpt.cu tests/check.h tests/ref_state.h $(HEADERS) $(CUDA_HEADERS) $(EMU_DEPS)
	$(EMU_BUILD) test_gpt.cu $@ -std=c++17 -O2 -fopenmp -pthread -fno-strict-aliasing -Wno-unknown-pragmas -I. -DENABLE_FP16

$(BUILD)/fp8_gemm_emu: dev/probe/fp8_gemm.cu $(HEADERS) $(CUDA_HEADERS) $(EMU_DEPS)
	$(EMU_BUILD) dev/probe/fp8_gemm.cu $@ -std=c++17 -O1 -fopenmp -pthread -fno-strict-aliasing -Wall -Wextra \
	    -Wno-unused-parameter -Wno-unused-function -Wno-unknown-pragmas -I. -- -ldl

# tests/t_streams.sh: the bf16 build in the emulation's stream mode (streams run concurrently in a seeded order, a
# happens-before checker on every access; tests/cuda_emu/include/cuda_emu_streams.h)
$(BUILD)/train_gpt_streams_emu: train_gpt.cu $(HEADERS) $(CUDA_HEADERS) $(EMU_DEPS)
	@test -n "$(MPI_CFLAGS)" || { echo "error: $@ needs MPI (mpicxx on PATH, NO_MPI unset) for the emulated NCCL"; exit 1; }
	$(EMU_BUILD) train_gpt.cu $@ $(EMU_TRAIN_FLAGS) -DEMU_STREAMS $(filter-out -DUSE_MPI,$(MPI_CFLAGS)) -- $(MPI_LIBS)

# ---- fuzzing (clang's libFuzzer), not part of `make test` ----------------------------------------
# The data set fuzzer is one source, the parser picked by FUZZ_PARSER (1 idx, 2 npy/npz, 3 llm.c shard);
# FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION skips the npz CRC check so inputs reach the npy parser.
FUZZ_CXX ?= clang++
FUZZ_SECONDS ?= 180
FUZZ_FLAGS := -std=c++17 -I. -O1 -g -Wall -Wextra -Wno-unused-function \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
NEED_FUZZ_CXX = @command -v $(FUZZ_CXX) >/dev/null || { echo "error: $(FUZZ_CXX) not found; install it with: apt-get install -y clang libclang-rt-14-dev"; exit 1; }
DATASETS_FUZZERS := idx:1 npz:2 shard:3

define DATASETS_FUZZ_RULE
$(BUILD)/fuzz_datasets_$(word 1,$(subst :, ,$(1))): dev/fuzz/fuzz_datasets.cpp $(DATASETS_HEADERS)
	$$(NEED_FUZZ_CXX)
	@mkdir -p $(BUILD)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -DFUZZ_PARSER=$(word 2,$(subst :, ,$(1))) $$< -o $$@
endef
$(foreach f,$(DATASETS_FUZZERS),$(eval $(call DATASETS_FUZZ_RULE,$(f))))

$(BUILD)/fuzz_tokenizer: dev/fuzz/fuzz_tokenizer.cpp $(TOKENIZER_HEADERS)
	$(NEED_FUZZ_CXX)
	@mkdir -p $(BUILD)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $< -o $@

.PHONY: fuzz_datasets fuzz_datasets_run fuzz_tokenizer fuzz_tokenizer_run
fuzz_datasets: $(foreach f,$(DATASETS_FUZZERS),$(BUILD)/fuzz_datasets_$(word 1,$(subst :, ,$(f))))
fuzz_tokenizer: $(BUILD)/fuzz_tokenizer

# New corpus entries go to build/fuzz_corpus/<name>, crash inputs to build/ (the committed seeds in
# dev/fuzz/corpus/ stay unchanged). The tokenizer's run needs both rank files.
fuzz_datasets_run: fuzz_datasets
	@for name in idx npz shard; do \
	    mkdir -p $(BUILD)/fuzz_corpus/datasets/$$name; \
	    echo "fuzz_datasets_$$name: $(FUZZ_SECONDS) s"; \
	    $(BUILD)/fuzz_datasets_$$name -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=$(BUILD)/ \
	        $(BUILD)/fuzz_corpus/datasets/$$name dev/fuzz/corpus/datasets/$$name || exit 1; \
	done

fuzz_tokenizer_run: fuzz_tokenizer
	bash dev/data/fetch_tokenizers.sh
	@mkdir -p $(BUILD)/fuzz_corpus/tokenizer
	$(BUILD)/fuzz_tokenizer -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=$(BUILD)/ \
	    $(BUILD)/fuzz_corpus/tokenizer dev/fuzz/corpus/tokenizer

# The format fuzzer is one source, the format picked by FUZZ_FORMAT (1 safetensors, 2 checkpoint state.json
# and DONE, 3 JSON); seeds in dev/fuzz/corpus/formats/<name>.
FORMATS_FUZZERS := safetensors:1 ckpt:2 json:3
define FORMATS_FUZZ_RULE
$(BUILD)/fuzz_formats_$(word 1,$(subst :, ,$(1))): dev/fuzz/fuzz_formats.cpp llmc/run/safetensors.h llmc/run/checkpoint.h llmc/json.h llmc/utils.h
	$$(NEED_FUZZ_CXX)
	@mkdir -p $(BUILD)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -DFUZZ_FORMAT=$(word 2,$(subst :, ,$(1))) $$< -o $$@
endef
$(foreach f,$(FORMATS_FUZZERS),$(eval $(call FORMATS_FUZZ_RULE,$(f))))

.PHONY: fuzz_formats fuzz_formats_run
fuzz_formats: $(foreach f,$(FORMATS_FUZZERS),$(BUILD)/fuzz_formats_$(word 1,$(subst :, ,$(f))))

fuzz_formats_run: fuzz_formats
	@for name in safetensors ckpt json; do \
	    mkdir -p $(BUILD)/fuzz_corpus/formats/$$name; \
	    echo "fuzz_formats_$$name: $(FUZZ_SECONDS) s"; \
	    $(BUILD)/fuzz_formats_$$name -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=$(BUILD)/ \
	        $(BUILD)/fuzz_corpus/formats/$$name dev/fuzz/corpus/formats/$$name || exit 1; \
	done

# ---- sanitizers (AddressSanitizer + UndefinedBehaviorSanitizer), not part of `make test` ---------
# The tests run ./train_gpt_cpu and build/<program> from the repository root, so the sanitized programs
# are built in a copy of the tree, $(ASAN_TREE) (the tracked and new files, and the fetched tokenizer
# files when present), by this Makefile with ASAN_CXXFLAGS; the normal build is untouched. A sanitizer
# error aborts (exit 134, which no test takes for die()'s exit 1), AddressSanitizer's reports also go
# to $(ASAN_TREE)/sanitizer_logs/, and any report there or "runtime error:" in the tests' logs fails
# the target. Leak detection is off (detect_leaks=0): OpenMPI and the OpenMP runtime keep allocations
# until exit, which LeakSanitizer reports. The optimisation flags are the normal build's (-O3 -march=native), so that
# the sanitized programs compute what the tested ones do: t_parallel's tolerances are measured on that build, and at
# -O1 (no vectorised sums) six tensor-parallel weight comparisons land at 1.35-1.41e-3 against its 1e-3.
ASAN_TREE := $(BUILD)/asan
ASAN_CXXFLAGS := -O3 -march=native -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
# (t_default is left out: its 60 steps of a GPT-2-vocabulary model take about 40 s each under the sanitizers on 2
# cores; its readers, tokenizer and sampling run here in t_datasets, t_tokenizer and t_resume)
ASAN_TESTS ?= t_cpu_units t_resume t_bad_inputs t_paths t_datasets t_tokenizer t_guard t_parallel
ASAN_PROGRAMS := train_gpt_cpu test_gpt_cpu build/prepare build/test_datasets build/test_parallel build/test_comm_mpi build/test_tokenizer

.PHONY: test-asan
test-asan:
	@mkdir -p $(ASAN_TREE)
	@{ git ls-files -co --exclude-standard; ls -d data/tokenizers/*.tiktoken tests/tokenizer/node_modules 2>/dev/null; } | \
	    grep -v '^$(BUILD)/' | tar -cf - -T - | tar -xf - -C $(ASAN_TREE)
	@cd $(ASAN_TREE) && CXXFLAGS="$(ASAN_CXXFLAGS)" $(MAKE) --no-print-directory BUILD=build $(ASAN_PROGRAMS)
	@rm -rf $(ASAN_TREE)/sanitizer_logs && mkdir -p $(ASAN_TREE)/sanitizer_logs
	@cd $(ASAN_TREE) && log=$$(pwd)/sanitizer_logs && \
	    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:log_path=$$log/asan \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:abort_on_error=1 \
	    bash scripts/run_tests.sh $(ASAN_TESTS); rc=$$?; \
	    found=$$(grep -rlIE "runtime error:|ERROR: AddressSanitizer" $$log build 2>/dev/null); \
	    if [ -n "$$found" ]; then echo "error: sanitizer reports in:"; echo "$$found"; exit 1; fi; exit $$rc

# ---- the GPU kit ---------------------------------------------------------------------------------
GPU_KIT ?= gpukit
# the reference states made on the GPU machine (scripts/gpu_check.sh correct) instead of carried: a state
# takes about 24 bytes per parameter (weights, gradients, updated weights, and the optimizer check's two
# gradients and update, in fp32): the head-dim-64 ones 10-11 MB, gpt_alibi_hd80 90 MB, llama_gqa_hd128 150 MB,
# gpt3_125m_2_layers (53M parameters) 1.3 GB. Three tiny states (GPT, LLaMA with GQA, LLaMA's switches: 33 MB)
# travel in the kit, which with the tree comes to about 60 of the 64 MiB allowed; the others take seconds to
# minutes there
GPU_KIT_DEVICE_STATES := llama32_style_hd64 flagperf_style_hd64 gpt_rope_mqa_hd64 gpt_alibi_hd80 llama_gqa_hd128 gpt3_125m_2_layers \
                         gpt_documents llama_documents
# train_gpt_cpu for the GPU machine's CPU: no -march=native (any x86-64-v3 CPU), no MPI (none there)
GPU_KIT_CXXFLAGS := -O3 -march=x86-64-v3 -std=c++17 -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -I. -fopenmp

GPU_KIT_PROGRAMS := train_gpt test_gpt train_gpt_fp32 test_gpt_fp32 train_gpt_fp16 test_gpt_fp16 devcuda $(BUILD)/ceilings $(BUILD)/fp8_gemm $(BUILD)/test_fp8 \
                    $(if $(NCCL_LDLIBS),$(BUILD)/nccl_ranks) $(BUILD)/gpukit/train_gpt_cpu $(BUILD)/gpukit/ckpt_convert \
                    $(if $(CUDNN_HOME),$(BUILD)/train_gpt_cudnn $(BUILD)/test_attention)

$(BUILD)/gpukit/train_gpt_cpu: train_gpt_cpu.cpp $(HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(GPU_KIT_CXXFLAGS) $< -o $@ -lm
	@echo "$(CXX) $(GPU_KIT_CXXFLAGS)" > $@.flags

# the checkpoint converter the multirank checks use, built the same way
$(BUILD)/gpukit/ckpt_convert: dev/ckpt_convert.cpp $(HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(GPU_KIT_CXXFLAGS) $< -o $@ -lm

# the states depend on the trainer that exports their initial weights, the reference that steps them and
# the list above
$(BUILD)/gpukit/states/made: train_gpt_cpu train_gpt.py tests/gpu_cases.sh scripts/gpu_kit.sh Makefile
	@bash scripts/gpu_kit.sh states $(@D) "$(GPU_KIT_DEVICE_STATES)"
	@touch $@

.PHONY: gpu-kit
gpu-kit: $(GPU_KIT_PROGRAMS) $(BUILD)/gpukit/states/made
	$(NEED_NVCC)
	@bash scripts/gpu_kit.sh assemble --kit $(GPU_KIT) --build $(BUILD) --states $(BUILD)/gpukit/states \
	    --nvcc "$(NVCC)" --flags "$(NVCC_FLAGS)" --nccl "$(NCCL_LDLIBS)" --device-states "$(GPU_KIT_DEVICE_STATES)" \
	    --cudnn "$(CUDNN_HOME)"

clean:
	rm -rf $(BUILD) train_gpt_cpu test_gpt_cpu train_gpt test_gpt train_gpt_fp32 test_gpt_fp32 train_gpt_fp16 test_gpt_fp16
