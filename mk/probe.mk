# mk/probe.mk: GPU probe programs (dev/probe/), built with the top Makefile's nvcc settings.
#   $(BUILD)/ceilings     copy bandwidth and cuBLASLt bf16/fp8 GEMM ceilings
#   $(BUILD)/nccl_ranks   NCCL collectives checked with several ranks on one GPU (only when NCCL is found)

PROBE_DEPS := llmc/cuda_common.cuh llmc/utils.h

# what the probe build found, for tests/t_probe_build.sh and scripts/gpu_probe.sh
.PHONY: probe-config
probe-config:
	@echo "nvcc=$(NVCC)"
	@echo "nccl_home=$(if $(NCCL_LDLIBS),$(NCCL_HOME))"
	@echo "nccl_ldlibs=$(NCCL_LDLIBS)"

$(BUILD)/ceilings: dev/probe/ceilings.cu $(PROBE_DEPS)
	@test -n "$(NVCC)" || { echo "error: $@ needs nvcc (none on PATH or in CUDA_HOME=$(CUDA_HOME)/bin)"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $< -o $@ $(NVCC_LDLIBS)

$(BUILD)/nccl_ranks: dev/probe/nccl_ranks.cu $(PROBE_DEPS)
	@test -n "$(NVCC)" || { echo "error: $@ needs nvcc (none on PATH or in CUDA_HOME=$(CUDA_HOME)/bin)"; exit 1; }
	@test -n "$(NCCL_LDLIBS)" || { echo "error: $@ needs NCCL and this build has none (NO_NCCL is set, or no nccl.h under CUDA_HOME, /usr, /usr/local or the nvidia.nccl wheel of $(PYTHON)); set NCCL_HOME=<dir with include/nccl.h and lib/> or PYTHON=<python3 with the wheel>"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $< -o $@ $(NCCL_LDLIBS)

ifneq ($(NVCC),)
  ALL_TEST_DEPS += $(BUILD)/ceilings
  ifneq ($(NCCL_LDLIBS),)
    ALL_TEST_DEPS += $(BUILD)/nccl_ranks
  endif
endif
