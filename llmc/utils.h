// llmc/utils.h: error handling and checked file I/O shared by every program.
// Every failure prints what went wrong, where (the flag and path, or file:line of the caller), and exits 1.
//
// Paths are checked by class, once, here: every input goes through open_input (a regular file is
// required: a directory, FIFO, socket or device is refused before any read, and O_NONBLOCK keeps
// a FIFO without a writer from hanging the open; a dangling symbolic link and an unreadable file
// are named as such), every whole-file read through read_file_bytes (an empty file is refused
// where content is needed, a file that changes size while read is reported), every output through
// fopen_check (a missing parent directory, a directory or FIFO in the way) or check_output_dir.
// Messages name the command-line flag the path came from (path_label): the argument parsers note
// each path flag's value (note_path_flag), and a path is matched against those values.
//
// Test-only: LLMC_FAIL_WRITE_AFTER_BYTES=N makes fwrite_check fail with ENOSPC ("No space left on
// device") once N bytes in total have been written through it, to test a full disk.
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
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

// die: print a formatted message to stderr and exit with status 1.
[[noreturn]] static inline void die(const char* fmt, ...) {
    fflush(stdout);  // what the run printed so far comes before the message
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

// The path-taking flags of this run and their values, noted by the argument parsers (llmc/run/flags.h,
// the prepare tool) as they read them, so that a message about a path can name its flag.
struct PathFlag {
    std::string flag, value;
};
static inline std::vector<PathFlag>& path_flags() {
    static std::vector<PathFlag> noted;
    return noted;
}
static inline void note_path_flag(const char* flag, const std::string& value) {
    if (!value.empty()) path_flags().push_back({flag, value});
}

// "FLAG 'path'" when `path` is the value of a noted path flag, "FLAG 'value' ('path')" when it was
// derived from one (a checkpoint under -o, a shard matching the glob of -i, a Megatron .bin/.idx of
// the prefix given to -i), else "'path'". The longest matching value wins.
static inline std::string path_label(const std::string& path) {
    std::string flag, value;
    for (const PathFlag& f : path_flags()) {
        const std::string& v = f.value;
        if (v.size() <= value.size()) continue;
        const bool derived = path.compare(0, v.size(), v) == 0 && path.size() > v.size() &&
                             (v.back() == '/' || path[v.size()] == '/' ||
                              (path.size() - v.size() <= 8 && strchr("._", path[v.size()])));  // X.bin, X_ids.npy
        if (v == path || derived || fnmatch(v.c_str(), path.c_str(), 0) == 0) { flag = f.flag; value = v; }
    }
    if (flag.empty()) return "'" + path + "'";
    if (value == path) return flag + " '" + path + "'";
    return flag + " '" + value + "' ('" + path + "')";
}

static inline std::string label_of(const std::string& path, const char* what) {
    return what ? std::string(what) + " '" + path + "'" : path_label(path);
}

// What a non-regular file is, for messages.
static inline const char* file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISREG(m)) return "a file";
    return "not a regular file";
}

// Opens `path` for reading and checks what it is (see the header comment); `what` names the flag
// (nullptr: path_label finds it). Fills *st. Dies naming the flag and the path.
static inline int open_input(const std::string& path, const char* what, bool need_content, struct stat* st) {
    int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        struct stat ls;
        char target[4096];
        if (err == ENOENT && lstat(path.c_str(), &ls) == 0 && S_ISLNK(ls.st_mode)) {
            ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
            target[n > 0 ? n : 0] = '\0';
            die("%s: does not exist (dangling symbolic link to '%s')", label_of(path, what).c_str(), target);
        }
        if (stat(path.c_str(), &ls) == 0 && !S_ISREG(ls.st_mode))
            die("%s: is %s; a regular file was expected", label_of(path, what).c_str(), file_kind(ls.st_mode));
        die("%s: cannot open: %s", label_of(path, what).c_str(), strerror(err));
    }
    if (fstat(fd, st) != 0) die("%s: cannot stat: %s", label_of(path, what).c_str(), strerror(errno));
    if (!S_ISREG(st->st_mode))
        die("%s: is %s; a regular file was expected", label_of(path, what).c_str(), file_kind(st->st_mode));
    if (need_content && st->st_size == 0) die("%s: is empty", label_of(path, what).c_str());
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

// Dies unless the directory that will hold `path` exists and is writable (a missing parent, a file
// where a directory is needed).
static inline void check_output_parent(const std::string& path, const char* what) {
    const size_t slash = path.find_last_of('/');
    const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    struct stat st;
    if (stat(parent.c_str(), &st) != 0)
        die("%s: cannot create: its directory '%s' %s", label_of(path, what).c_str(), parent.c_str(),
            errno == ENOTDIR ? "has a file in its path where a directory is needed" : "does not exist");
    if (!S_ISDIR(st.st_mode)) die("%s: cannot create: '%s' is %s, not a directory", label_of(path, what).c_str(), parent.c_str(), file_kind(st.st_mode));
    if (access(parent.c_str(), W_OK | X_OK) != 0)
        die("%s: cannot create in '%s': %s", label_of(path, what).c_str(), parent.c_str(), strerror(errno));
}

// check_output_parent, and `path` itself, if present, must be a file (or a device such as /dev/null).
static inline void check_output_file(const std::string& path, const char* what) {
    check_output_parent(path, what);
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))
        die("%s: is %s; a file is written here", label_of(path, what).c_str(), file_kind(st.st_mode));
}

// Dies unless `dir` is a writable directory or can be created (its nearest existing ancestor a
// writable directory). Called before a run does any work.
static inline void check_output_dir(const std::string& dir, const char* what) {
    struct stat st;
    std::string d = dir;
    bool file_in_path = false;  // stat said ENOTDIR: a file where a directory is needed
    while (stat(d.c_str(), &st) != 0) {
        if (errno == ENOTDIR) { file_in_path = true; break; }
        if (errno != ENOENT) die("%s: %s", label_of(dir, what).c_str(), strerror(errno));
        size_t slash = d.find_last_of('/');
        d = slash == std::string::npos ? "." : slash == 0 ? "/" : d.substr(0, slash);
    }
    if (file_in_path || !S_ISDIR(st.st_mode)) {
        if (d == dir && !file_in_path) die("%s: is %s; a directory is needed", label_of(dir, what).c_str(), file_kind(st.st_mode));
        die("%s: cannot create: a file in its path is where a directory is needed", label_of(dir, what).c_str());
    }
    if (access(d.c_str(), W_OK | X_OK) != 0)
        die("%s: %s '%s' is not writable: %s", label_of(dir, what).c_str(), d == dir ? "the directory" : "its parent",
            d.c_str(), strerror(errno));
}

// Opens a file. Reading ("r"): open_input's checks. Writing ("w", "a"): check_output_file's checks,
// and O_NONBLOCK so that a FIFO in the way cannot hang the open.
static inline FILE* fopen_check_(const char* path, const char* mode, const char* file, int line) {
    int fd;
    if (mode[0] == 'r') {
        struct stat st;
        fd = open_input(path, nullptr, false, &st);
    } else {
        check_output_file(path, nullptr);
        const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (mode[0] == 'a' ? O_APPEND : O_TRUNC);
        fd = open(path, flags, 0644);
        if (fd < 0) die("%s: cannot open for writing: %s [%s:%d]", path_label(path).c_str(), strerror(errno), file, line);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    }
    FILE* f = fdopen(fd, mode);
    if (!f) die("%s: cannot open (mode %s): %s [%s:%d]", path_label(path).c_str(), mode, strerror(errno), file, line);
    return f;
}
#define fopen_check(path, mode) fopen_check_(path, mode, __FILE__, __LINE__)

static inline void fread_check_(void* ptr, size_t size, size_t n, FILE* f, const char* what, const char* file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) die("%s: expected %zu items of %zu bytes, read %zu (truncated or corrupt file?) [%s:%d]",
                      what, n, size, got, file, line);
}
#define fread_check(ptr, size, n, f, what) fread_check_(ptr, size, n, f, what, __FILE__, __LINE__)

// Test-only write fault (see the header comment): true when this write of `bytes` must fail.
static inline bool write_fault(size_t bytes) {
    static long long left = -2;  // -2: not read yet, -1: no fault
    if (left == -2) {
        const char* e = getenv("LLMC_FAIL_WRITE_AFTER_BYTES");
        left = e ? atoll(e) : -1;
    }
    if (left < 0) return false;
    if ((long long)bytes > left) { left = 0; return true; }
    left -= (long long)bytes;
    return false;
}

static inline void fwrite_check_(const void* ptr, size_t size, size_t n, FILE* f, const char* what, const char* file, int line) {
    size_t put = 0;
    if (write_fault(size * n)) errno = ENOSPC;
    else put = fwrite(ptr, size, n, f);
    if (put != n) die("%s: write failed (%zu of %zu items): %s [%s:%d]", what, put, n, strerror(errno), file, line);
}
#define fwrite_check(ptr, size, n, f, what) fwrite_check_(ptr, size, n, f, what, __FILE__, __LINE__)

static inline void fclose_check_(FILE* f, const char* what, const char* file, int line) {
    if (fclose(f) != 0) die("%s: close failed: %s [%s:%d]", what, strerror(errno), file, line);
}
#define fclose_check(f, what) fclose_check_(f, what, __FILE__, __LINE__)

// Flushes a written file or a directory (its entries) to the disk. A file system that cannot sync
// a directory (EINVAL) is let be.
static inline void fsync_path(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL)) die("cannot sync %s to disk: %s", path_label(path).c_str(), strerror(errno));
    close(fd);
}

static inline void* malloc_check_(size_t bytes, const char* file, int line) {
    void* p = malloc(bytes ? bytes : 1);
    if (!p) die("out of host memory allocating %zu bytes [%s:%d]", bytes, file, line);
    return p;
}
#define malloc_check(bytes) malloc_check_(bytes, __FILE__, __LINE__)

// Reads a whole regular file into memory (open_input's checks; empty refused unless may_be_empty).
// A file that another process truncates, extends or rewrites during the read is reported, not
// returned half old, half new. `what` names the flag (nullptr: path_label finds it).
static inline std::vector<uint8_t> read_file_bytes(const std::string& path, const char* what = nullptr,
                                                   bool may_be_empty = false) {
    struct stat st0, st1;
    int fd = open_input(path, what, !may_be_empty, &st0);
    std::vector<uint8_t> buf((size_t)st0.st_size);
    size_t got = 0;
    while (got < buf.size()) {
        ssize_t r = read(fd, buf.data() + got, buf.size() - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die("%s: read failed: %s", label_of(path, what).c_str(), strerror(errno));
        if (r == 0) break;
        got += (size_t)r;
    }
    uint8_t extra;
    const bool grew = got == buf.size() && read(fd, &extra, 1) > 0;
    const bool changed = fstat(fd, &st1) != 0 || st1.st_size != st0.st_size || st1.st_mtim.tv_sec != st0.st_mtim.tv_sec ||
                         st1.st_mtim.tv_nsec != st0.st_mtim.tv_nsec;
    close(fd);
    if (got != buf.size() || grew || changed)
        die("%s: changed size while being read (%lld bytes when opened, %zu read%s); is another program writing it?",
            label_of(path, what).c_str(), (long long)st0.st_size, got, grew ? " and more remained" : "");
    return buf;
}

static inline bool ends_with(const std::string& s, const char* suffix) {
    size_t n = strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Whether a directory entry named `path` exists (a dangling symbolic link counts: opening it then
// says so). Never opens the file, so a FIFO cannot block it.
static inline bool file_exists(const std::string& path) {
    struct stat st;
    return lstat(path.c_str(), &st) == 0;
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
