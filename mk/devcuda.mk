# mk/devcuda.mk: the kernel playground dev/cuda (its own Makefile, dev/cuda/Makefile, lists the programs),
# built with the top Makefile's nvcc and flags into $(BUILD)/devcuda/ when nvcc is found.
#   make devcuda            every dev/cuda program
#   make $(BUILD)/devcuda/norm   one of them
# tests/t_devcuda_build.sh checks the binaries and their compile logs.

DEVCUDA_PROGRAMS := $(shell sed -n 's/^PROGRAMS *:= *//p' dev/cuda/Makefile)
DEVCUDA_BINS := $(addprefix $(BUILD)/devcuda/,$(DEVCUDA_PROGRAMS))

.PHONY: devcuda
devcuda: $(DEVCUDA_BINS)

$(BUILD)/devcuda/%: dev/cuda/%.cu dev/cuda/common.h dev/cuda/ceilings.h dev/cuda/attention_cases.h $(HEADERS) $(CUDA_HEADERS)
	@$(MAKE) --no-print-directory -C dev/cuda OUT=$(abspath $(BUILD)/devcuda) NVCC="$(NVCC)" NVCC_FLAGS="$(NVCC_FLAGS)" $(abspath $@)

# dev/probe/ceilings.cu measures the copy ceiling with dev/cuda/ceilings.h
$(BUILD)/ceilings: dev/cuda/ceilings.h

ifneq ($(NVCC),)
  ALL_TEST_DEPS += $(DEVCUDA_BINS)
endif
