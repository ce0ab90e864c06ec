# mk/devcuda_attn.mk: the attention and classifier programs of the kernel playground (dev/cuda), built with
# the top Makefile's nvcc settings into $(BUILD)/devcuda/, each compile's output kept in <binary>.log as
# mk/devcuda.mk does (the CPU reference in llmc/ref_ops.h uses OpenMP: -Xcompiler -fopenmp).
#   $(BUILD)/devcuda/attention_forward    flash attention forward versions vs the CPU reference, TFLOP/s
#   $(BUILD)/devcuda/attention_backward   flash attention backward versions vs the CPU reference, TFLOP/s
#   $(BUILD)/devcuda/fused_classifier     chunked LM head + softmax cross-entropy vs the full-logits baseline
#   make devcuda-attn-resources           ptxas registers / spills per kernel of these programs (-Xptxas -v)
# dev/cuda/attention_sdpa.py (PyTorch scaled_dot_product_attention at the same shapes) needs no build.

DEVCUDA_ATTN_BINS := $(BUILD)/devcuda/attention_forward $(BUILD)/devcuda/attention_backward $(BUILD)/devcuda/fused_classifier
DEVCUDA_ATTN_DEPS := dev/cuda/common.h dev/cuda/attention_cases.h dev/cuda/ceilings.h llmc/cuda_common.cuh llmc/packed.cuh llmc/precision.cuh llmc/utils.h llmc/rng.h \
                     llmc/ref_ops.h llmc/config.h

$(BUILD)/devcuda/attention_forward: dev/cuda/attention_forward.cu llmc/attention.cuh llmc/attention_rowwise.cuh $(DEVCUDA_ATTN_DEPS)
$(BUILD)/devcuda/attention_backward: dev/cuda/attention_backward.cu llmc/attention.cuh llmc/attention_rowwise.cuh $(DEVCUDA_ATTN_DEPS)
$(BUILD)/devcuda/fused_classifier: dev/cuda/fused_classifier.cu llmc/classifier.cuh llmc/matmul.cuh $(DEVCUDA_ATTN_DEPS)

$(DEVCUDA_ATTN_BINS):
	@test -n "$(NVCC)" || { echo "error: $@ needs nvcc (none on PATH or in CUDA_HOME=$(CUDA_HOME)/bin)"; exit 1; }
	@mkdir -p $(@D)
	@echo "$(NVCC) $(NVCC_FLAGS) -Xcompiler -fopenmp $< -o $@ $(NVCC_LDLIBS)"
	@$(NVCC) $(NVCC_FLAGS) -Xcompiler -fopenmp $< -o $@ $(NVCC_LDLIBS) > $@.log 2>&1 || { cat $@.log; rm -f $@; exit 1; }
	@cat $@.log

.PHONY: devcuda-attn-resources
devcuda-attn-resources:
	@test -n "$(NVCC)" || { echo "error: $@ needs nvcc (none on PATH or in CUDA_HOME=$(CUDA_HOME)/bin)"; exit 1; }
	@mkdir -p $(BUILD)/devcuda
	@for f in attention_forward attention_backward fused_classifier; do \
	    $(NVCC) $(NVCC_FLAGS) -Xcompiler -fopenmp -Xptxas -v -c dev/cuda/$$f.cu -o $(BUILD)/devcuda/$$f.resources.o \
	        > $(BUILD)/devcuda/$$f.resources.log 2>&1 || { cat $(BUILD)/devcuda/$$f.resources.log; exit 1; }; \
	    grep -E "Compiling entry|registers|spill" $(BUILD)/devcuda/$$f.resources.log | sed -e 's/ptxas info *: //'; \
	done

ifneq ($(NVCC),)
  ALL_TEST_DEPS += $(DEVCUDA_ATTN_BINS)
endif
