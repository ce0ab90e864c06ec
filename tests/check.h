// tests/check.h: the reporting every test program shares. check() prints "[PASS] name" or
// "[FAIL] name: detail" (the lines scripts/run_tests.sh counts) and counts failures in
// g_failed; rel_err() measures a tensor's error against its own scale.
// Non-finite values fail. std::max(x, NaN) keeps x, so a max-based error would score an all-NaN
// tensor 0; instead every error helper here returns +inf as soon as a compared value is NaN or inf:
// "err < tol" is then false, and a max over tensors (max_err, or "if (e > worst)") keeps it. A
// failure whose detail prints inf or nan says "non-finite" so that it is not read as a large error.
#pragma once
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

static int g_failed = 0;

// true when s holds "inf" or "nan" as a word (how printf's %g writes a non-finite value)
static bool shows_nonfinite(const char* s) {
    for (const char* w : {"inf", "nan"})
        for (const char* p = strstr(s, w); p; p = strstr(p + 1, w)) {
            const bool start = p == s || !isalpha((unsigned char)p[-1]), end = !isalpha((unsigned char)p[3]);
            if (start && end) return true;
        }
    return false;
}

static void check(bool ok, const std::string& name, const char* fmt = "", ...) {
    if (ok) { printf("[PASS] %s\n", name.c_str()); return; }
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    printf("[FAIL] %s: %s%s\n", name.c_str(), buf, shows_nonfinite(buf) ? " (non-finite: a NaN or inf was compared)" : "");
    g_failed++;
}

// the larger of two errors, +inf if either is NaN or inf
static double max_err(double a, double b) {
    return std::isfinite(a) && std::isfinite(b) ? std::max(a, b) : INFINITY;
}

// |x - ref| / |ref|, +inf if x or ref is not finite; with ref 0: 0 when x is 0 too, else +inf
static double scalar_rel_err(double x, double ref) {
    if (!std::isfinite(x) || !std::isfinite(ref)) return INFINITY;
    if (ref == 0) return x == 0 ? 0.0 : INFINITY;
    return std::fabs(x - ref) / std::fabs(ref);
}

// *max_diff = max |a - b|, *max_ref = max |b|; false (and both +inf) if an element of a or b is NaN or inf
static bool max_abs_diff(const float* a, const float* b, size_t n, double* max_diff, double* max_ref) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(a[i]) || !std::isfinite(b[i])) { *max_diff = *max_ref = INFINITY; return false; }
        md = std::max(md, (double)std::fabs(a[i] - b[i]));
        mb = std::max(mb, (double)std::fabs(b[i]));
    }
    *max_diff = md;
    *max_ref = mb;
    return true;
}

// max |a - b| / max(max |b|, floor): the error relative to the tensor's own scale; +inf if a or b holds
// a NaN or inf
static double rel_err(const float* a, const float* b, size_t n, double floor_ = 1e-6) {
    double md, mb;
    if (!max_abs_diff(a, b, n, &md, &mb)) return INFINITY;
    return md / std::max(mb, floor_);
}
