// dev/fuzz/fuzz_datasets.cpp: libFuzzer targets for the token data set parsers (llmc/data/datasets.h,
// llmc/data/zip_npy.h). One source; -DFUZZ_PARSER picks the parser:
//   1 (build/fuzz_datasets_idx)    megatron_parse_idx: the input is an .idx; the .bin it points
//                                  into is a 4096-byte buffer
//   2 (build/fuzz_datasets_npz)    an input starting with "PK" is an _idx.npz for an _ids.npy of
//                                  64 tokens (paddle_parse_index: zip directory, npy members,
//                                  lens/docs checks); any other input is an _ids.npy
//                                  (paddle_parse_ids)
//   3 (build/fuzz_datasets_shard)  llmc_parse_shard: the input is an llm.c shard
// The parsers return an error string on bad input (nothing dies here). After a successful parse
// every token of the stream is read and the pieces are checked to tile it, so AddressSanitizer
// catches a piece that points outside its buffer. Built with FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION,
// which skips the npz CRC check so mutated members still reach the npy parser.
// Build and run: make fuzz_datasets_run FUZZ_SECONDS=180 (seeds: dev/fuzz/corpus/datasets/).
#include "llmc/data/datasets.h"

static void read_stream(const std::vector<TokenPiece>& pieces) {
    uint64_t pos = 0;
    volatile uint64_t sink = 0;  // unsigned: the sum may wrap
    for (const TokenPiece& p : pieces) {
        if (p.start != pos || p.count == 0) __builtin_trap();  // pieces must tile the stream
        for (uint64_t j = 0; j < p.count; j++) sink = sink + (uint64_t)token_value(p.data, p.type, j);
        pos += p.count;
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<TokenPiece> pieces;
    std::string err;
#if FUZZ_PARSER == 1
    static std::vector<uint8_t> bin(4096);  // the .bin: exactly 4096 bytes, so ASan sees reads past it
    err = megatron_parse_idx(data, size, bin.data(), bin.size(), 0, &pieces);
#elif FUZZ_PARSER == 2
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') err = paddle_parse_index(data, size, 64);  // lens must add up to 64
    else err = paddle_parse_ids(data, size, 0, &pieces);
#elif FUZZ_PARSER == 3
    err = llmc_parse_shard(data, size, 0, &pieces);
#else
#error "compile with -DFUZZ_PARSER=1 (Megatron .idx), 2 (PaddleNLP .npy/.npz) or 3 (llm.c shard)"
#endif
    if (err.empty()) read_stream(pieces);
    return 0;
}
