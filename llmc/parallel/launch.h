// llmc/parallel/launch.h: who this process is among the ranks of a job, and the exchange of the NCCL unique id
// (an opaque blob rank 0 makes) without MPI. Plain C++ and POSIX: no CUDA, no MPI.
//
// Rank, world size and local rank (the rank among the processes of this machine), first found wins:
//   mpirun (OpenMPI)   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   srun (Slurm)       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
//   plain environment  RANK, WORLD_SIZE, LOCAL_RANK (scripts/launch.sh sets them)
//   none of them       one rank
// LLMC_SHARE_GPU=1 lets ranks of one machine share its GPUs (launch_share_gpu; scripts/launch.sh --share-gpu).
// The id exchange (launch_exchange_id), first found wins:
//   LLMC_ID_FILE=path  through a file on a filesystem every rank sees: each rank r announces itself in
//                      path.rank<r> (the digest of its layout), rank 0 waits for all, checks them and writes
//                      the id (or the reason to stop) to path, atomically (a temporary name, then rename);
//                      the others poll for it and take it only if it is newer than their announcement (a
//                      file left by an earlier run is never read as this run's id)
//   MASTER_ADDR, MASTER_PORT   over TCP: rank 0 listens on MASTER_PORT, every other rank connects to
//                      MASTER_ADDR:MASTER_PORT and sends its rank, world size and layout digest; once all
//                      have arrived rank 0 checks them and answers each with the id (or the reason to stop)
//   neither            when every rank is on this machine (mpirun or srun on one node), a file in /tmp named
//                      by the job's id (PMIX_NAMESPACE, or SLURM_JOB_ID and SLURM_STEP_ID); otherwise an
//                      error saying what to set
// The layout is a string the caller builds (the trainer: its command line); ranks whose layouts differ,
// or whose world sizes differ, or a rank that never arrives, stop every rank that is there with a message
// within LLMC_LAUNCH_TIMEOUT seconds (default 300; ranks other than 0 wait 5 s more for rank 0's verdict),
// never a hang.
#pragma once
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "llmc/utils.h"

struct LaunchInfo {
    int rank = 0, world = 1, local_rank = 0, local_world = 1;
    const char* source = "single process";  // which variables said so
};

static inline int launch_env_int(const char* name, int fallback) {
    const char* v = getenv(name);
    if (!v || !*v) return fallback;
    char* end = nullptr;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > 1 << 24) die("launch: environment variable %s='%s' is not a count or rank", name, v);
    return (int)x;
}

static inline LaunchInfo launch_info() {
    LaunchInfo li;
    const char* names[3][4] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
        {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}};
    const char* sources[3] = {"mpirun (OMPI_COMM_WORLD_*)", "srun (SLURM_*)", "RANK, WORLD_SIZE, LOCAL_RANK"};
    for (int s = 0; s < 3; s++) {
        if (!getenv(names[s][0])) continue;
        li.source = sources[s];
        li.rank = launch_env_int(names[s][0], 0);
        if (!getenv(names[s][1])) die("launch: %s is set but %s is not", names[s][0], names[s][1]);
        li.world = launch_env_int(names[s][1], 1);
        li.local_rank = launch_env_int(names[s][2], li.rank);
        // the local world size: unknown under plain variables without LOCAL_WORLD_SIZE (and srun's
        // SLURM_NTASKS_PER_NODE may read "2(x3)": atoi takes the 2); 0 = unknown
        const char* lw = getenv(names[s][3]);
        li.local_world = lw ? atoi(lw) : (s == 2 && !getenv(names[s][2]) ? li.world : 0);
        if (s == 1 && getenv("SLURM_NNODES") && atoi(getenv("SLURM_NNODES")) == 1) li.local_world = li.world;
        if (li.world < 1 || li.rank >= li.world)
            die("launch: rank %d is not below the world size %d (from %s)", li.rank, li.world, li.source);
        return li;
    }
    return li;
}

static inline double launch_timeout_s() {
    const char* v = getenv("LLMC_LAUNCH_TIMEOUT");
    double t = v ? atof(v) : 300.0;
    if (!(t > 0)) die("launch: LLMC_LAUNCH_TIMEOUT='%s' is not a positive number of seconds", v);
    return t;
}

// LLMC_SHARE_GPU: 1 lets several ranks of a node share its GPUs (local rank r on GPU r % devices: tests of many ranks
// on one GPU; llmc/parallel/comm_nccl.cuh); 0 or unset keeps one GPU per rank
static inline bool launch_share_gpu() {
    const char* v = getenv("LLMC_SHARE_GPU");
    if (!v || !*v || strcmp(v, "0") == 0) return false;
    if (strcmp(v, "1") != 0) die("launch: LLMC_SHARE_GPU='%s': expected 1 (ranks may share a GPU) or 0", v);
    return true;
}

// FNV-1a, 64 bits: the digest of a layout string the ranks compare
static inline uint64_t launch_digest(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) { h ^= c; h *= 1099511628211ull; }
    return h;
}

static inline double launch_now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- the message every rank sends rank 0, and rank 0's answer ----------------------------------------
struct LaunchHello {
    uint32_t magic, rank, world, pad;
    uint64_t digest;
};
static const uint32_t LAUNCH_MAGIC = 0x6c6c6d63;  // "llmc"
static const size_t LAUNCH_MAX_BLOB = 4096;
// the others wait this much longer than rank 0 for its answer: at the timeout rank 0 still has the reason
// to send them
static const double LAUNCH_GRACE_S = 5;
// rank 0's answer: status 0 and the blob, or status 1 and a message
struct LaunchAnswer {
    uint32_t magic, status, blob_bytes, pad;
    char text[LAUNCH_MAX_BLOB];
};

// Rank 0's check of everyone's hello; "" when all is well, otherwise the reason to stop.
static inline std::string launch_check(const std::vector<LaunchHello>& hellos, int world, uint64_t digest) {
    char buf[256];
    for (int r = 1; r < world; r++) {
        const LaunchHello& h = hellos[r];
        if (h.world != (uint32_t)world) {
            snprintf(buf, sizeof(buf), "rank %d was started with a world of %u ranks, rank 0 with %d", r, h.world, world);
            return buf;
        }
        if (h.digest != digest) {
            snprintf(buf, sizeof(buf), "rank %d disagrees with rank 0 on the layout (its command line differs: "
                     "layout digest %016llx, rank 0's %016llx)", r, (unsigned long long)h.digest, (unsigned long long)digest);
            return buf;
        }
    }
    return "";
}

static inline std::string launch_missing(const std::vector<char>& arrived) {
    std::string m;
    int n = 0;
    for (size_t r = 0; r < arrived.size(); r++)
        if (!arrived[r]) { if (n < 16) m += (n ? ", " : "") + std::to_string(r); n++; }
    if (n > 16) m += ", ...";
    return std::to_string(n) + " rank(s) never arrived: " + m;
}

// ---- over a file ----------------------------------------------------------------------------------------
// Writes the file under a temporary name and renames it. Returns its modification time, taken before the rename
// (the file may be read and removed by its reader as soon as it has its name).
static inline struct timespec launch_write_atomic(const std::string& path, const void* data, size_t n) {
    std::string tmp = path + ".tmp" + std::to_string(getpid());
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) die("launch: cannot write '%s': %s (LLMC_ID_FILE must name a path in a writable directory)", tmp.c_str(), strerror(errno));
    fwrite_check(data, 1, n, f, tmp.c_str());
    fclose_check(f, tmp.c_str());
    struct stat st;
    if (stat(tmp.c_str(), &st) != 0) die("launch: cannot stat '%s' just written: %s", tmp.c_str(), strerror(errno));
    if (rename(tmp.c_str(), path.c_str()) != 0) die("launch: cannot rename '%s' to '%s': %s", tmp.c_str(), path.c_str(), strerror(errno));
    return st.st_mtim;
}
// the file's contents when it is there, complete and no older than `since` (modification times)
static inline bool launch_read_file(const std::string& path, void* data, size_t n, const struct timespec* since) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || (size_t)st.st_size != n) return false;
    if (since && (st.st_mtim.tv_sec < since->tv_sec ||
                  (st.st_mtim.tv_sec == since->tv_sec && st.st_mtim.tv_nsec < since->tv_nsec))) return false;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return false;
    size_t got = fread(data, 1, n, f);
    fclose(f);
    return got == n;
}

static inline void launch_exchange_file(const LaunchInfo& li, const std::string& path, void* blob, size_t n,
                                        uint64_t digest, double timeout) {
    double t0 = launch_now_s();
    LaunchAnswer ans;
    memset(&ans, 0, sizeof(ans));
    ans.magic = LAUNCH_MAGIC;
    if (li.rank == 0) {
        unlink(path.c_str());  // an earlier run's id
        std::vector<LaunchHello> hellos(li.world);
        std::vector<char> arrived(li.world, 0);
        arrived[0] = 1;
        int count = 1;
        std::string err;
        while (count < li.world) {
            for (int r = 1; r < li.world; r++) {
                if (arrived[r]) continue;
                std::string rp = path + ".rank" + std::to_string(r);
                if (launch_read_file(rp, &hellos[r], sizeof(LaunchHello), nullptr) && hellos[r].magic == LAUNCH_MAGIC) {
                    arrived[r] = 1; count++;
                    unlink(rp.c_str());
                }
            }
            if (count == li.world) break;
            if (launch_now_s() - t0 > timeout) { err = launch_missing(arrived); break; }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        if (err.empty()) err = launch_check(hellos, li.world, digest);
        if (!err.empty()) {
            err += " (LLMC_ID_FILE=" + path + ", LLMC_LAUNCH_TIMEOUT=" + std::to_string((int)timeout) + " s)";
            ans.status = 1;
            snprintf(ans.text, sizeof(ans.text), "%s", err.c_str());
        } else {
            ans.blob_bytes = (uint32_t)n;
            memcpy(ans.text, blob, n);
        }
        launch_write_atomic(path, &ans, sizeof(ans));
        if (ans.status) die("launch: %s", ans.text);
        return;
    }
    LaunchHello h = {LAUNCH_MAGIC, (uint32_t)li.rank, (uint32_t)li.world, 0, digest};
    std::string rp = path + ".rank" + std::to_string(li.rank);
    const struct timespec since = launch_write_atomic(rp, &h, sizeof(h));  // rank 0's answer is no older
    while (!launch_read_file(path, &ans, sizeof(ans), &since) || ans.magic != LAUNCH_MAGIC) {
        if (launch_now_s() - t0 > timeout + LAUNCH_GRACE_S)
            die("launch: rank %d waited %.0f s (LLMC_LAUNCH_TIMEOUT and %.0f s) for rank 0 to write the id to "
                "LLMC_ID_FILE=%s; rank 0 never did (not started, or it died)", li.rank, timeout, LAUNCH_GRACE_S, path.c_str());
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (ans.status) die("launch: rank 0 stopped the job: %s", ans.text);
    if (ans.blob_bytes != n) die("launch: rank 0 sent an id of %u bytes, %zu expected", ans.blob_bytes, n);
    memcpy(blob, ans.text, n);
}

// ---- over TCP -------------------------------------------------------------------------------------------
// all n bytes, or false on error, end of stream or the deadline
static inline bool launch_io(int fd, void* data, size_t n, bool send_it, double deadline) {
    char* p = (char*)data;
    while (n > 0) {
        struct pollfd pfd = {fd, (short)(send_it ? POLLOUT : POLLIN), 0};
        int left_ms = (int)((deadline - launch_now_s()) * 1000);
        if (left_ms <= 0) return false;
        int k = poll(&pfd, 1, left_ms);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        ssize_t m = send_it ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (m < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (m <= 0) return false;
        p += m; n -= (size_t)m;
    }
    return true;
}

static inline void launch_exchange_tcp(const LaunchInfo& li, const char* addr, const char* port_s, void* blob,
                                       size_t n, uint64_t digest, double timeout) {
    double t0 = launch_now_s(), deadline = t0 + timeout;
    int port = atoi(port_s);
    if (port <= 0 || port > 65535) die("launch: MASTER_PORT='%s' is not a port number", port_s);
    LaunchAnswer ans;
    memset(&ans, 0, sizeof(ans));
    ans.magic = LAUNCH_MAGIC;
    if (li.rank == 0) {
        int lfd = socket(AF_INET, SOCK_STREAM, 0);
        if (lfd < 0) die("launch: socket: %s", strerror(errno));
        int one = 1;
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        sa.sin_port = htons((uint16_t)port);
        if (bind(lfd, (struct sockaddr*)&sa, sizeof(sa)) != 0)
            die("launch: rank 0 cannot listen on MASTER_PORT=%d: %s (another job on that port? pick a free one)", port, strerror(errno));
        if (listen(lfd, 128) != 0) die("launch: listen on MASTER_PORT=%d: %s", port, strerror(errno));
        std::vector<LaunchHello> hellos(li.world);
        std::vector<int> fds(li.world, -1);
        std::vector<char> arrived(li.world, 0);
        arrived[0] = 1;
        int count = 1;
        std::string err;
        while (count < li.world && err.empty()) {
            struct pollfd pfd = {lfd, POLLIN, 0};
            int left_ms = (int)((deadline - launch_now_s()) * 1000);
            if (left_ms <= 0 || poll(&pfd, 1, left_ms) <= 0) {
                if (left_ms > 0 && errno == EINTR) continue;
                err = launch_missing(arrived);
                break;
            }
            int fd = accept(lfd, nullptr, nullptr);
            if (fd < 0) continue;
            LaunchHello h;
            if (!launch_io(fd, &h, sizeof(h), false, deadline) || h.magic != LAUNCH_MAGIC) { close(fd); continue; }
            if (h.rank == 0 || h.rank >= (uint32_t)li.world || arrived[h.rank]) {
                err = "a second rank " + std::to_string(h.rank) + " (or a rank outside the world of " +
                      std::to_string(li.world) + ") connected: two jobs on one MASTER_PORT, or a wrong RANK";
                close(fd);
                break;
            }
            hellos[h.rank] = h; fds[h.rank] = fd; arrived[h.rank] = 1; count++;
        }
        close(lfd);
        if (err.empty()) err = launch_check(hellos, li.world, digest);
        if (!err.empty()) {
            err += " (MASTER_ADDR:MASTER_PORT " + std::string(addr) + ":" + std::to_string(port) +
                   ", LLMC_LAUNCH_TIMEOUT=" + std::to_string((int)timeout) + " s)";
            ans.status = 1;
            snprintf(ans.text, sizeof(ans.text), "%s", err.c_str());
        } else {
            ans.blob_bytes = (uint32_t)n;
            memcpy(ans.text, blob, n);
        }
        for (int r = 1; r < li.world; r++) {
            if (fds[r] < 0) continue;
            if (!launch_io(fds[r], &ans, sizeof(ans), true, launch_now_s() + 10) && !ans.status)
                die("launch: rank 0 could not send the id to rank %d (it died?)", r);
            close(fds[r]);
        }
        if (ans.status) die("launch: %s", ans.text);
        return;
    }
    struct addrinfo hints, *res = nullptr;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(addr, port_s, &hints, &res);
    if (gai != 0) die("launch: MASTER_ADDR='%s': %s", addr, gai_strerror(gai));
    int fd = -1;
    while (true) {  // rank 0 may not listen yet: retry until the deadline
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) die("launch: socket: %s", strerror(errno));
        if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
        close(fd);
        if (launch_now_s() > deadline)
            die("launch: rank %d could not reach rank 0 at MASTER_ADDR:MASTER_PORT %s:%d within %.0f s "
                "(LLMC_LAUNCH_TIMEOUT): rank 0 not started, or it died", li.rank, addr, port, timeout);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    freeaddrinfo(res);
    LaunchHello h = {LAUNCH_MAGIC, (uint32_t)li.rank, (uint32_t)li.world, 0, digest};
    if (!launch_io(fd, &h, sizeof(h), true, deadline))
        die("launch: rank %d could not send its hello to rank 0 at %s:%d", li.rank, addr, port);
    // rank 0 answers once every rank arrived or its own timeout passed
    if (!launch_io(fd, &ans, sizeof(ans), false, deadline + LAUNCH_GRACE_S) || ans.magic != LAUNCH_MAGIC)
        die("launch: rank %d got no id from rank 0 at %s:%d within %.0f s (LLMC_LAUNCH_TIMEOUT): rank 0 died, "
            "or the connection was not from this job", li.rank, addr, port, timeout);
    close(fd);
    if (ans.status) die("launch: rank 0 stopped the job: %s", ans.text);
    if (ans.blob_bytes != n) die("launch: rank 0 sent an id of %u bytes, %zu expected", ans.blob_bytes, n);
    memcpy(blob, ans.text, n);
}

// The path of the id file, or "" for TCP. Dies when the job spans machines and nothing says how.
static inline std::string launch_id_path(const LaunchInfo& li) {
    if (const char* f = getenv("LLMC_ID_FILE")) return f;
    if (getenv("MASTER_ADDR") || getenv("MASTER_PORT")) {
        if (!getenv("MASTER_ADDR") || !getenv("MASTER_PORT")) die("launch: set both MASTER_ADDR and MASTER_PORT, or neither");
        return "";
    }
    std::string job;
    if (const char* ns = getenv("PMIX_NAMESPACE")) job = ns;
    else if (const char* j = getenv("SLURM_JOB_ID")) job = std::string(j) + "." + (getenv("SLURM_STEP_ID") ? getenv("SLURM_STEP_ID") : "0");
    if (job.empty() || li.local_world != li.world)
        die("launch: %d ranks (from %s) and no way to pass the NCCL id: set MASTER_ADDR and MASTER_PORT (rank 0's "
            "address and a free port, the same on every rank), or LLMC_ID_FILE=<path on a filesystem every rank sees>",
            li.world, li.source);
    for (char& c : job) if (!isalnum((unsigned char)c) && c != '.') c = '_';
    return "/tmp/llmc_id_" + job;
}

// Rank 0's blob[n] (n <= 4096) reaches every rank; every rank's layout string is compared with rank 0's.
// One rank: nothing to do.
static inline void launch_exchange_id(const LaunchInfo& li, void* blob, size_t n, const std::string& layout) {
    if (li.world == 1) return;
    if (n > LAUNCH_MAX_BLOB) die("launch: an id of %zu bytes is over %zu", n, LAUNCH_MAX_BLOB);
    double timeout = launch_timeout_s();
    uint64_t digest = launch_digest(layout);
    std::string path = launch_id_path(li);
    if (!path.empty()) launch_exchange_file(li, path, blob, n, digest, timeout);
    else launch_exchange_tcp(li, getenv("MASTER_ADDR"), getenv("MASTER_PORT"), blob, n, digest, timeout);
}

// Once every rank holds the id (after the communicator's collective creation): rank 0 removes the id file.
static inline void launch_done(const LaunchInfo& li) {
    if (li.world == 1 || li.rank != 0) return;
    if (getenv("MASTER_ADDR") && !getenv("LLMC_ID_FILE")) return;
    unlink(launch_id_path(li).c_str());
}

// The layout the ranks must agree on, from a command line: its arguments joined by spaces.
static inline std::string launch_layout(int argc, char** argv) {
    std::string s;
    for (int i = 1; i < argc; i++) { if (i > 1) s += ' '; s += argv[i]; }
    return s;
}
