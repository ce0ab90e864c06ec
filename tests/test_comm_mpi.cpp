// tests/test_comm_mpi.cpp: llmc/parallel/comm_mpi.h's MPI backend with COMM_MAX_COUNT lowered to 5 elements, so
// that every call with counts 6 and 13 goes in pieces (as calls above INT_MAX elements do), and
// counts 0, 3 and 5 in one call. Each collective, point to point and host call is compared with
// its definition computed by hand on every rank. Run it in one process and under mpirun.
#define COMM_MAX_COUNT ((size_t)5)
#include <string>
#include <vector>
#include "llmc/parallel/comm_mpi.h"

#include "tests/check.h"

int main(int argc, char** argv) {
    Comm w = comm_init(&argc, &argv);
    const int W = w.size, r = w.rank;
    double bad[7] = {0, 0, 0, 0, 0, 0, 0};  // per call kind: mismatching elements over all ranks
    for (size_t n : {(size_t)0, (size_t)3, (size_t)5, (size_t)6, (size_t)13}) {
        std::vector<double> a(n), mx(n);
        for (size_t i = 0; i < n; i++) a[i] = mx[i] = r * 100.0 + i;
        comm_all_reduce_sum(w, a.data(), n);
        comm_all_reduce_max(w, mx.data(), n);
        for (size_t i = 0; i < n; i++) {
            bad[0] += a[i] != 100.0 * W * (W - 1) / 2 + (double)W * i;
            bad[0] += mx[i] != (W - 1) * 100.0 + i;
        }
        // reduce-scatter: send[W*n] = i + rank on every rank; piece r summed
        std::vector<float> send((size_t)W * n), recv(n);
        for (size_t i = 0; i < send.size(); i++) send[i] = (float)(i + r);
        comm_reduce_scatter(w, send.data(), recv.data(), n);
        for (size_t i = 0; i < n; i++) bad[1] += recv[i] != (float)(W * ((size_t)r * n + i) + W * (W - 1) / 2);
        // all-gather, from a separate buffer and in place
        std::vector<float> g((size_t)W * n, -1), g2((size_t)W * n, -1), mine(n);
        for (size_t i = 0; i < n; i++) mine[i] = g2[(size_t)r * n + i] = (float)(r * 1000 + i);
        comm_all_gather(w, mine.data(), g.data(), n);
        comm_all_gather(w, g2.data() + (size_t)r * n, g2.data(), n);
        for (int q = 0; q < W; q++)
            for (size_t i = 0; i < n; i++) {
                bad[2] += g[(size_t)q * n + i] != (float)(q * 1000 + i);
                bad[2] += g2[(size_t)q * n + i] != (float)(q * 1000 + i);
            }
        std::vector<double> b(n, r == W - 1 ? 7.0 + r : 0.0);
        comm_broadcast(w, b.data(), n, W - 1);
        for (double x : b) bad[3] += x != 7.0 + (W - 1);
        if (W > 1) {  // a ring: every rank sends to the next and receives from the previous
            std::vector<float> s(n, r + 0.5f), rv(n, 0);
            CommRequest req;
            comm_send(w, s.data(), n, (r + 1) % W, 9, &req);
            comm_recv(w, rv.data(), n, (r + W - 1) % W, 9);
            comm_wait(&req);
            for (float x : rv) bad[4] += x != (float)((r + W - 1) % W) + 0.5f;
        }
        double h[2] = {(double)r, (double)r};
        comm_host_sum(w, h, 1);
        comm_host_max(w, h + 1, 1);
        bad[5] += h[0] != W * (W - 1) / 2.0;
        bad[6] += h[1] != W - 1;
    }
    comm_host_sum(w, bad, 7);
    if (r == 0) {
        const std::string on = " (" + std::to_string(W) + " rank" + (W > 1 ? "s" : "") + ", pieces of at most 5 elements)";
        check(bad[0] == 0, "comm: all-reduce sum and max" + on, "%g mismatches", bad[0]);
        check(bad[1] == 0, "comm: reduce-scatter" + on, "%g mismatches", bad[1]);
        check(bad[2] == 0, "comm: all-gather, separate and in place" + on, "%g mismatches", bad[2]);
        check(bad[3] == 0, "comm: broadcast" + on, "%g mismatches", bad[3]);
        if (W > 1) check(bad[4] == 0, "comm: send and receive around a ring" + on, "%g mismatches", bad[4]);
        check(bad[5] == 0 && bad[6] == 0, "comm: host sum and max" + on, "%g, %g mismatches", bad[5], bad[6]);
    }
    comm_finalize();
    return bad[0] + bad[1] + bad[2] + bad[3] + bad[4] + bad[5] + bad[6] != 0;
}
