# mk/train_gpt.mk: the CUDA trainer and its GPU tests, built with the top Makefile's nvcc flags
# (sm_80 and sm_90a) when nvcc is found. One GPU: NCCL and MPI are not needed (NO_NCCL=1 works).
#   make train_gpt     the CUDA trainer (train_gpt.cu)
#   make test_gpt      GPU tests against the PyTorch reference states (tests/t_gpu.sh runs them)
#   make train_gpt_fp32 test_gpt_fp32   the same programs built with PRECISION=FP32 (floatX = float), for
#                      tight tests; `make train_gpt PRECISION=FP32` builds the fp32 trainer under the usual name
# tests/t_train_gpt_host.sh runs the host-side modes of train_gpt (no GPU needed).

TRAIN_GPT_DEPS := $(HEADERS) $(CUDA_HEADERS)
# llmc/rope.cuh computes its tables with llmc/ref_ops.h, whose loops carry OpenMP pragmas
TRAIN_GPT_FLAGS := -Xcompiler -fopenmp
TRAIN_GPT_LIBS := $(NVCC_LDLIBS) -lgomp

train_gpt: train_gpt.cu $(TRAIN_GPT_DEPS)
	@test -n "$(NVCC)" || { echo "error: $@ needs nvcc (none on PATH or in CUDA_HOME=$(CUDA_HOME)/bin)"; exit 1; }
	$(NVCC) $(NVCC_FLAGS) $(TRAIN_GPT_FLAGS) $< -o $@ $(TRAIN_GPT_LIBS)

test_gpt: test_gpt.cu train_gpt.cu tests/check.h $(TRAIN_GPT_DEPS)
	@test -n "$(NVCC)" || { echo "error: $@ needs nvcc (none on PATH or in CUDA_HOME=$(CUDA_HOME)/bin)"; exit 1; }
	$(NVCC) $(NVCC_FLAGS) $(TRAIN_GPT_FLAGS) $< -o $@ $(TRAIN_GPT_LIBS)

train_gpt_fp32: train_gpt.cu $(TRAIN_GPT_DEPS)
	@test -n "$(NVCC)" || { echo "error: $@ needs nvcc (none on PATH or in CUDA_HOME=$(CUDA_HOME)/bin)"; exit 1; }
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $(TRAIN_GPT_FLAGS) $< -o $@ $(TRAIN_GPT_LIBS)

test_gpt_fp32: test_gpt.cu train_gpt.cu tests/check.h $(TRAIN_GPT_DEPS)
	@test -n "$(NVCC)" || { echo "error: $@ needs nvcc (none on PATH or in CUDA_HOME=$(CUDA_HOME)/bin)"; exit 1; }
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $(TRAIN_GPT_FLAGS) $< -o $@ $(TRAIN_GPT_LIBS)

ifneq ($(NVCC),)
  ALL_TEST_DEPS += train_gpt test_gpt train_gpt_fp32 test_gpt_fp32
endif
