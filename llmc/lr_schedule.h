// llmc/lr_schedule.h: the learning-rate schedule, a pure function of the step.
// Linear warmup over `warmup` steps to lr_max, then one of:
//   cosine:   lr_min + (lr_max - lr_min) * 0.5 * (1 + cos(pi * p))
//   linear:   lr_max + (lr_min - lr_max) * p
//   constant: lr_max
//   wsd:      lr_max until the last decay_frac of the steps, then linear to lr_min at the last step
// with p = (step - warmup) / (steps - warmup) in [0, 1). train_gpt.py mirrors this exactly.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>

enum LrSchedule { LR_COSINE, LR_LINEAR, LR_CONSTANT, LR_WSD };

static inline bool lr_schedule_from_name(const std::string& s, LrSchedule* out) {
    if (s == "cosine") *out = LR_COSINE;
    else if (s == "linear") *out = LR_LINEAR;
    else if (s == "constant") *out = LR_CONSTANT;
    else if (s == "wsd") *out = LR_WSD;
    else return false;
    return true;
}

static inline const char* lr_schedule_name(LrSchedule s) {
    return s == LR_COSINE ? "cosine" : s == LR_LINEAR ? "linear" : s == LR_CONSTANT ? "constant" : "wsd";
}

// step is 0-based, steps is the total number of steps of the run.
static inline double lr_at(int step, int steps, int warmup, double lr_max, double lr_min, LrSchedule kind,
                           double decay_frac) {
    if (step < warmup) return lr_max * (step + 1) / warmup;
    if (kind == LR_WSD) {
        int n_decay = std::max(1, (int)std::lround(decay_frac * steps));
        if (step < steps - n_decay) return lr_max;
        return lr_max + (lr_min - lr_max) * (double)(step - (steps - n_decay) + 1) / n_decay;
    }
    double p = (double)(step - warmup) / std::max(1, steps - warmup);
    if (kind == LR_COSINE) return lr_min + (lr_max - lr_min) * 0.5 * (1.0 + std::cos(M_PI * p));
    if (kind == LR_LINEAR) return lr_max + (lr_min - lr_max) * p;
    return lr_max;
}
