// dev/cuda/attention_cases.h: what attention_forward.cu and attention_backward.cu share: the
// command line with its --sizes rule (BxTxHxKVxhd, shapes the kernels take, qkv below 2^31
// elements), and the fixed check matrix every version runs: B=2, H=8, T in {128,256,1024},
// KV in {8,2}, hd in {64,80,128}.
#pragma once
#include <vector>
#include "dev/cuda/common.h"
#include "llmc/attention.cuh"

static Args attention_parse_args(int argc, char** argv, const char* about, int n_versions) {
    Args a = parse_args(argc, argv, about, "BxTxHxKVxhd (T a multiple of 64, H a multiple of KV, hd 64, 80 or 128)",
                        "4x4096x32x32x128", 5, n_versions);
    for (const std::vector<long>& s : a.sizes) {
        if (s[0] * s[1] * (s[2] + 2 * s[3]) * s[4] > (1l << 31))
            die("--sizes: %ldx%ldx%ldx%ldx%ld: the qkv tensor may hold at most 2^31 elements", s[0], s[1], s[2], s[3], s[4]);
        attention_check_shape((int)s[0], (int)s[1], (int)s[2], (int)s[3], (int)s[4]);
    }
    return a;
}

// Runs check(version, B, T, H, KV, hd, case_index) -> bool over the matrix for the chosen
// versions; returns the number of failed cases.
template <typename Check>
static int attention_check_all(const Args& a, int n_versions, Check check) {
    int failures = 0;
    const int Ts[3] = {128, 256, 1024}, KVs[2] = {8, 2}, hds[3] = {64, 80, 128};
    for (int v = 1; v <= n_versions; v++) {
        if (a.version && v != a.version) continue;
        size_t case_index = 0;
        for (int T : Ts)
            for (int KV : KVs)
                for (int hd : hds) failures += !check(v, 2, T, 8, KV, hd, case_index++);
    }
    return failures;
}
