// tests/test_comm.cu: every call of llmc/parallel/comm_nccl.cuh against values computed independently on the host.
// Each rank fills its device buffers with a known function of (rank, index); the expected sums, maxima,
// gathered and scattered pieces are computed in double from the same function. Run with several ranks
// (mpirun, srun or scripts/launch.sh); tests/t_comm.sh runs it built against the NCCL emulation under
// mpirun -np 2, 3 and 4. Each rank prints "[FAIL] name (rank r): detail" for what it got wrong; rank 0
// prints "[PASS] name" when no rank failed it (the failures agreed with comm_host_max). On GPUs:
// scripts/launch.sh 2 build/test_comm (several ranks sharing one GPU need a distinct NCCL_HOSTID each).
//   test_comm              all checks
//   test_comm --deadlock   ranks 0 and 1 both send to each other first (no group): must hang on a GPU,
//                          and end with the emulation's timeout message under tests/cuda_emu
#include <cmath>
#include <string>
#include <vector>
#include "llmc/parallel/comm_nccl.cuh"
#include "llmc/parallel/topology.h"

static Comm world;
static int g_failed = 0;

// one check: this rank's verdict, agreed over the world
static void report(const char* name, bool ok, const std::string& detail) {
    if (!ok) { printf("[FAIL] %s (rank %d): %s\n", name, world.rank, detail.c_str()); fflush(stdout); }
    double bad = ok ? 0 : 1;
    comm_host_max(world, &bad, 1);
    if (bad == 0 && world.rank == 0) printf("[PASS] %s (%d ranks)\n", name, world.size);
    if (bad != 0) g_failed = 1;
    fflush(stdout);
}

// the value rank r holds at index i: a fraction with few bits (exact in bf16 when `exact`)
static double value(int r, size_t i, bool exact) {
    double v = (double)((r * 7 + (long)i * 3) % 17) - 8;
    return exact ? v : v + 0.00390625 * (double)((r * 5 + (long)i) % 9) + 1e-3 * r;
}
template <typename T> static const char* type_name();
template <> const char* type_name<float>() { return "fp32"; }
template <> const char* type_name<__nv_bfloat16>() { return "bf16"; }
template <> const char* type_name<double>() { return "fp64"; }
// what a value becomes when stored as T, back in double
template <typename T> static double as_t(double v) { return (double)(T)v; }
// allowed error of a sum of k values of magnitude up to m, as T: the reduction's roundings
template <typename T> static double tol(double m, int k);
template <> double tol<float>(double m, int k) { return 4e-7 * m * k; }
template <> double tol<__nv_bfloat16>(double m, int k) { return 0.0078125 * m * k; }  // 2^-7 per step
template <> double tol<double>(double m, int k) { return 1e-15 * m * k; }

template <typename T> static T* to_device(const std::vector<double>& h) {
    std::vector<T> t(h.size());
    for (size_t i = 0; i < h.size(); i++) t[i] = (T)h[i];
    T* d = nullptr;
    cudaCheck(cudaMalloc(&d, h.size() * sizeof(T) + 1));
    cudaCheck(cudaMemcpy(d, t.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T> static std::vector<double> to_host(const Comm& c, const T* d, size_t n) {
    cudaCheck(cudaStreamSynchronize(c.stream));
    std::vector<T> t(n);
    cudaCheck(cudaMemcpy(t.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<double> h(n);
    for (size_t i = 0; i < n; i++) h[i] = (double)t[i];
    return h;
}
// "" when got matches want within tol; otherwise the first mismatch
static std::string compare(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
    if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
    for (size_t i = 0; i < got.size(); i++)
        if (!(std::fabs(got[i] - want[i]) <= tolerance)) {
            char b[160];
            snprintf(b, sizeof(b), "index %zu: got %.9g, expected %.9g (tolerance %.3g)", i, got[i], want[i], tolerance);
            return b;
        }
    return "";
}

// The collectives of group `g`, whose ranks are the world ranks `members`, on type T; `tag` names the group.
template <typename T>
static void check_collectives(const Comm& g, const std::vector<int>& members, const char* tag, size_t n, bool exact) {
    std::string pre = std::string(tag) + " " + type_name<T>() + " ";
    int me = world.rank, P = g.size;
    double m = 0;
    for (size_t i = 0; i < n * P; i++) for (int q : members) m = std::fmax(m, std::fabs(value(q, i, exact)));
    double t = exact ? 0 : tol<T>(m, P);
    // all-reduce sum and max
    for (int op = 0; op < 2; op++) {
        std::vector<double> h(n), want(n);
        for (size_t i = 0; i < n; i++) {
            h[i] = value(me, i, exact);
            double s = op == 0 ? 0 : -1e300;
            for (int q : members) s = op == 0 ? s + as_t<T>(value(q, i, exact)) : std::fmax(s, as_t<T>(value(q, i, exact)));
            want[i] = op == 0 ? as_t<T>(s) : s;
        }
        T* d = to_device<T>(h);
        if (op == 0) comm_all_reduce_sum(g, d, n); else comm_all_reduce_max(g, d, n);
        std::string e = compare(to_host(g, d, n), want, op == 0 ? t : 0);
        report((pre + (op == 0 ? "all_reduce_sum" : "all_reduce_max")).c_str(), e.empty(), e);
        cudaCheck(cudaFree(d));
    }
    // reduce-scatter, out of place and in place (recv = send + rank * n)
    for (int inplace = 0; inplace < 2; inplace++) {
        std::vector<double> h(n * P), want(n);
        for (size_t i = 0; i < n * P; i++) h[i] = value(me, i, exact);
        for (size_t i = 0; i < n; i++) {
            double s = 0;
            for (int q : members) s += as_t<T>(value(q, g.rank * n + i, exact));
            want[i] = as_t<T>(s);
        }
        T* send = to_device<T>(h);
        T* recv = inplace ? send + g.rank * n : to_device<T>(std::vector<double>(n, -99));
        comm_reduce_scatter(g, (const T*)send, recv, n);
        std::string e = compare(to_host(g, recv, n), want, t);
        report((pre + (inplace ? "reduce_scatter in place" : "reduce_scatter")).c_str(), e.empty(), e);
        if (!inplace) cudaCheck(cudaFree(recv));
        cudaCheck(cudaFree(send));
    }
    // all-gather, out of place and in place (send = recv + rank * n)
    for (int inplace = 0; inplace < 2; inplace++) {
        std::vector<double> mine(n), init(n * P, -99), want(n * P);
        for (size_t i = 0; i < n; i++) mine[i] = value(me, i, exact);
        for (int p = 0; p < P; p++)
            for (size_t i = 0; i < n; i++) want[p * n + i] = as_t<T>(value(members[p], i, exact));
        if (inplace) for (size_t i = 0; i < n; i++) init[g.rank * n + i] = mine[i];
        T* recv = to_device<T>(init);
        T* send = inplace ? recv + g.rank * n : to_device<T>(mine);
        comm_all_gather(g, (const T*)send, recv, n);
        std::string e = compare(to_host(g, recv, n * P), want, 0);
        report((pre + (inplace ? "all_gather in place" : "all_gather")).c_str(), e.empty(), e);
        if (!inplace) cudaCheck(cudaFree(send));
        cudaCheck(cudaFree(recv));
    }
    // broadcast from the last rank of the group
    {
        std::vector<double> h(n), want(n);
        for (size_t i = 0; i < n; i++) { h[i] = value(me, i, exact); want[i] = as_t<T>(value(members[P - 1], i, exact)); }
        T* d = to_device<T>(h);
        comm_broadcast(g, d, n, P - 1);
        std::string e = compare(to_host(g, d, n), want, 0);
        report((pre + "broadcast").c_str(), e.empty(), e);
        cudaCheck(cudaFree(d));
    }
}

// A pipeline's traffic: forward, each rank receives from rank - 1 then sends to rank + 1; backward the
// reverse. Two messages per hop, received in issue order whatever their tags.
static void check_send_recv(size_t n) {
    int me = world.rank, P = world.size;
    for (int dir = 0; dir < 2; dir++) {
        int from = dir == 0 ? me - 1 : me + 1, to = dir == 0 ? me + 1 : me - 1;
        std::vector<double> a(n), b(n), want_a(n), want_b(n);
        for (size_t i = 0; i < n; i++) {
            a[i] = value(me, i, false); b[i] = value(me + 100, i, false);
            if (from >= 0 && from < P) { want_a[i] = as_t<float>(value(from, i, false)); want_b[i] = as_t<float>(value(from + 100, i, false)); }
        }
        float* sa = to_device<float>(a);
        float* sb = to_device<float>(b);
        float* ra = to_device<float>(std::vector<double>(n, -99));
        float* rb = to_device<float>(std::vector<double>(n, -99));
        if (from >= 0 && from < P) { comm_recv(world, ra, n, from, 7); comm_recv(world, rb, n, from, 3); }
        CommRequest r1, r2;
        if (to >= 0 && to < P) {
            comm_send(world, (const float*)sa, n, to, 3, &r1);
            comm_send(world, (const float*)sb, n, to, 7, &r2);
            comm_wait(&r1);
            comm_wait(&r2);
        }
        std::string e;
        if (from >= 0 && from < P) {
            e = compare(to_host(world, ra, n), want_a, 0);
            if (e.empty()) e = compare(to_host(world, rb, n), want_b, 0);
        }
        report(dir == 0 ? "send/recv forward chain, issue order" : "send/recv backward chain, issue order", e.empty(), e);
        for (float* p : {sa, sb, ra, rb}) cudaCheck(cudaFree(p));
    }
}

int main(int argc, char** argv) {
    world = comm_init(&argc, &argv);
    if (argc > 1 && std::string(argv[1]) == "--deadlock") {
        if (world.size < 2) die("--deadlock needs 2 ranks");
        size_t n = 1000;
        float *s = nullptr, *r = nullptr;
        cudaCheck(cudaMalloc(&s, n * sizeof(float)));
        cudaCheck(cudaMalloc(&r, n * sizeof(float)));
        if (world.rank < 2) {
            CommRequest req;
            int peer = 1 - world.rank;
            comm_send(world, (const float*)s, n, peer, 0, &req);  // both send first: never matched
            comm_recv(world, r, n, peer, 0);
            comm_wait(&req);
        }
        comm_barrier(world);
        printf("deadlock test: the sends completed (no deadlock)\n");
        comm_finalize();
        return 0;
    } else if (argc > 1 && std::string(argv[1]) == "--mismatch") {
        // rank 1 issues a max where rank 0 issues a sum, then one more: the emulated NCCL compares the sequences when
        // the communicator is destroyed, and rank 1 sends 100 values that rank 0 receives as 200
        if (world.size != 2) die("--mismatch needs 2 ranks");
        size_t n = 64;
        float* b = nullptr;
        cudaCheck(cudaMalloc(&b, 200 * sizeof(float)));
        cudaCheck(cudaMemset(b, 0, 200 * sizeof(float)));
        if (std::string(argc > 2 ? argv[2] : "") == "p2p") {
            CommRequest req;
            if (world.rank == 1) comm_send(world, (const float*)b, 100, 0, 0, &req), comm_wait(&req);
            else comm_recv(world, b, 200, 1, 0), comm_stream_sync(world, "the exchange");
        } else {
            if (world.rank == 0) comm_all_reduce_sum(world, b, n);
            else comm_all_reduce_max(world, b, n);
            comm_all_reduce_sum(world, b, n);
        }
        comm_finalize();
        printf("mismatch test: no error reported\n");
        return 0;
    } else if (argc > 1) {
        die("usage: test_comm [--deadlock | --mismatch [p2p]]");
    }

    // host values first: every later verdict is agreed through comm_host_max
    {
        std::vector<double> s(300), mx(300);  // over one scratch's worth (256): two pieces
        for (size_t i = 0; i < s.size(); i++) s[i] = mx[i] = value(world.rank, i, false);
        comm_host_sum(world, s.data(), s.size());
        comm_host_max(world, mx.data(), mx.size());
        std::vector<double> ws(300, 0), wm(300, -1e300);
        for (size_t i = 0; i < ws.size(); i++)
            for (int q = 0; q < world.size; q++) { ws[i] += value(q, i, false); wm[i] = std::fmax(wm[i], value(q, i, false)); }
        std::string e = compare(s, ws, 1e-12 * world.size * 10);
        std::string f = compare(mx, wm, 0);
        report("comm_host_sum", e.empty(), e);
        report("comm_host_max", f.empty(), f);
    }
    size_t n = 1031;  // odd, not a multiple of anything NCCL splits by
    for (int exact = 1; exact >= 0; exact--) {
        std::vector<int> all(world.size);
        for (int q = 0; q < world.size; q++) all[q] = q;
        const char* tag = exact ? "world, integers" : "world, fractions";
        check_collectives<float>(world, all, tag, n, exact);
        check_collectives<__nv_bfloat16>(world, all, tag, n, exact);
        check_collectives<double>(world, all, tag, n, exact);
    }
    // sub-groups of a dp x tp layout (tp = 2 when the world is even)
    {
        int tp = world.size % 2 == 0 ? 2 : 1, dp = world.size / tp;
        Topology t = topo_make(dp, tp, 1, world.rank);
        Comm tpc = comm_group(world, t.tp_group), dpc = comm_group(world, t.dp_group);
        bool ok = tpc.size == tp && tpc.rank == t.tp_rank && dpc.size == dp && dpc.rank == t.dp_rank;
        report("comm_group sizes and ranks", ok, "tp group " + std::to_string(tpc.rank) + "/" + std::to_string(tpc.size) +
               ", dp group " + std::to_string(dpc.rank) + "/" + std::to_string(dpc.size));
        std::string tag = "dp" + std::to_string(dp) + "xtp" + std::to_string(tp);
        check_collectives<float>(dpc, t.dp_group, (tag + " dp group").c_str(), 257, false);
        check_collectives<__nv_bfloat16>(tpc, t.tp_group, (tag + " tp group").c_str(), 257, false);
        double v = world.rank + 1;
        comm_host_sum(tpc, &v, 1);
        double want = 0;
        for (int q : t.tp_group) want += q + 1;
        report("comm_host_sum on the tp group", v == want, "got " + std::to_string(v) + ", expected " + std::to_string(want));
        comm_barrier(dpc);
        comm_barrier(tpc);
    }
    // counts are size_t from the caller to NCCL (no int on the way); a count over 2^31 elements needs more
    // memory than this test takes, so this checks the path with a count computed as size_t
    {
        size_t big = (size_t)3 << 8;
        std::vector<double> h(big), want(big);
        for (size_t i = 0; i < big; i++) {
            h[i] = value(world.rank, i, true);
            want[i] = 0;
            for (int q = 0; q < world.size; q++) want[i] += value(q, i, true);
        }
        double* d = to_device<double>(h);
        comm_all_reduce_sum(world, d, big);
        std::string e = compare(to_host(world, d, big), want, 0);
        report("size_t count all_reduce_sum", e.empty(), e);
        cudaCheck(cudaFree(d));
    }
    check_send_recv(513);
    comm_barrier(world);
    comm_finalize();
    return g_failed;
}
