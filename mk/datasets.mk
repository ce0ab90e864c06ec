# mk/datasets.mk: token data sets (llmc/datasets.h, llmc/zip_npy.h) and the data preparation tool.
#   make build/prepare          text / JSONL -> llm.c shards or a Megatron indexed data set
#   make build/test_datasets    built by `make test`; tests/t_datasets.sh runs it
#   make fuzz_datasets          libFuzzer targets of the parsers (clang), not part of `make test`:
#                               build/fuzz_datasets_idx, _npz (npy and npz) and _shard
#   make fuzz_datasets_run FUZZ_SECONDS=180   runs each target that long (docs/data_formats.md)

DATASETS_HEADERS := llmc/datasets.h llmc/dataloader.h llmc/zip_npy.h llmc/rng.h llmc/utils.h

$(BUILD)/prepare: dev/data/prepare.cpp llmc/tokenizer.h llmc/unicode_tables.h llmc/json.h llmc/utils.h
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

$(BUILD)/test_datasets: tests/test_datasets.cpp $(DATASETS_HEADERS)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

ALL_TEST_DEPS += $(BUILD)/prepare $(BUILD)/test_datasets

# Fuzzing: one source, the parser picked by FUZZ_PARSER (1 idx, 2 npy/npz, 3 llm.c shard).
# FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION skips the npz CRC check so inputs reach the npy parser.
FUZZ_CXX ?= clang++
DATASETS_FUZZ_FLAGS := -std=c++17 -I. -O1 -g -Wall -Wextra -Wno-unused-function \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
DATASETS_FUZZERS := idx:1 npz:2 shard:3
FUZZ_SECONDS ?= 180

define DATASETS_FUZZ_RULE
$(BUILD)/fuzz_datasets_$(word 1,$(subst :, ,$(1))): dev/fuzz/fuzz_datasets.cpp $(DATASETS_HEADERS)
	@command -v $(FUZZ_CXX) >/dev/null || { echo "error: $(FUZZ_CXX) not found; install it with: apt-get install -y clang libclang-rt-14-dev"; exit 1; }
	@mkdir -p $(BUILD)
	$(FUZZ_CXX) $(DATASETS_FUZZ_FLAGS) -DFUZZ_PARSER=$(word 2,$(subst :, ,$(1))) $$< -o $$@
endef
$(foreach f,$(DATASETS_FUZZERS),$(eval $(call DATASETS_FUZZ_RULE,$(f))))

.PHONY: fuzz_datasets fuzz_datasets_run
fuzz_datasets: $(foreach f,$(DATASETS_FUZZERS),$(BUILD)/fuzz_datasets_$(word 1,$(subst :, ,$(f))))

# New corpus entries go to build/fuzz_corpus/datasets/<name> and crash inputs to build/ (the
# committed seeds stay unchanged).
fuzz_datasets_run: fuzz_datasets
	@for name in idx npz shard; do \
	    mkdir -p $(BUILD)/fuzz_corpus/datasets/$$name; \
	    echo "fuzz_datasets_$$name: $(FUZZ_SECONDS) s"; \
	    $(BUILD)/fuzz_datasets_$$name -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=$(BUILD)/ \
	        $(BUILD)/fuzz_corpus/datasets/$$name dev/fuzz/corpus/datasets/$$name || exit 1; \
	done
