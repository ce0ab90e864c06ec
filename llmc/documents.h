// llmc/documents.h: packed documents, as Megatron-LM's GPT data sets treat them. A training row of T tokens is cut
// from a stream of documents, each ended by an end-of-document token (--eod-token; default the tokenizer's
// end-of-text). Three switches, each off by default (then a row is one causal sequence, as before):
//   --reset-position-ids 1     positions restart at 0 on the token after each end-of-document token
//   --reset-attention-mask 1   a token attends only to the tokens of its own document (and, causally, to earlier ones)
//   --eod-mask-loss 1          no loss where the input is the end-of-document token (the prediction across documents)
// The end-of-document token belongs to the document it ends, as in Megatron's get_ltor_masks_and_position_ids.
// Both trainers derive the two per-token arrays below from a micro-batch's input tokens on every rank that runs its
// forward (every pipeline stage has the tokens), so nothing about documents is sent between ranks:
//   doc[n]  the row index of the first token of token n's document: query t sees keys doc[t] <= t' <= t
//   pos[n]  token n's position: t - doc[n] (reset) or t
//   documents_mark(d, inputs, B, T, doc, pos)   both arrays of a micro-batch [B,T]
//   documents_mask_loss(d, inputs, targets, N)  --eod-mask-loss: target -1 (ignored) where the input is the eod
//   documents_describe(d)                       the start-up line ("" when off)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

struct Documents {
    bool reset_positions = false;  // --reset-position-ids
    bool reset_mask = false;       // --reset-attention-mask
    bool mask_loss = false;        // --eod-mask-loss
    int64_t eod = -1;              // --eod-token; -1: the tokenizer's end-of-text (resolved before the run)
    bool any() const { return reset_positions || reset_mask || mask_loss; }
    bool marks() const { return reset_positions || reset_mask; }  // the per-token arrays are needed
};

// doc [B*T] and pos [B*T] of the rows inputs [B,T]: without --reset-attention-mask every doc is 0 (the whole row is
// one causal sequence); without --reset-position-ids pos is t.
static inline void documents_mark(const Documents& d, const int32_t* inputs, int B, int T, int32_t* doc, int32_t* pos) {
    for (int b = 0; b < B; b++) {
        int32_t start = 0;  // the first token of the current document
        for (int t = 0; t < T; t++) {
            const size_t n = (size_t)b * T + t;
            doc[n] = d.reset_mask ? start : 0;
            pos[n] = d.reset_positions ? t - start : t;
            if (inputs[n] == d.eod) start = t + 1;
        }
    }
}

// --eod-mask-loss: targets[n] = -1 wherever inputs[n] is the end-of-document token.
static inline void documents_mask_loss(const Documents& d, const int32_t* inputs, int32_t* targets, size_t N) {
    if (!d.mask_loss) return;
    for (size_t n = 0; n < N; n++)
        if (inputs[n] == d.eod) targets[n] = -1;
}

// The run's start-up line: what the switches do ("" when all are off). MFU still counts the whole causal attention,
// as Megatron's and the benchmark tables' figures do, though a masked row computes less of it.
static inline std::string documents_describe(const Documents& d) {
    if (!d.any()) return "";
    std::string s = "documents ended by token " + std::to_string(d.eod) + ":";
    if (d.reset_positions) s += " positions restart (--reset-position-ids);";
    if (d.reset_mask) s += " attention within each document (--reset-attention-mask);";
    if (d.mask_loss) s += " no loss on the end-of-document token (--eod-mask-loss);";
    s.back() = '\n';
    if (d.reset_mask) s += "  (MFU counts the whole causal attention, as without documents)\n";
    return s;
}
