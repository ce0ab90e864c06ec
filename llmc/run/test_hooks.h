// llmc/run/test_hooks.h: the test hooks of both trainers' training loops, for tests only. They are read from the
// environment once, before the loop (test_hooks_read), and applied by one call at the start of each step, after its
// batches are loaded (test_hooks_step). Unset, they do nothing.
//   LLMC_TEST_NAN_STEPS=S1,S2,..    the first micro-batch of those (1-based) steps is corrupt: its loss and its loss
//                                   scale in the backward NaN (a corrupt batch: loss and gradients NaN)
//   LLMC_TEST_NAN_GRAD_STEPS=S1,..  its loss scale only: NaN gradients under a finite loss (a backward overflow)
//   LLMC_TEST_SPIKE_STEPS=S1,..     every target of every micro-batch of those steps replaced by another token (wrong
//                                   labels: a loss spike)
//   LLMC_TEST_STALL=R:S             world rank R sleeps forever in step S, before the step's first collective, so that
//                                   the other ranks' --comm-timeout must end the run
//   LLMC_TEST_WRITE_DELAY=S         the rank that writes a checkpoint or an export sleeps S seconds first (slow storage:
//                                   the other ranks wait under --io-timeout, not --comm-timeout); test_hooks_write_delay
// tests/t_guard.sh drives the first three (the numerics guard, llmc/run/guard.h), tests/t_hangs.sh the stall and the
// write delay. A
// malformed value stops the run with a message naming the variable.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>
#include "llmc/utils.h"

// What the hooks do to one step's micro-batches: multipliers of the first micro-batch's loss and of its loss scale in
// the backward (hence its gradients), 1 and 1 normally. The trainers take micro-batch mb's from loss_of / grad_of.
struct TestCorrupt {
    double loss = 1.0, grad = 1.0;
    double loss_of(int mb) const { return mb == 0 ? loss : 1.0; }
    double grad_of(int mb) const { return mb == 0 ? grad : 1.0; }
};

struct TestHooks {
    std::vector<int> nan_steps, nan_grad_steps, spike_steps;  // 1-based steps
    int stall_rank = -1, stall_step = -1;                     // LLMC_TEST_STALL; -1: none
    int vocab_size = 1;                                       // the spike's tokens are taken modulo it
};

// The steps listed in the environment variable `name` ("3,7,8"); none when it is unset or empty.
static inline std::vector<int> test_hooks_steps(const char* name) {
    std::vector<int> steps;
    const char* e = getenv(name);
    if (!e || !*e) return steps;
    const std::string s = e;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        char* end = nullptr;
        const long v = strtol(s.c_str() + i, &end, 10);
        if (end != s.c_str() + j || v <= 0) die("%s: expected step numbers like 3,7, got '%s'", name, e);
        steps.push_back((int)v);
        i = j + 1;
    }
    return steps;
}

// Every hook from the environment; vocab_size: the model's vocabulary (the spike's replacement tokens).
static inline TestHooks test_hooks_read(int vocab_size) {
    TestHooks h;
    h.nan_steps = test_hooks_steps("LLMC_TEST_NAN_STEPS");
    h.nan_grad_steps = test_hooks_steps("LLMC_TEST_NAN_GRAD_STEPS");
    h.spike_steps = test_hooks_steps("LLMC_TEST_SPIKE_STEPS");
    h.vocab_size = vocab_size;
    if (const char* s = getenv("LLMC_TEST_STALL"); s && sscanf(s, "%d:%d", &h.stall_rank, &h.stall_step) != 2)
        die("LLMC_TEST_STALL: expected RANK:STEP, got '%s'", s);
    return h;
}

static inline bool test_hooks_listed(const std::vector<int>& steps, int step) {
    for (int s : steps)
        if (s == step) return true;
    return false;
}

// Step `step` (1-based) on world rank `rank`, its batches loaded: the stall (it never returns), the spike's targets
// (changed in place, every micro-batch), and what the step's first micro-batch is multiplied by.
static inline TestCorrupt test_hooks_step(const TestHooks& h, int step, int rank,
                                          std::vector<std::vector<int32_t>>* targets) {
    if (h.stall_step > 0 && step == h.stall_step && rank == h.stall_rank)
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    TestCorrupt c;
    if (test_hooks_listed(h.nan_steps, step)) c.loss = c.grad = NAN;
    if (test_hooks_listed(h.nan_grad_steps, step)) c.grad = NAN;
    if (test_hooks_listed(h.spike_steps, step))
        for (std::vector<int32_t>& t : *targets)
            for (int32_t& x : t)
                if (x >= 0) x = (int32_t)(((int64_t)x * 7919 + 13) % h.vocab_size);
    return c;
}

// LLMC_TEST_WRITE_DELAY: called by the writing rank just before it writes a checkpoint (the trainers' save).
static inline void test_hooks_write_delay() {
    const char* e = getenv("LLMC_TEST_WRITE_DELAY");
    if (!e || !*e) return;
    char* end = nullptr;
    const double s = strtod(e, &end);
    if (*end || !(s >= 0) || s > 3600) die("LLMC_TEST_WRITE_DELAY: expected seconds from 0 to 3600, got '%s'", e);
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
}
