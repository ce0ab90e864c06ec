// llmc/utils.h: error handling and checked file I/O shared by every program.
// Every failure prints what went wrong, where (file:line of the caller), and exits 1.
#pragma once
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <sys/stat.h>

// die: print a formatted message to stderr and exit with status 1.
[[noreturn]] static inline void die(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stdout);
    exit(1);
}

// Opens a file; a directory opened for reading (which fopen allows on Linux) is refused by name.
static inline FILE* fopen_check_(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (!f) die("cannot open '%s' (mode %s): %s [%s:%d]", path, mode, strerror(errno), file, line);
    struct stat st;
    if (mode[0] == 'r' && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode))
        die("'%s' is a directory; a file was expected here", path);
    return f;
}
#define fopen_check(path, mode) fopen_check_(path, mode, __FILE__, __LINE__)

static inline void fread_check_(void* ptr, size_t size, size_t n, FILE* f, const char* what, const char* file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) die("%s: expected %zu items of %zu bytes, read %zu (truncated or corrupt file?) [%s:%d]",
                      what, n, size, got, file, line);
}
#define fread_check(ptr, size, n, f, what) fread_check_(ptr, size, n, f, what, __FILE__, __LINE__)

static inline void fwrite_check_(const void* ptr, size_t size, size_t n, FILE* f, const char* what, const char* file, int line) {
    size_t put = fwrite(ptr, size, n, f);
    if (put != n) die("%s: write failed (%zu of %zu items): %s [%s:%d]", what, put, n, strerror(errno), file, line);
}
#define fwrite_check(ptr, size, n, f, what) fwrite_check_(ptr, size, n, f, what, __FILE__, __LINE__)

static inline void fclose_check_(FILE* f, const char* what, const char* file, int line) {
    if (fclose(f) != 0) die("%s: close failed: %s [%s:%d]", what, strerror(errno), file, line);
}
#define fclose_check(f, what) fclose_check_(f, what, __FILE__, __LINE__)

static inline void* malloc_check_(size_t bytes, const char* file, int line) {
    void* p = malloc(bytes ? bytes : 1);
    if (!p) die("out of host memory allocating %zu bytes [%s:%d]", bytes, file, line);
    return p;
}
#define malloc_check(bytes) malloc_check_(bytes, __FILE__, __LINE__)

// Read a whole file into memory; dies with the path on failure.
static inline std::vector<uint8_t> read_file_bytes(const std::string& path) {
    FILE* f = fopen_check(path.c_str(), "rb");
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        die("'%s' is not a regular file (a FIFO or a device cannot be read whole); give a file", path.c_str());
    if (fseek(f, 0, SEEK_END) != 0) die("cannot seek '%s'", path.c_str());
    long n = ftell(f);
    if (n < 0) die("cannot size '%s'", path.c_str());
    fseek(f, 0, SEEK_SET);
    std::vector<uint8_t> buf((size_t)n);
    if (n > 0) fread_check(buf.data(), 1, (size_t)n, f, path.c_str());
    fclose(f);
    return buf;
}

static inline bool ends_with(const std::string& s, const char* suffix) {
    size_t n = strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

static inline bool file_exists(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return false;
    fclose(f);
    return true;
}

// wall-clock milliseconds, for step timing
static inline double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Parses a whole decimal integer in [lo, hi] given to `flag`; dies naming the flag otherwise.
static inline long parse_long(const char* flag, const char* value, long lo, long hi) {
    char* end = nullptr;
    long v = strtol(value, &end, 10);
    if (*value == '\0' || *end != '\0' || v < lo || v > hi)
        die("%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, value);
    return v;
}
