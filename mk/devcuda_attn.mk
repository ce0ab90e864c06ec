# mk/devcuda_attn.mk: the compiler's resource report of the attention and classifier programs of dev/cuda
# (built, like every dev/cuda program, by mk/devcuda.mk from dev/cuda/Makefile's PROGRAMS).
#   make devcuda-attn-resources           ptxas registers / spills per kernel of these programs (-Xptxas -v)
# dev/cuda/attention_sdpa.py (PyTorch scaled_dot_product_attention at the same shapes) needs no build.

.PHONY: devcuda-attn-resources
devcuda-attn-resources:
	@test -n "$(NVCC)" || { echo "error: $@ needs nvcc (none on PATH or in CUDA_HOME=$(CUDA_HOME)/bin)"; exit 1; }
	@mkdir -p $(BUILD)/devcuda
	@for f in attention_forward attention_backward fused_classifier; do \
	    $(NVCC) $(NVCC_FLAGS) -Xcompiler -fopenmp -Xptxas -v -c dev/cuda/$$f.cu -o $(BUILD)/devcuda/$$f.resources.o \
	        > $(BUILD)/devcuda/$$f.resources.log 2>&1 || { cat $(BUILD)/devcuda/$$f.resources.log; exit 1; }; \
	    grep -E "Compiling entry|registers|spill" $(BUILD)/devcuda/$$f.resources.log | sed -e 's/ptxas info *: //'; \
	done
