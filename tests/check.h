// tests/check.h: the reporting every test program shares. check() prints "[PASS] name" or
// "[FAIL] name: detail" (the lines scripts/run_tests.sh counts) and counts failures in
// g_failed; rel_err() measures a tensor's error against its own scale.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string>

static int g_failed = 0;

static void check(bool ok, const std::string& name, const char* fmt = "", ...) {
    if (ok) { printf("[PASS] %s\n", name.c_str()); return; }
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    printf("[FAIL] %s: %s\n", name.c_str(), buf);
    g_failed++;
}

// max |a - b| / max(max |b|, floor): the error relative to the tensor's own scale
static double rel_err(const float* a, const float* b, size_t n, double floor_ = 1e-6) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        md = std::max(md, (double)std::fabs(a[i] - b[i]));
        mb = std::max(mb, (double)std::fabs(b[i]));
    }
    return md / std::max(mb, floor_);
}
