// llmc/run/signals.h: stopping on SIGTERM or SIGINT (a Slurm preemption, a Ctrl-C), shared by both trainers.
// The first signal only sets a flag: the trainer finishes its current step, every rank agrees on the step at which
// it stops (the flag's maximum over the world group, once per step, so one rank's signal stops them all at the same
// step), writes a checkpoint and exits 0 with a message. A second signal exits at once (status 128 + signal) with a
// message; checkpoints are written to a temporary directory and renamed when complete (llmc/run/checkpoint.h), so the
// newest complete one stays what --resume auto takes.
#pragma once
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>
#include "llmc/run/checkpoint.h"

static volatile sig_atomic_t g_stop_signal = 0;

static inline void stop_signal_handler(int sig) {
    if (g_stop_signal) {  // the second: now (only async-signal-safe calls here)
        const char* m = "error: a second stop signal: exiting at once (the newest complete checkpoint is kept)\n";
        ssize_t n = write(2, m, strlen(m));
        (void)n;
        _exit(128 + sig);
    }
    g_stop_signal = sig;
}

static inline void stop_signals_install() {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = stop_signal_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
}

// The signal this rank received (0: none), as a double for the ranks' maximum.
static inline double stop_signal_pending() { return (double)g_stop_signal; }

static inline const char* stop_signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal"; }

// After (1-based) step `step`, not the run's last: whether a stop signal reached any rank (its maximum over the
// world group, so every rank answers the same). If so, save() writes the checkpoint (with -o, unless this step
// already did: saved) and rank 0 says so; the caller then exits 0.
template <typename CommT, typename SaveFn>
static inline bool stop_after_step(const CommT& world, int step, const std::string& out_dir, bool saved, SaveFn save) {
    double sig = stop_signal_pending();
    comm_host_max(world, &sig, 1);
    if (!sig) return false;
    if (!out_dir.empty() && !saved) save();
    if (world.rank == 0) {
        const char* name = stop_signal_name((int)sig);
        if (out_dir.empty()) printf("stopped by %s after step %d: no checkpoint written (no -o)\n", name, step);
        else printf("stopped by %s after step %d: checkpoint %s/%s written; continue with --resume auto\n", name, step,
                    out_dir.c_str(), ckpt_dir_name(step).c_str());
        fflush(stdout);
    }
    return true;
}
