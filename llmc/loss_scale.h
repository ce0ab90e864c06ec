// llmc/loss_scale.h: loss scaling, Megatron-LM's rule (its ConstantGradScaler and DynamicGradScaler), for both
// trainers. fp16's smallest normal number is 6.1e-5 and many of a backward's gradients lie below it: the backward
// starts from the loss times a scale S (every gradient is then S times the true one, away from the underflow), and
// the optimizer multiplies the gradients by 1/S before it clips and updates. The global norm's pass finds whether any
// gradient overflowed (a non-finite norm); such a step is skipped (llmc/run/guard.h) and, when the scale is dynamic,
// lowers it.
//   --loss-scale S            a static scale (Megatron's --loss-scale); 1, the default of the bf16 and fp32 builds: none
//   --loss-scale dynamic      the dynamic scale below (Megatron's default under --fp16, when --loss-scale is not given)
//   --initial-loss-scale X    the dynamic scale's start (default 2^32)
//   --loss-scale-window N     clean steps in a row before the scale doubles (default 1000)
//   --hysteresis H            overflows before the scale starts halving (default 2)
//   --min-loss-scale M        the scale's floor (default 1)
// The dynamic rule, after every step (overflow: the step's gradient norm is not finite):
//   overflow  the clean count restarts at 0; the hysteresis count drops by one and, once it is at or below 0, the
//             scale halves, not below M (so after the first H - 1 overflows every further one halves it, until a
//             growth restores the count)
//   clean     the clean count grows by one; at N, it restarts, the hysteresis count is back to H and the scale doubles
//             (Megatron tests == N; at or past N is the same but for a run resumed with a window shorter than its count)
// The scale, both counts and the scale each log line prints are those after this update (Megatron prints the scale
// after its optimizer step). They are part of a checkpoint (llmc/run/checkpoint.h), so a resumed run scales as the
// uninterrupted one.
// A power of two (every default) multiplies and divides exactly: without an overflow or an underflow, the fp32 and
// bf16 builds' steps under any such scale are bit for bit those without one (tests/t_loss_scale.sh checks it).
#pragma once
#include <algorithm>
#include <cmath>

struct LossScaling {
    bool dynamic = false;
    double scale = 1.0;          // --loss-scale S (static)
    double initial = 4294967296.0;  // --initial-loss-scale (2^32)
    int window = 1000;           // --loss-scale-window
    int hysteresis = 2;          // --hysteresis
    double min_scale = 1.0;      // --min-loss-scale
    bool on() const { return dynamic || scale != 1.0; }
};

// The scale now and the dynamic rule's two counts (dynamic: they are the dynamic rule's, from this run or the
// checkpoint it resumed).
struct LossScaleState {
    bool dynamic = false;
    double scale = 1.0;
    int clean = 0;               // Megatron's growth tracker
    int hysteresis = 0;          // Megatron's hysteresis tracker
};

// At the start of a run (fresh or resumed): a static scale is the flag's; a dynamic one continues from the
// checkpoint's state when it has one, or starts at --initial-loss-scale.
static inline void loss_scale_begin(const LossScaling& c, LossScaleState* s) {
    if (!c.dynamic) { *s = LossScaleState(); s->scale = c.scale; return; }
    if (s->dynamic) return;
    s->dynamic = true;
    s->scale = c.initial;
    s->clean = 0;
    s->hysteresis = c.hysteresis;
}

// Whether an overflow at this scale is the scale's to fix (its step is skipped without counting toward --skip-limit):
// a dynamic scale still above its floor. A static scale, or one at the floor, cannot go lower: its overflows count.
static inline bool loss_scale_can_lower(const LossScaling& c, const LossScaleState& s) {
    return c.dynamic && s.scale > c.min_scale;
}

// After a step: the dynamic rule (a static scale does not move).
static inline void loss_scale_update(const LossScaling& c, LossScaleState* s, bool overflow) {
    if (!c.dynamic) return;
    if (overflow) {
        s->clean = 0;
        s->hysteresis--;
        if (s->hysteresis <= 0) s->scale = std::max(s->scale * 0.5, c.min_scale);
        return;
    }
    if (++s->clean >= c.window) {  // at or past: a run resumed with a shorter window grows at once
        s->clean = 0;
        s->hysteresis = c.hysteresis;
        s->scale *= 2.0;
    }
}
