// dev/fuzz/fuzz_formats.cpp: libFuzzer targets for the file formats a run reads besides its data:
// llmc/run/safetensors.h, llmc/run/checkpoint.h's state.json and DONE, and llmc/json.h. One source;
// -DFUZZ_FORMAT picks the format:
//   1 (build/fuzz_formats_safetensors)  st_parse: the input is a whole .safetensors file (header
//                                       size, header JSON, offsets, dtypes, shapes); after a
//                                       successful parse every tensor of a float or integer dtype
//                                       is read (st_read_f32 / st_read_i32) into a buffer of
//                                       exactly numel elements, so AddressSanitizer catches a
//                                       tensor that points outside the file or the buffer
//   2 (build/fuzz_formats_ckpt)         the input is both a DONE marker (ckpt_parse_done) and a
//                                       state.json (ckpt_parse_state), the parsers ckpt_open
//                                       and --resume auto use; an accepted marker names plain
//                                       files only, an accepted state holds the ranges
//                                       ckpt_parse_state promises
//   3 (build/fuzz_formats_json)         json_parse; every string of an accepted value, and the raw
//                                       input itself, must come back unchanged through json_escape
//                                       and json_parse (the writers' escaping)
// The parsers return an error string or false on bad input (nothing dies here: die() is only in
// the callers that name the file). A violated property ends with __builtin_trap (a finding).
// Build and run: make fuzz_formats_run FUZZ_SECONDS=180 (seeds: dev/fuzz/corpus/formats/).
#include "llmc/run/checkpoint.h"

static void check_escape_roundtrip(const std::string& s) {
    const std::string e = json_escape(s);
    Json back;
    std::string err;
    if (!json_parse(e.data(), e.size(), &back, &err) || back.kind != Json::STR || back.str != s) __builtin_trap();
}

static void check_strings(const Json& v) {
    if (v.kind == Json::STR) check_escape_roundtrip(v.str);
    for (const Json& a : v.arr) check_strings(a);
    for (const auto& kv : v.obj) { check_escape_roundtrip(kv.first); check_strings(kv.second); }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#if FUZZ_FORMAT == 1
    SafeTensors st;
    st.path = "fuzz.safetensors";
    st.bytes.assign(data, data + size);
    if (!st_parse(&st).empty()) return 0;
    for (const StTensor& t : st.tensors) {
        const int64_t n = t.numel();
        if (n < 0 || (uint64_t)n > size || t.begin > t.end || st.data_start + t.end > size) __builtin_trap();
        if (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16" || t.dtype == "F64") {
            std::vector<float> out((size_t)n);
            st_read_f32(&st, &t, out.data());
        } else if (t.dtype == "I32" || t.dtype == "I64") {
            std::vector<int32_t> out((size_t)n);
            st_read_i32(&st, &t, out.data());
        }
    }
#elif FUZZ_FORMAT == 2
    std::vector<std::pair<std::string, std::string>> files;
    if (ckpt_parse_done((const char*)data, size, &files).empty())
        for (const auto& f : files)  // an accepted marker names plain files inside the checkpoint directory only
            if (f.first.empty() || f.first[0] == '.' || f.first.find('/') != std::string::npos) __builtin_trap();
    TrainState s;
    if (ckpt_parse_state((const char*)data, size, &s).empty() && (s.step < 0 || s.train_sample > (1ull << 53)))
        __builtin_trap();
#elif FUZZ_FORMAT == 3
    Json v;
    std::string err;
    if (json_parse((const char*)data, size, &v, &err)) check_strings(v);
    else if (err.empty()) __builtin_trap();  // a failure always says why
    check_escape_roundtrip(std::string((const char*)data, size));
#else
#error "compile with -DFUZZ_FORMAT=1 (safetensors), 2 (checkpoint state.json and DONE) or 3 (JSON)"
#endif
    return 0;
}
