// llmc/run/guard.h: the numerics guard of the training loop, shared by both trainers.
// After a step's forward and backward, before the update, the step's loss and pre-clip gradient norm (both
// already agreed by every rank: the loss summed over the ranks that count it, the norm over every gradient range)
// decide whether the update happens:
//   non-finite   a NaN or inf loss or norm (a corrupt batch, an overflow): the update is skipped
//   overflow     under loss scaling (--loss-scale, llmc/loss_scale.h), a finite loss with a non-finite norm: skipped
//                too; while a dynamic scale can still go lower it does not count toward --skip-limit
//   spike        with --spike-z Z > 0: a loss more than Z standard deviations above the mean of the last
//                --spike-window accepted losses (acting once the window is full) is skipped too
// A skipped step leaves the weights, the AdamW moments and AdamW's step count as they were; the data and the
// learning-rate schedule move on (Megatron-LM's "skipped iterations"). More than --skip-limit skips in a row end
// the run with a message: a run that keeps diverging is not saved by skipping. The counts and the window are
// part of the checkpoint (TrainState), so a resumed run decides as the uninterrupted one.
// Defaults: --skip-limit 5 (a few bad batches pass, a diverged run stops within a handful of steps); the spike guard
// is off (--spike-z 0) and, when on, looks at --spike-window 100 steps.
// The tests corrupt steps on purpose through the test hooks of llmc/run/test_hooks.h (TestCorrupt).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>
#include "llmc/train_config.h"
#include "llmc/run/checkpoint.h"
#include "llmc/utils.h"

// overflow: a finite loss and a non-finite gradient norm under loss scaling (llmc/loss_scale.h)
enum GuardVerdict { GUARD_UPDATE = 0, GUARD_NONFINITE = 1, GUARD_SPIKE = 2, GUARD_OVERFLOW = 3 };

static inline const char* guard_name(int v) {
    return v == GUARD_NONFINITE ? "non-finite" : v == GUARD_SPIKE ? "loss spike" : v == GUARD_OVERFLOW ? "overflow" : "update";
}

// The mean and standard deviation of the window (population).
static inline void guard_window_stats(const std::vector<double>& w, double* mean, double* sd) {
    double s = 0, q = 0;
    for (double x : w) s += x;
    *mean = w.empty() ? 0 : s / (double)w.size();
    for (double x : w) q += (x - *mean) * (x - *mean);
    *sd = w.empty() ? 0 : std::sqrt(q / (double)w.size());
}

// Whether step's update happens, from its agreed loss and pre-clip gradient norm.
static inline GuardVerdict guard_verdict(const TrainConfig& tc, const TrainState& s, double loss, double norm) {
    if (!std::isfinite(loss)) return GUARD_NONFINITE;
    if (!std::isfinite(norm)) return tc.loss_scaling.on() ? GUARD_OVERFLOW : GUARD_NONFINITE;
    if (tc.spike_z > 0 && (int)s.loss_window.size() == tc.spike_window) {
        double mean, sd;
        guard_window_stats(s.loss_window, &mean, &sd);
        if (loss > mean + tc.spike_z * sd) return GUARD_SPIKE;
    }
    return GUARD_UPDATE;
}

// Records step's verdict in the state: counts, the window of accepted losses. Returns false when the run must end
// (more than --skip-limit skips in a row); *why then says why.
static inline bool guard_record(const TrainConfig& tc, TrainState* s, GuardVerdict v, double loss, double norm, int step,
                                std::string* why) {
    if (v == GUARD_UPDATE) {
        s->skips_in_a_row = 0;
        if (tc.spike_z > 0) {
            s->loss_window.push_back(loss);
            if ((int)s->loss_window.size() > tc.spike_window) s->loss_window.erase(s->loss_window.begin());
        }
        return true;
    }
    s->skipped++;
    // an overflow that the dynamic scale lowers itself for is no sign of divergence (Megatron-LM skips those without
    // a limit): it neither counts toward --skip-limit nor ends a run of skips
    if (v == GUARD_OVERFLOW && loss_scale_can_lower(tc.loss_scaling, s->loss_scale)) return true;
    s->skips_in_a_row++;
    if (s->skips_in_a_row <= tc.skip_limit) return true;
    char b[320];
    snprintf(b, sizeof(b), "step %d: %d updates in a row skipped (the last: %s, loss %g, gradient norm %g), more than "
             "--skip-limit %d: the run diverged (lower -l, check the data, or resume an earlier checkpoint)", step,
             s->skips_in_a_row, guard_name(v), loss, norm, tc.skip_limit);
    *why = b;
    return false;
}

// AdamW's step count (1-based) for the update of step `step` (0-based): the updates made so far, plus one.
static inline int guard_adam_step(const TrainState& s, int step) { return step + 1 - s.skipped; }
