// dev/probe/nccl_ranks.cu: several NCCL ranks on one machine (also on ONE GPU) without MPI.
// Two modes:
//   nccl_ranks --launch N     launcher: starts N copies of itself as rank processes, each with RANK,
//                             WORLD_SIZE, LOCAL_RANK, a distinct NCCL_HOSTID ("probe-host-<rank>": NCCL then
//                             treats each rank as its own host, so ranks may share a GPU), and
//                             NCCL_MULTI_RANK_GPU_ENABLE=1 when the runtime NCCL is >= 2.30; kills them all
//                             when one fails or the wall-clock limit passes; exits non-zero on any failure.
//   nccl_ranks --id-file F    one rank: RANK, WORLD_SIZE (and LOCAL_RANK) from the environment; rank 0
//                             writes the NCCL unique id to F (temporary name, then rename), the others poll
//                             for it until the timeout.
// Each rank checks all-reduce (sum), reduce-scatter, all-gather, broadcast and a send/recv ring on
// integer-valued floats whose exact result it computes on the host, prints PASS/FAIL per collective, then
// measures the bus bandwidth of a larger all-reduce (nccl-tests' definition: algbw * 2(n-1)/n).
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "llmc/utils.h"
#include "llmc/cuda_common.cuh"
#ifndef USE_NCCL
#error "nccl_ranks needs NCCL: build it with `make build/nccl_ranks`, which adds -DUSE_NCCL when it finds nccl.h"
#endif

extern char** environ;

struct Options {
    int launch = 0;               // > 0: launcher mode with this many ranks
    const char* id_file = nullptr;
    int timeout_s = 300;          // wall-clock limit of one rank (the launcher allows a little more)
    int bw_mib = 64;              // size of the bandwidth all-reduce
    bool same_host = false;       // launcher: no NCCL_HOSTID, rely on NCCL_MULTI_RANK_GPU_ENABLE (NCCL >= 2.30)
};

static void usage(FILE* out) {
    fprintf(out,
        "usage: nccl_ranks --launch N [options]      start N ranks on this machine and check them\n"
        "       nccl_ranks --id-file FILE [options]  run one rank (RANK, WORLD_SIZE, LOCAL_RANK from the environment)\n"
        "  Checks all-reduce, reduce-scatter, all-gather, broadcast and send/recv against host-computed results,\n"
        "  then measures all-reduce bus bandwidth. No MPI needed; several ranks may share one GPU.\n"
        "  --launch N      launcher mode: N rank processes (1..64), each with its own NCCL_HOSTID\n"
        "  --id-file FILE  where rank 0 publishes the NCCL unique id (must not exist beforehand)\n"
        "  --timeout S     wall-clock limit per rank in seconds (default 300); the launcher kills ranks after S+15\n"
        "  --bw-mib M      all-reduce size for the bandwidth figure in MiB (default 64)\n"
        "  --same-host     launcher: share the real host id and use NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL >= 2.30)\n"
        "  --help          this text\n"
        "  The launcher sets NCCL_SOCKET_IFNAME=lo and NCCL_IB_DISABLE=1 unless they are already set:\n"
        "  all ranks are on this machine, so loopback sockets need no network configuration.\n");
}

static void decode_nccl_version(int code, int* major, int* minor, int* patch) {
    // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9 on
    if (code >= 10000) { *major = code / 10000; *minor = (code % 10000) / 100; }
    else { *major = code / 1000; *minor = (code % 1000) / 100; }
    *patch = code % 100;
}

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ----------------------------------------------------------------------------------------------
// launcher

static volatile sig_atomic_t g_launcher_stop = 0;
static void launcher_on_signal(int) { g_launcher_stop = 1; }

// SIGTERM to every live child, then SIGKILL to those still alive after a grace period.
static void kill_children(std::vector<pid_t>* pids, std::vector<bool>* alive) {
    for (size_t r = 0; r < pids->size(); r++)
        if ((*alive)[r]) kill((*pids)[r], SIGTERM);
    auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        bool any = false;
        for (size_t r = 0; r < pids->size(); r++) {
            if (!(*alive)[r]) continue;
            int status = 0;
            pid_t got = waitpid((*pids)[r], &status, WNOHANG);
            if (got == (*pids)[r] || (got < 0 && errno == ECHILD)) (*alive)[r] = false;
            else any = true;
        }
        if (!any) return;
        if (seconds_since(t0) > 3.0) {
            for (size_t r = 0; r < pids->size(); r++)
                if ((*alive)[r]) { kill((*pids)[r], SIGKILL); waitpid((*pids)[r], nullptr, 0); (*alive)[r] = false; }
            return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

static int run_launcher(const Options& opt) {
    int n = opt.launch;
    int code = 0, major = 0, minor = 0, patch = 0;
    ncclCheck(ncclGetVersion(&code));
    decode_nccl_version(code, &major, &minor, &patch);
    bool multi_rank_flag = code >= 23000;  // NCCL_MULTI_RANK_GPU_ENABLE exists from 2.30.0
    if (opt.same_host && !multi_rank_flag)
        die("--same-host needs NCCL >= 2.30 (NCCL_MULTI_RANK_GPU_ENABLE); the runtime NCCL is %d.%d.%d. "
            "Drop --same-host to give each rank its own NCCL_HOSTID instead.", major, minor, patch);
    int devices = cuda_require_device();
    printf("nccl_ranks: launching %d ranks; NCCL runtime %d.%d.%d (headers %d.%d.%d); %d CUDA device(s)\n", n,
           major, minor, patch, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, devices);

    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) die("cannot find this program's path through /proc/self/exe: %s", strerror(errno));
    self[len] = '\0';
    const char* tmp = getenv("TMPDIR");
    std::string dir_template = std::string(tmp && *tmp ? tmp : "/tmp") + "/nccl_ranks.XXXXXX";
    std::vector<char> dir(dir_template.begin(), dir_template.end());
    dir.push_back('\0');
    if (!mkdtemp(dir.data())) die("cannot create a directory from '%s': %s", dir_template.c_str(), strerror(errno));
    std::string id_file = std::string(dir.data()) + "/nccl_id";

    // every rank's argv and environment, built before fork: the child only calls execve
    std::string timeout_str = std::to_string(opt.timeout_s), bw_str = std::to_string(opt.bw_mib);
    std::vector<const char*> child_argv = {self, "--id-file", id_file.c_str(), "--timeout", timeout_str.c_str(),
                                           "--bw-mib", bw_str.c_str(), nullptr};
    const char* replaced[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "NCCL_HOSTID=", "NCCL_MULTI_RANK_GPU_ENABLE="};
    std::vector<std::string> base_env;
    for (char** e = environ; *e; e++) {
        bool skip = false;
        for (const char* p : replaced) skip = skip || strncmp(*e, p, strlen(p)) == 0;
        if (!skip) base_env.push_back(*e);
    }
    std::string shown = "RANK, WORLD_SIZE=" + std::to_string(n) + ", LOCAL_RANK";
    if (!opt.same_host) shown += ", NCCL_HOSTID=probe-host-<rank>";
    std::vector<std::string> defaults;
    if (!getenv("NCCL_SOCKET_IFNAME")) defaults.push_back("NCCL_SOCKET_IFNAME=lo");
    if (!getenv("NCCL_IB_DISABLE")) defaults.push_back("NCCL_IB_DISABLE=1");
    if (multi_rank_flag) defaults.push_back("NCCL_MULTI_RANK_GPU_ENABLE=1");
    for (const std::string& d : defaults) { base_env.push_back(d); shown += ", " + d; }
    printf("nccl_ranks: environment per rank: %s\n", shown.c_str());
    fflush(stdout);
    std::vector<std::vector<std::string>> envs(n, base_env);
    std::vector<std::vector<const char*>> envps(n);
    for (int r = 0; r < n; r++) {
        envs[r].push_back("RANK=" + std::to_string(r));
        envs[r].push_back("WORLD_SIZE=" + std::to_string(n));
        envs[r].push_back("LOCAL_RANK=" + std::to_string(r));
        if (!opt.same_host) envs[r].push_back("NCCL_HOSTID=probe-host-" + std::to_string(r));
        for (const std::string& s : envs[r]) envps[r].push_back(s.c_str());
        envps[r].push_back(nullptr);
    }

    signal(SIGINT, launcher_on_signal);
    signal(SIGTERM, launcher_on_signal);
    std::vector<pid_t> pids(n, -1);
    std::vector<bool> alive(n, false);
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "error: fork for rank %d failed: %s\n", r, strerror(errno));
            kill_children(&pids, &alive);
            return 1;
        }
        if (pid == 0) {
            execve(self, (char* const*)child_argv.data(), (char* const*)envps[r].data());
            const char msg[] = "error: execve of the rank process failed\n";
            ssize_t ignored = write(2, msg, sizeof(msg) - 1);
            (void)ignored;
            _exit(127);
        }
        pids[r] = pid;
        alive[r] = true;
    }

    // wait: the first failing rank, the wall-clock limit or a signal ends the run for all
    double limit = opt.timeout_s + 15.0;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> failures;
    int live = n;
    while (live > 0) {
        int status = 0;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            for (int r = 0; r < n; r++) {
                if (pids[r] != pid) continue;
                alive[r] = false;
                live--;
                if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
                    failures.push_back("rank " + std::to_string(r) + " exited with status " + std::to_string(WEXITSTATUS(status)));
                else if (WIFSIGNALED(status))
                    failures.push_back("rank " + std::to_string(r) + " was killed by signal " + std::to_string(WTERMSIG(status)) +
                                       " (" + strsignal(WTERMSIG(status)) + ")");
            }
            continue;
        }
        if (!failures.empty() && live > 0) {
            failures.push_back("stopped the " + std::to_string(live) + " remaining rank(s): they would wait on the failed one");
            kill_children(&pids, &alive);
            break;
        }
        if (g_launcher_stop) {
            failures.push_back("interrupted by a signal; killed the ranks");
            kill_children(&pids, &alive);
            break;
        }
        if (seconds_since(t0) > limit) {
            failures.push_back("wall-clock limit of " + std::to_string((int)limit) + " s reached with " + std::to_string(live) +
                               " rank(s) still running (a hang in NCCL init or a collective?); killed them. "
                               "Rerun with NCCL_DEBUG=INFO to see where");
            kill_children(&pids, &alive);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    unlink(id_file.c_str());  // normally removed by rank 0 already
    rmdir(dir.data());
    if (failures.empty()) {
        printf("nccl_ranks: all %d ranks passed every check (%.1f s)\n", n, seconds_since(t0));
        return 0;
    }
    fflush(stdout);
    fprintf(stderr, "nccl_ranks: FAILED with %d ranks:\n", n);
    for (const std::string& f : failures) fprintf(stderr, "  %s\n", f.c_str());
    return 1;
}

// ----------------------------------------------------------------------------------------------
// one rank

static char g_alarm_msg[256];
static void rank_on_alarm(int) {
    ssize_t ignored = write(2, g_alarm_msg, strlen(g_alarm_msg));
    (void)ignored;
    _exit(1);
}

static int env_int(const char* name, int fallback, bool required) {
    const char* v = getenv(name);
    if (!v || !*v) {
        if (required) die("environment variable %s is not set; a rank needs RANK and WORLD_SIZE (or use --launch N)", name);
        return fallback;
    }
    char* end = nullptr;
    long x = strtol(v, &end, 10);
    if (*end != '\0' || x < 0 || x > 1000000) die("environment variable %s='%s' is not a non-negative integer", name, v);
    return (int)x;
}

// rank 0, before anything else: a leftover id file would hand the other ranks a stale id
static void require_no_id_file(const char* path) {
    struct stat st;
    if (stat(path, &st) == 0)
        die("NCCL id file '%s' already exists (left by an earlier run?); remove it or pass a new --id-file", path);
}

// rank 0: publish the id atomically (temporary name, then rename)
static void write_id_file(const char* path, const ncclUniqueId& id) {
    std::string tmp = std::string(path) + ".tmp." + std::to_string(getpid());
    FILE* f = fopen_check(tmp.c_str(), "wb");
    fwrite_check(&id, sizeof(id), 1, f, tmp.c_str());
    fclose_check(f, tmp.c_str());
    if (rename(tmp.c_str(), path) != 0) die("cannot rename '%s' to '%s': %s", tmp.c_str(), path, strerror(errno));
}

// other ranks: poll until rank 0 has published the id, or die after timeout_s
static ncclUniqueId read_id_file(const char* path, int rank, int timeout_s) {
    auto t0 = std::chrono::steady_clock::now();
    while (access(path, R_OK) != 0) {
        if (seconds_since(t0) > timeout_s)
            die("rank %d: timed out after %d s waiting for the NCCL id file '%s' from rank 0 "
                "(did rank 0 start, with the same --id-file? did it fail?)", rank, timeout_s, path);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ncclUniqueId id;
    FILE* f = fopen_check(path, "rb");
    fread_check(&id, sizeof(id), 1, f, path);
    fclose(f);
    return id;
}

struct RankCtx {
    int rank, world;
    ncclComm_t comm;
    cudaStream_t stream;
    int failures;
};

static void report(RankCtx* ctx, const char* what, const std::vector<float>& got, const std::vector<float>& want) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < want.size(); i++)
        if (got[i] != want[i]) { if (bad == 0) first = i; bad++; }
    if (bad == 0) {
        printf("rank %d/%d  %-15s PASS  (%zu floats, exact)\n", ctx->rank, ctx->world, what, want.size());
    } else {
        printf("rank %d/%d  %-15s FAIL  %zu of %zu floats differ; first at %zu: got %.1f, want %.1f\n", ctx->rank,
               ctx->world, what, bad, want.size(), first, got[first], want[first]);
        ctx->failures++;
    }
}

static float* to_device(const std::vector<float>& h) {
    float* d = nullptr;
    cudaCheck(cudaMalloc(&d, h.size() * sizeof(float)));
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static std::vector<float> to_host(const float* d, size_t n, cudaStream_t stream) {
    std::vector<float> h(n);
    cudaCheck(cudaStreamSynchronize(stream));
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

// Every value below is a small integer, so sums of up to 64 ranks are exact in fp32 and the expected
// results are compared with ==.
static void check_collectives(RankCtx* ctx) {
    const int r = ctx->rank, W = ctx->world;
    const size_t n_ar = 1048581, m = 131075, n_bc = 1048583, n_p2p = 524293;  // odd sizes on purpose

    {   // all-reduce sum: x_q[i] = i%1000 + 1000q
        std::vector<float> x(n_ar), want(n_ar);
        for (size_t i = 0; i < n_ar; i++) {
            x[i] = (float)(i % 1000 + 1000 * r);
            want[i] = (float)(W * (i % 1000) + 1000 * W * (W - 1) / 2);
        }
        float* dx = to_device(x);
        float* dy = nullptr;
        cudaCheck(cudaMalloc(&dy, n_ar * sizeof(float)));
        ncclCheck(ncclAllReduce(dx, dy, n_ar, ncclFloat, ncclSum, ctx->comm, ctx->stream));
        report(ctx, "all_reduce", to_host(dy, n_ar, ctx->stream), want);
        cudaCheck(cudaFree(dx));
        cudaCheck(cudaFree(dy));
    }
    {   // reduce-scatter sum: rank q sends x_q[j] = j%977 - 3q for j < W*m; rank r gets block r of the sum
        std::vector<float> x((size_t)W * m), want(m);
        for (size_t j = 0; j < (size_t)W * m; j++) x[j] = (float)((long)(j % 977) - 3 * r);
        for (size_t k = 0; k < m; k++) want[k] = (float)((long)W * (long)(((size_t)r * m + k) % 977) - 3L * W * (W - 1) / 2);
        float* dx = to_device(x);
        float* dy = nullptr;
        cudaCheck(cudaMalloc(&dy, m * sizeof(float)));
        ncclCheck(ncclReduceScatter(dx, dy, m, ncclFloat, ncclSum, ctx->comm, ctx->stream));
        report(ctx, "reduce_scatter", to_host(dy, m, ctx->stream), want);
        cudaCheck(cudaFree(dx));
        cudaCheck(cudaFree(dy));
    }
    {   // all-gather: rank q contributes y_q[k] = 10000q + k%911 as block q
        std::vector<float> y(m), want((size_t)W * m);
        for (size_t k = 0; k < m; k++) y[k] = (float)(10000 * r + k % 911);
        for (int q = 0; q < W; q++)
            for (size_t k = 0; k < m; k++) want[(size_t)q * m + k] = (float)(10000 * q + k % 911);
        float* dy = to_device(y);
        float* dout = nullptr;
        cudaCheck(cudaMalloc(&dout, (size_t)W * m * sizeof(float)));
        ncclCheck(ncclAllGather(dy, dout, m, ncclFloat, ctx->comm, ctx->stream));
        report(ctx, "all_gather", to_host(dout, (size_t)W * m, ctx->stream), want);
        cudaCheck(cudaFree(dy));
        cudaCheck(cudaFree(dout));
    }
    {   // broadcast from the last rank (not 0, to catch root mix-ups), in place; the others start at -1
        int root = W - 1;
        std::vector<float> z(n_bc), want(n_bc);
        for (size_t i = 0; i < n_bc; i++) {
            want[i] = (float)(2 * (i % 743) + 1);
            z[i] = r == root ? want[i] : -1.0f;
        }
        float* dz = to_device(z);
        ncclCheck(ncclBroadcast(dz, dz, n_bc, ncclFloat, root, ctx->comm, ctx->stream));
        report(ctx, "broadcast", to_host(dz, n_bc, ctx->stream), want);
        cudaCheck(cudaFree(dz));
    }
    {   // ring: send s_r[i] = 100r + i%97 to rank r+1, receive from rank r-1
        int next = (r + 1) % W, prev = (r - 1 + W) % W;
        std::vector<float> s(n_p2p), want(n_p2p);
        for (size_t i = 0; i < n_p2p; i++) {
            s[i] = (float)(100 * r + i % 97);
            want[i] = (float)(100 * prev + i % 97);
        }
        float* ds = to_device(s);
        float* dr = nullptr;
        cudaCheck(cudaMalloc(&dr, n_p2p * sizeof(float)));
        cudaCheck(cudaMemset(dr, 0, n_p2p * sizeof(float)));
        ncclCheck(ncclGroupStart());
        ncclCheck(ncclSend(ds, n_p2p, ncclFloat, next, ctx->comm, ctx->stream));
        ncclCheck(ncclRecv(dr, n_p2p, ncclFloat, prev, ctx->comm, ctx->stream));
        ncclCheck(ncclGroupEnd());
        report(ctx, "send_recv_ring", to_host(dr, n_p2p, ctx->stream), want);
        cudaCheck(cudaFree(ds));
        cudaCheck(cudaFree(dr));
    }
}

// All-reduce bus bandwidth: time `iters` in-place all-reduces after warm-up; the slowest rank's time counts.
static void measure_bandwidth(RankCtx* ctx, int bw_mib) {
    size_t count = ((size_t)bw_mib << 20) / sizeof(float);
    float* buf = nullptr;
    float* d_ms = nullptr;
    cudaCheck(cudaMalloc(&buf, count * sizeof(float)));
    cudaCheck(cudaMalloc(&d_ms, sizeof(float)));
    cudaCheck(cudaMemset(buf, 0, count * sizeof(float)));
    const int warmup = 2, iters = 5;
    for (int i = 0; i < warmup; i++) ncclCheck(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, ctx->comm, ctx->stream));
    cudaCheck(cudaStreamSynchronize(ctx->stream));
    EventTimer timer = event_timer_create();
    event_timer_start(&timer, ctx->stream);
    for (int i = 0; i < iters; i++) ncclCheck(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, ctx->comm, ctx->stream));
    float ms = event_timer_stop(&timer, ctx->stream) / iters;
    event_timer_destroy(&timer);
    cudaCheck(cudaMemcpy(d_ms, &ms, sizeof(float), cudaMemcpyHostToDevice));
    ncclCheck(ncclAllReduce(d_ms, d_ms, 1, ncclFloat, ncclMax, ctx->comm, ctx->stream));
    float slowest = 0.0f;
    cudaCheck(cudaStreamSynchronize(ctx->stream));
    cudaCheck(cudaMemcpy(&slowest, d_ms, sizeof(float), cudaMemcpyDeviceToHost));
    if (ctx->rank == 0) {
        double bytes = (double)count * sizeof(float);
        double algbw = bytes / (slowest * 1e-3) / 1e9;
        double busbw = algbw * 2.0 * (ctx->world - 1) / ctx->world;
        printf("all_reduce bandwidth: %d ranks, %d MiB fp32 in place, %d iterations after %d warm-up: %.3f ms per op "
               "(slowest rank), algbw %.2f GB/s, busbw %.2f GB/s\n",
               ctx->world, bw_mib, iters, warmup, slowest, algbw, busbw);
    }
    cudaCheck(cudaFree(buf));
    cudaCheck(cudaFree(d_ms));
}

static int run_rank(const Options& opt) {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // whole lines, so the ranks' output interleaves cleanly
    int world = env_int("WORLD_SIZE", 0, true);
    int rank = env_int("RANK", 0, true);
    int local_rank = env_int("LOCAL_RANK", rank, false);
    if (world < 1 || rank >= world) die("RANK=%d and WORLD_SIZE=%d: need 0 <= RANK < WORLD_SIZE", rank, world);
    if (!opt.id_file) die("rank %d: --id-file FILE is required when running one rank (or start all ranks with --launch N)", rank);
    snprintf(g_alarm_msg, sizeof(g_alarm_msg),
             "error: rank %d: wall-clock limit of %d s reached (a peer rank died or hangs?); exiting\n", rank, opt.timeout_s + 5);
    signal(SIGALRM, rank_on_alarm);
    alarm(opt.timeout_s + 5);

    ncclUniqueId id;
    if (rank == 0) require_no_id_file(opt.id_file);
    else id = read_id_file(opt.id_file, rank, opt.timeout_s);
    int devices = cuda_require_device();
    int device = local_rank % devices;
    cudaCheck(cudaSetDevice(device));
    if (rank == 0) {
        ncclCheck(ncclGetUniqueId(&id));
        write_id_file(opt.id_file, id);
    }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    const char* hostid = getenv("NCCL_HOSTID");
    printf("rank %d/%d  pid %d, device %d (%s), NCCL_HOSTID=%s\n", rank, world, (int)getpid(), device, prop.name,
           hostid ? hostid : "(unset)");

    RankCtx ctx = {rank, world, nullptr, nullptr, 0};
    ncclCheck(ncclCommInitRank(&ctx.comm, world, id, rank));
    if (rank == 0) unlink(opt.id_file);  // every rank has joined, so every rank has read it
    cudaCheck(cudaStreamCreate(&ctx.stream));

    check_collectives(&ctx);
    measure_bandwidth(&ctx, opt.bw_mib);

    // every rank learns whether all passed
    int* d_fail = nullptr;
    int total = 0;
    cudaCheck(cudaMalloc(&d_fail, sizeof(int)));
    cudaCheck(cudaMemcpy(d_fail, &ctx.failures, sizeof(int), cudaMemcpyHostToDevice));
    ncclCheck(ncclAllReduce(d_fail, d_fail, 1, ncclInt32, ncclSum, ctx.comm, ctx.stream));
    cudaCheck(cudaStreamSynchronize(ctx.stream));
    cudaCheck(cudaMemcpy(&total, d_fail, sizeof(int), cudaMemcpyDeviceToHost));
    if (rank == 0) printf("all ranks: %d failed check(s) in total\n", total);
    cudaCheck(cudaFree(d_fail));
    cudaCheck(cudaStreamDestroy(ctx.stream));
    ncclCheck(ncclCommDestroy(ctx.comm));
    return ctx.failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
    Options opt;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) die("%s needs a value (see --help)", a);
            return argv[++i];
        };
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--launch")) opt.launch = (int)parse_long(a, value(), 1, 64);
        else if (!strcmp(a, "--id-file")) opt.id_file = value();
        else if (!strcmp(a, "--timeout")) opt.timeout_s = (int)parse_long(a, value(), 1, 86400);
        else if (!strcmp(a, "--bw-mib")) opt.bw_mib = (int)parse_long(a, value(), 1, 16384);
        else if (!strcmp(a, "--same-host")) opt.same_host = true;
        else {
            fprintf(stderr, "error: unknown argument '%s'\n", a);
            usage(stderr);
            return 1;
        }
    }
    if (opt.launch > 0) {
        if (opt.id_file) die("--id-file is for one rank; the launcher picks its own (drop --id-file or --launch)");
        return run_launcher(opt);
    }
    if (opt.same_host) die("--same-host only applies with --launch N");
    return run_rank(opt);
}
