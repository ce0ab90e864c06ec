# mk/tokenizer.mk: the tokenizer's test program and fuzz target (llmc/tokenizer.h).
#   make build/test_tokenizer   built by `make test`; tests/t_tokenizer.sh runs it
#   make fuzz_tokenizer         libFuzzer target build/fuzz_tokenizer (clang), not part of `make test`
#   make fuzz_tokenizer_run FUZZ_SECONDS=180   runs it that long from the repo root (docs/tokenizer.md)

TOKENIZER_HEADERS := llmc/tokenizer.h llmc/unicode_tables.h llmc/utils.h

$(BUILD)/test_tokenizer: tests/tokenizer/test_tokenizer.cpp $(TOKENIZER_HEADERS)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

ALL_TEST_DEPS += $(BUILD)/test_tokenizer

FUZZ_CXX ?= clang++
FUZZ_SECONDS ?= 180
$(BUILD)/fuzz_tokenizer: dev/fuzz/fuzz_tokenizer.cpp $(TOKENIZER_HEADERS)
	@command -v $(FUZZ_CXX) >/dev/null || { echo "error: $(FUZZ_CXX) not found; install it with: apt-get install -y clang libclang-rt-14-dev"; exit 1; }
	@mkdir -p $(BUILD)
	$(FUZZ_CXX) -std=c++17 -I. -O1 -g -Wall -Wextra -Wno-unused-function \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $< -o $@

.PHONY: fuzz_tokenizer fuzz_tokenizer_run
fuzz_tokenizer: $(BUILD)/fuzz_tokenizer

# New corpus entries go to build/fuzz_corpus/tokenizer, crash inputs to build/ (the committed
# seeds in dev/fuzz/corpus/tokenizer stay unchanged). Needs both rank files.
fuzz_tokenizer_run: fuzz_tokenizer
	bash dev/data/fetch_tokenizers.sh
	@mkdir -p $(BUILD)/fuzz_corpus/tokenizer
	$(BUILD)/fuzz_tokenizer -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=$(BUILD)/ \
	    $(BUILD)/fuzz_corpus/tokenizer dev/fuzz/corpus/tokenizer
