# mk/gpu_kit.mk: the GPU kit, one git-ignored folder that travels with the repository to a GPU machine
# (scripts/gpu_lib.sh describes its layout; docs/gpu.md the plan that uses it).
#   make gpu-kit            builds what is missing (the CUDA programs of mk/train_gpt.mk, mk/devcuda.mk and
#                           mk/probe.mk, a portable train_gpt_cpu, the small reference states), then
#                           assembles $(GPU_KIT)/ with its MANIFEST and prints both; fails over 64 MiB
# tests/t_gpu_kit.sh checks the kit and the stages of scripts/gpu_check.sh without a GPU.

GPU_KIT ?= gpukit
# the reference states made on the GPU machine (scripts/gpu_check.sh correct) instead of carried: a state
# takes about 12 bytes per parameter (weights, gradients, updated weights in fp32): gpt_hd80 31 MB,
# llama_gqa_hd128 75 MB, gpt3_125m_2_layers (53M parameters) 660 MB; the five others, 5-6 MB each,
# fit beside the programs in the 64 MiB the kit and the tree may use
GPU_KIT_DEVICE_STATES := gpt_hd80 llama_gqa_hd128 gpt3_125m_2_layers
# train_gpt_cpu for the GPU machine's CPU: no -march=native (any x86-64-v3 CPU), no MPI (none there)
GPU_KIT_CXXFLAGS := -O3 -march=x86-64-v3 -std=c++17 -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -I. -fopenmp

GPU_KIT_PROGRAMS := train_gpt test_gpt train_gpt_fp32 test_gpt_fp32 $(DEVCUDA_BINS) $(BUILD)/ceilings \
                    $(if $(NCCL_LDLIBS),$(BUILD)/nccl_ranks) $(BUILD)/gpukit/train_gpt_cpu

$(BUILD)/gpukit/train_gpt_cpu: train_gpt_cpu.cpp $(HEADERS)
	@mkdir -p $(@D)
	$(CXX) $(GPU_KIT_CXXFLAGS) $< -o $@ -lm
	@echo "$(CXX) $(GPU_KIT_CXXFLAGS)" > $@.flags

# the states depend on the trainer that exports their initial weights, the reference that steps them and
# the list above
$(BUILD)/gpukit/states/made: train_gpt_cpu train_gpt.py tests/gpu_cases.sh scripts/gpu_kit.sh mk/gpu_kit.mk
	@bash scripts/gpu_kit.sh states $(@D) "$(GPU_KIT_DEVICE_STATES)"
	@touch $@

.PHONY: gpu-kit
gpu-kit: $(GPU_KIT_PROGRAMS) $(BUILD)/gpukit/states/made
	@test -n "$(NVCC)" || { echo "error: $@ needs nvcc (none on PATH or in CUDA_HOME=$(CUDA_HOME)/bin)"; exit 1; }
	@bash scripts/gpu_kit.sh assemble --kit $(GPU_KIT) --build $(BUILD) --states $(BUILD)/gpukit/states \
	    --nvcc "$(NVCC)" --flags "$(NVCC_FLAGS)" --nccl "$(NCCL_LDLIBS)" --device-states "$(GPU_KIT_DEVICE_STATES)"

ifneq ($(NVCC),)
  ALL_TEST_DEPS += gpu-kit
endif
