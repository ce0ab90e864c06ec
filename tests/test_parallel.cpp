// tests/test_parallel.cpp: checks of the parallel bookkeeping headers (llmc/parallel/topology.h,
// parallel/: pp_schedule.h, pp_exec.h, zero.h, layout.h, tp.h, comms.h and comm_mpi.h without MPI; a rank's part of the
// model, llmc/run/assemble.h; checkpoints written at one layout and read at another, llmc/run/checkpoint.h) and a weight
// comparer for the parity runs.
//   build/test_parallel units                 every unit check, one [PASS]/[FAIL] line each
//   build/test_parallel compare A B TOL NAME  tensor-by-tensor max |a-b| / (max|b| + 1e-3) of two
//                                             safetensors files (same names, F32), within TOL
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>
#include "llmc/parallel/comm_mpi.h"
#include "llmc/parallel/comms.h"
#include "llmc/run/assemble.h"
#include "llmc/model_config.h"
#include "llmc/parallel/layout.h"
#include "llmc/param_table.h"
#include "llmc/parallel/pp_exec.h"
#include "llmc/parallel/pp_schedule.h"
#include "llmc/run/safetensors.h"
#include "llmc/parallel/topology.h"
#include "llmc/parallel/tp.h"
#include "llmc/parallel/zero.h"

#include "tests/check.h"

static void test_topology() {
    bool ok = true;
    std::string bad;
    for (int dp : {1, 2, 3}) for (int tp : {1, 2, 4}) for (int pp : {1, 2, 3}) {
        const int W = dp * tp * pp;
        std::vector<Topology> all;
        for (int r = 0; r < W; r++) all.push_back(topo_make(dp, tp, pp, r));
        for (int r = 0; r < W; r++) {
            const Topology& t = all[r];
            bool good = topo_rank_of(dp, tp, t.pp_rank, t.dp_rank, t.tp_rank) == r && t.tp_rank == r % tp &&
                        (int)t.tp_group.size() == tp && (int)t.dp_group.size() == dp && (int)t.pp_group.size() == pp &&
                        t.tp_group[t.tp_rank] == r && t.dp_group[t.dp_rank] == r && t.pp_group[t.pp_rank] == r;
            // every member of a group sees the same member list; tp neighbours are adjacent ranks
            for (int m : t.tp_group) good &= all[m].tp_group == t.tp_group && all[m].pp_rank == t.pp_rank && all[m].dp_rank == t.dp_rank;
            for (int m : t.dp_group) good &= all[m].dp_group == t.dp_group && all[m].tp_rank == t.tp_rank;
            for (int m : t.pp_group) good &= all[m].pp_group == t.pp_group;
            for (int i = 1; i < tp; i++) good &= t.tp_group[i] == t.tp_group[0] + i;
            good &= t.emb_group.front() == t.pp_group.front() && t.emb_group.back() == t.pp_group.back();
            if (!good) { ok = false; bad = "dp" + std::to_string(dp) + " tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " rank " + std::to_string(r); }
        }
    }
    check(ok, "topology: coordinates round trip, groups consistent, tp fastest", "%s", bad.c_str());
    Topology t = topo_make(2, 2, 2, 6);  // (pp 1, dp 1, tp 0)
    check(t.pp_rank == 1 && t.dp_rank == 1 && t.tp_rank == 0 && t.tp_group == std::vector<int>({6, 7}) &&
              t.dp_group == std::vector<int>({4, 6}) && t.pp_group == std::vector<int>({2, 6}),
          "topology: rank 6 of dp2 tp2 pp2 is (pp 1, dp 1, tp 0) by hand");
}

// Runs every stage's list with non-blocking sends and blocking receives, matching by tag; fails
// on a deadlock, an unmatched message, a backward before its forward, a compute op before its
// input (activation or gradient) was received, or a step out of place.
static std::string simulate(int pp, int vpp, int n_mb, int* max_inflight_excess) {
    std::vector<std::vector<PpOp>> ops(pp);
    for (int s = 0; s < pp; s++) ops[s] = pp_schedule(pp, vpp, n_mb, s);
    std::vector<size_t> pc(pp, 0);
    std::map<std::tuple<int, int, int, int>, int> chan;  // (kind 0 act / 1 grad, mb, chunk received, to stage) -> from stage
    std::vector<std::set<std::pair<int, int>>> fwd_done(pp), bwd_done(pp);
    std::vector<std::set<std::tuple<int, int, int>>> got(pp);  // (0 activation / 1 gradient, mb, chunk) received
    std::vector<int> inflight(pp, 0);
    *max_inflight_excess = -1000;
    const int last = pp * vpp - 1;
    for (;;) {
        bool progress = false, all_done = true;
        for (int s = 0; s < pp; s++) {
            while (pc[s] < ops[s].size()) {
                const PpOp& o = ops[s][pc[s]];
                if (pp_stage_of_chunk(o.chunk, pp) != s) return "stage " + std::to_string(s) + " runs chunk " + std::to_string(o.chunk);
                if (o.kind == PP_RECV_ACT || o.kind == PP_RECV_GRAD) {
                    auto key = std::make_tuple(o.kind == PP_RECV_ACT ? 0 : 1, o.mb, o.chunk, s);
                    auto it = chan.find(key);
                    if (it == chan.end()) break;  // blocks
                    if (it->second != o.peer) return "receive from the wrong stage";
                    chan.erase(it);
                    got[s].insert(std::make_tuple(std::get<0>(key), o.mb, o.chunk));
                } else if (o.kind == PP_SEND_ACT) {
                    chan[std::make_tuple(0, o.mb, o.chunk + 1, o.peer)] = s;
                } else if (o.kind == PP_SEND_GRAD) {
                    chan[std::make_tuple(1, o.mb, o.chunk - 1, o.peer)] = s;
                } else if (o.kind == PP_FWD) {
                    if (!fwd_done[s].insert({o.mb, o.chunk}).second) return "forward twice";
                    if (o.chunk > 0 && !got[s].count({0, o.mb, o.chunk})) return "forward without its input";
                    inflight[s]++;
                    *max_inflight_excess = std::max(*max_inflight_excess, inflight[s] - (pp - s) * vpp);
                } else {
                    if (!fwd_done[s].count({o.mb, o.chunk})) return "backward of mb " + std::to_string(o.mb) + " before its forward";
                    if (!bwd_done[s].insert({o.mb, o.chunk}).second) return "backward twice";
                    if (o.chunk < last && !got[s].count({1, o.mb, o.chunk})) return "backward without its gradient";
                    inflight[s]--;
                }
                pc[s]++;
                progress = true;
            }
            all_done &= pc[s] == ops[s].size();
        }
        if (all_done) break;
        if (!progress) return "deadlock";
    }
    if (!chan.empty()) return "a message is never received";
    for (int s = 0; s < pp; s++)
        if ((int)fwd_done[s].size() != n_mb * vpp || (int)bwd_done[s].size() != n_mb * vpp) return "missing steps";
    return "";
}

// NCCL's point-to-point rules, written as a simulator (worst case: nothing is buffered).
//   - A rank runs its steps in order. A step is a compute op (it finishes at once) or a group of
//     sends / receives: one op on its own, or the ops between ncclGroupStart and ncclGroupEnd.
//   - Reaching a group, the rank posts all its ops at once; the group finishes when every one of
//     its ops has matched, and only then does the rank go on.
//   - Messages from stage a to stage b match in the order posted, with no tags: the k-th send
//     a -> b matches the k-th receive at b from a, once both are posted (an ungrouped send blocks
//     until its receive is posted, an ungrouped receive until its send is).
//   - eager: a send finishes as soon as it is posted (MPI's non-blocking sends); receives as above.
// steps[s]: stage s's steps, each a list of ops. Returns "" or the first problem: a deadlock (every
// unfinished stage waits on a group that cannot finish), or the k-th send and receive of a channel
// being different messages, or a message never received.
typedef std::tuple<int, int, int> PpMsgKey;  // (0 activation / 1 gradient, micro-batch, chunk that receives it)
static PpMsgKey msg_key(const PpOp& o) {
    if (o.kind == PP_SEND_ACT) return PpMsgKey(0, o.mb, o.chunk + 1);
    if (o.kind == PP_SEND_GRAD) return PpMsgKey(1, o.mb, o.chunk - 1);
    return PpMsgKey(o.kind == PP_RECV_ACT ? 0 : 1, o.mb, o.chunk);
}
static std::string nccl_simulate(const std::vector<std::vector<std::vector<PpOp>>>& steps, bool eager) {
    const int pp = (int)steps.size();
    std::map<std::pair<int, int>, std::vector<PpMsgKey>> sends, recvs;  // (from, to) -> messages in post order
    std::vector<size_t> pc(pp, 0);
    std::vector<std::vector<std::pair<bool, size_t>>> posted(pp);  // current group: (is send, index in its channel)
    std::vector<std::vector<std::pair<int, int>>> chans(pp);
    std::vector<bool> is_posted(pp, false);
    for (;;) {
        bool progress = false, all_done = true;
        for (int s = 0; s < pp; s++) {
            while (pc[s] < steps[s].size()) {
                const std::vector<PpOp>& st = steps[s][pc[s]];
                if (!pp_is_comm(st[0].kind)) { pc[s]++; progress = true; continue; }
                if (!is_posted[s]) {
                    posted[s].clear();
                    chans[s].clear();
                    for (const PpOp& o : st) {
                        const bool snd = o.kind == PP_SEND_ACT || o.kind == PP_SEND_GRAD;
                        const std::pair<int, int> ch = snd ? std::make_pair(s, o.peer) : std::make_pair(o.peer, s);
                        std::vector<PpMsgKey>& q = snd ? sends[ch] : recvs[ch];
                        posted[s].push_back({snd, q.size()});
                        chans[s].push_back(ch);
                        q.push_back(msg_key(o));
                    }
                    is_posted[s] = true;
                    progress = true;
                }
                bool done = true;
                for (size_t i = 0; i < posted[s].size(); i++) {
                    const bool snd = posted[s][i].first;
                    if (snd && eager) continue;
                    done &= (snd ? recvs[chans[s][i]] : sends[chans[s][i]]).size() > posted[s][i].second;
                }
                if (!done) break;
                is_posted[s] = false;
                pc[s]++;
                progress = true;
            }
            all_done &= pc[s] == steps[s].size();
        }
        for (auto& c : sends) {
            const std::vector<PpMsgKey>& r = recvs[c.first];
            for (size_t k = 0; k < std::min(c.second.size(), r.size()); k++)
                if (c.second[k] != r[k])
                    return "message " + std::to_string(k) + " from stage " + std::to_string(c.first.first) + " to " +
                           std::to_string(c.first.second) + " is not the one received";
        }
        if (all_done) break;
        if (!progress) {
            std::string stuck = "deadlock:";
            for (int s = 0; s < pp; s++)
                if (pc[s] < steps[s].size()) stuck += " stage " + std::to_string(s) + " at step " + std::to_string(pc[s]);
            return stuck;
        }
    }
    for (auto& c : sends)
        if (c.second.size() != recvs[c.first].size()) return "a message is never received";
    for (auto& c : recvs)
        if (c.second.size() != sends[c.first].size()) return "a receive has no send";
    return "";
}

// Every stage's list of `pp` stages, as grouped steps (pp_steps) or one op per step (grouped false).
static std::vector<std::vector<std::vector<PpOp>>> stage_steps(int pp, int vpp, int n_mb, bool training, bool grouped) {
    std::vector<std::vector<std::vector<PpOp>>> all(pp);
    for (int s = 0; s < pp; s++) {
        const std::vector<PpOp> ops = training ? pp_schedule(pp, vpp, n_mb, s) : pp_forward_schedule(pp, vpp, n_mb, s);
        if (grouped) {
            for (const std::pair<int, int>& st : pp_steps(ops)) all[s].push_back(std::vector<PpOp>(ops.begin() + st.first, ops.begin() + st.second));
        } else {
            for (const PpOp& o : ops) all[s].push_back({o});
        }
    }
    return all;
}

// Every stage's steps as pp_run (llmc/parallel/pp_exec.h) hands them to a trainer with an exchange callback, which
// train_gpt.cu posts as one NCCL group per call, its messages in the order given: a forward or backward
// is a step of its own, each exchange call one group.
static std::vector<std::vector<std::vector<PpOp>>> exchange_steps(int pp, int vpp, int n_mb, bool training) {
    std::vector<std::vector<std::vector<PpOp>>> all(pp);
    for (int s = 0; s < pp; s++) {
        PpCallbacks cb;
        cb.acquire = cb.release = [](int, int) {};
        cb.forward = [&](int mb, int chunk) { all[s].push_back({{PP_FWD, mb, chunk, -1}}); };
        cb.backward = [&](int mb, int chunk) { all[s].push_back({{PP_BWD, mb, chunk, -1}}); };
        cb.exchange = [&](const PpMsg* m, int n) {
            std::vector<PpOp> group;
            for (int i = 0; i < n; i++) group.push_back({m[i].kind, m[i].mb, m[i].chunk, m[i].peer});
            all[s].push_back(group);
        };
        pp_run(training ? pp_schedule(pp, vpp, n_mb, s) : pp_forward_schedule(pp, vpp, n_mb, s), pp * vpp, training, cb);
    }
    return all;
}

// Every configuration under NCCL's rules: pp 2-8, vpp 1-4, 1 to 3*pp micro-batches (interleaved
// training only at multiples of pp, as the trainers require), training and forward only.
static void test_schedule_nccl() {
    int n_cfg = 0, n_train = 0, old_deadlocks = 0, old_train_deadlocks = 0, new_bad = 0, eager_bad = 0, groups_bad = 0;
    int old_unexpected = 0, exchange_bad = 0;
    std::string new_err, eager_err, old_err, exchange_err;
    for (int pp = 2; pp <= 8; pp++) for (int vpp = 1; vpp <= 4; vpp++) for (int n_mb = 1; n_mb <= 3 * pp; n_mb++)
        for (bool training : {true, false}) {
            if (training && vpp > 1 && n_mb % pp != 0) continue;
            const std::string name = std::string(training ? "training" : "forward") + " pp" + std::to_string(pp) + " vpp" +
                                     std::to_string(vpp) + " mb" + std::to_string(n_mb);
            n_cfg++;
            n_train += training;
            const std::vector<std::vector<std::vector<PpOp>>> grouped = stage_steps(pp, vpp, n_mb, training, true);
            for (const auto& st : grouped)
                for (const std::vector<PpOp>& g : st) {
                    // a step is a compute op alone, or communication only, at most one op of each kind
                    int n_kind[6] = {0, 0, 0, 0, 0, 0};
                    for (const PpOp& o : g) n_kind[o.kind]++;
                    bool bad = n_kind[PP_FWD] + n_kind[PP_BWD] > 0 && g.size() > 1;
                    for (int k = 0; k < 6; k++) bad |= n_kind[k] > 1;
                    groups_bad += bad;
                }
            std::string e = nccl_simulate(grouped, false);
            if (!e.empty()) { new_bad++; if (new_err.empty()) new_err = name + ": " + e; }
            e = nccl_simulate(exchange_steps(pp, vpp, n_mb, training), false);
            if (!e.empty()) { exchange_bad++; if (exchange_err.empty()) exchange_err = name + ": " + e; }
            const std::vector<std::vector<std::vector<PpOp>>> single = stage_steps(pp, vpp, n_mb, training, false);
            e = nccl_simulate(single, false);
            if (!e.empty()) {
                old_deadlocks++;
                old_train_deadlocks += training;
                if (e.compare(0, 8, "deadlock") != 0 && new_err.empty()) new_err = name + " ungrouped: " + e;
            }
            // expected one op at a time: a forward-only list is a chain (each micro-batch passes the
            // stages in the same order everywhere), and 1F1B deadlocks from 2 micro-batches on
            // (stage pp-2 sends activation 1 while stage pp-1 sends gradient 0)
            if (vpp == 1 || !training) {
                const bool want = training && n_mb >= 2;
                if (want != !e.empty()) { old_unexpected++; if (old_err.empty()) old_err = name + ": '" + e + "'"; }
            }
            e = nccl_simulate(single, true);
            if (!e.empty()) { eager_bad++; if (eager_err.empty()) eager_err = name + ": " + e; }
        }
    check(new_bad == 0 && groups_bad == 0 && new_err.empty(),
          "pp schedule under NCCL rules: " + std::to_string(n_cfg) + " configurations (" + std::to_string(n_train) +
              " training, pp 2-8, vpp 1-4, 1 to 3*pp micro-batches) run to the end with grouped send/receive steps (pp_steps), "
              "every message matched in order without tags, 0 deadlocks",
          "%d bad, %d steps not a compute op alone or one communication op of each kind: %s", new_bad, groups_bad, new_err.c_str());
    check(exchange_bad == 0, "pp schedule under NCCL rules as the CUDA trainer posts it (pp_run's exchange calls, each one "
          "NCCL group in the order given): " + std::to_string(n_cfg) + " configurations, 0 deadlocks, every message matched "
          "in order", "%d bad: %s", exchange_bad, exchange_err.c_str());
    check(eager_bad == 0, "pp schedule, MPI rules: the same " + std::to_string(n_cfg) +
          " configurations one op at a time with non-blocking sends run to the end, matched in order",
          "%d bad: %s", eager_bad, eager_err.c_str());
    // the simulator can fail: one op at a time with blocking sends, every training schedule with a
    // steady state deadlocks; printed so the count can be read
    check(old_train_deadlocks > 0 && old_unexpected == 0, "pp schedule under NCCL rules, one op at a time (ungrouped blocking sends): " +
          std::to_string(old_deadlocks) + " of " + std::to_string(n_cfg) + " configurations deadlock (" +
          std::to_string(old_train_deadlocks) + " of " + std::to_string(n_train) + " training); forward only never, 1F1B exactly from 2 "
          "micro-batches on", "%d not as expected: %s", old_unexpected, old_err.c_str());
    // by hand, pp 2 vpp 1, 2 micro-batches, one op at a time: stage 0 runs F0, sends act 0, F1, then
    // blocks sending act 1 (stage 1 has not posted its receive); stage 1 receives act 0, F0, B0, then
    // blocks sending grad 0 (stage 0 has not posted its receive): a deadlock. With 1 micro-batch the
    // chain F0 -> F0 B0 -> B0 has no crossing sends and finishes.
    const std::string d2 = nccl_simulate(stage_steps(2, 1, 2, true, false), false), d1 = nccl_simulate(stage_steps(2, 1, 1, true, false), false);
    check(d2 == "deadlock: stage 0 at step 3 stage 1 at step 3" && d1.empty(),
          "pp schedule under NCCL rules by hand: pp2 2 micro-batches ungrouped deadlocks with stage 0 sending act 1 and stage 1 "
          "sending grad 0; 1 micro-batch does not", "got '%s' / '%s'", d2.c_str(), d1.c_str());
    // messages out of order: stage 0 of pp 2 (3 micro-batches) sends activation 1 in place of 0 and 0 in
    // place of 1; with non-blocking sends nothing blocks, but stage 1's first receive gets the wrong one
    std::vector<std::vector<std::vector<PpOp>>> swapped = stage_steps(2, 1, 3, true, false);
    int n_swapped = 0;
    for (std::vector<PpOp>& st : swapped[0])
        if (st[0].kind == PP_SEND_ACT && st[0].mb < 2) { st[0].mb = 1 - st[0].mb; n_swapped++; }
    const std::string m = nccl_simulate(swapped, true);
    check(n_swapped == 2 && m == "message 0 from stage 0 to 1 is not the one received",
          "pp schedule simulator: two activations sent out of order are caught as a mismatch", "got '%s'", m.c_str());
    // the grouped steps of pp 2, 3 micro-batches, stage 0 by hand: F0 {send a0} F1 {send a1, recv g0} B0 F2 {send a2, recv g1} B1 {recv g2} B2
    std::string seq;
    const std::vector<std::vector<std::vector<PpOp>>> hand = stage_steps(2, 1, 3, true, true);
    for (const std::vector<PpOp>& g : hand[0]) {
        if (g.size() == 1 && !pp_is_comm(g[0].kind)) { seq += (g[0].kind == PP_FWD ? "F" : "B") + std::to_string(g[0].mb) + " "; continue; }
        seq += "{";
        for (const PpOp& o : g) seq += std::string(o.kind == PP_SEND_ACT ? "sa" : o.kind == PP_RECV_GRAD ? "rg" : "?") + std::to_string(o.mb) + (&o == &g.back() ? "" : " ");
        seq += "} ";
    }
    check(seq == "F0 {sa0} F1 {sa1 rg0} B0 F2 {sa2 rg1} B1 {rg2} B2 ", "pp steps: pp2 stage 0 of 3 micro-batches grouped by hand", "got %s", seq.c_str());
}

static void test_schedule() {
    std::string err;
    int worst_excess = -1000;
    for (int pp : {1, 2, 3, 4}) for (int vpp : {1, 2, 3}) for (int k : {1, 2, 3}) {
        const int n_mb = vpp == 1 ? k + pp - 2 > 0 ? k + pp - 2 : 1 : k * pp;
        int excess = 0;
        std::string e = simulate(pp, vpp, n_mb, &excess);
        if (!e.empty() && err.empty()) err = "pp" + std::to_string(pp) + " vpp" + std::to_string(vpp) + " mb" + std::to_string(n_mb) + ": " + e;
        if (vpp == 1) worst_excess = std::max(worst_excess, excess);
    }
    check(err.empty(), "pp schedule: 1F1B and interleaved run to the end with non-blocking sends, every send received, "
          "every forward before its backward", "%s", err.c_str());
    check(worst_excess <= 0, "pp schedule: 1F1B keeps at most pp - stage micro-batches in flight", "excess %d", worst_excess);
    // 1F1B by hand: pp 2, 3 micro-batches, stage 0: F0 F1 B0 F2 B1 B2
    std::string seq;
    for (const PpOp& o : pp_schedule(2, 1, 3, 0))
        if (o.kind == PP_FWD || o.kind == PP_BWD) seq += (o.kind == PP_FWD ? "F" : "B") + std::to_string(o.mb) + " ";
    check(seq == "F0 F1 B0 F2 B1 B2 ", "pp schedule: 1F1B stage 0 of 2 is F0 F1 B0 F2 B1 B2", "got %s", seq.c_str());
    std::vector<int> first;
    check(pp_layer_layout(4, 2, 1, "", &first).empty() && first == std::vector<int>({0, 2, 4}), "pp layout: even split of 4 layers on 2 stages");
    check(pp_layer_layout(8, 2, 1, "3,5", &first).empty() && first == std::vector<int>({0, 3, 8}), "pp layout: explicit 3,5");
    check(pp_layer_layout(4, 2, 2, "", &first).empty() && first == std::vector<int>({0, 1, 2, 3, 4}), "pp layout: 2 stages x 2 chunks");
    std::string e1 = pp_layer_layout(4, 2, 4, "", &first), e2 = pp_layer_layout(8, 2, 1, "3,4", &first),
                e3 = pp_layer_layout(6, 4, 1, "", &first);
    check(e1.find("fewer than pp*vpp = 8") != std::string::npos && e2.find("sums to 7") != std::string::npos &&
              e3.find("6 layers, not divisible") != std::string::npos,
          "pp layout: bad layouts name the wrong number", "%s | %s | %s", e1.c_str(), e2.c_str(), e3.c_str());
}

// the tiny presets with a byte vocabulary (256), whatever the preset's own
static ModelConfig preset(const char* name, int tp = 1) {
    ModelConfig c;
    find_preset(name, &c);
    c.vocab_size = 256;
    config_finalize(c, tp);
    return c;
}

// A table whose offsets are dense (as build_param_table and tp_local_table make them), padded for dp.
static ParamTable padded(ParamTable t, int dp) {
    zero_pad_table(&t, dp);
    return t;
}

// The bucket plan of table t (dense offsets) at dp: buckets tile the buffer, every bucket's size
// is a multiple of dp*8, pieces are equal, 16-byte aligned (bf16 and fp32), disjoint and cover
// the buffer once over the dp ranks; every tensor lies in its bucket's used part (padding
// overlaps none) and keeps its elements; shards are the pieces in bucket order. "" or what fails.
static std::string check_plan(const ParamTable& dense, int dp) {
    const ParamTable t = padded(dense, dp);
    const std::vector<Bucket> bs = zero_buckets(t, dp);
    const size_t q = (size_t)dp * 8;
    std::vector<int> hits(t.total, 0);
    size_t at = 0, real_elems = 0;
    for (const Bucket& b : bs) {
        if (b.range.lo != at || b.range.size() % q != 0 || b.used > b.range.size() || b.range.size() - b.used >= q)
            return "bucket at " + std::to_string(b.range.lo) + " does not tile or pad to a multiple of dp*8";
        at = b.range.hi;
        size_t end = b.range.lo;
        for (int k = b.first_spec; k < b.end_spec; k++) {
            const ParamSpec& s = t.specs[k];
            if (s.offset != end || s.numel() != dense.specs[k].numel()) return "tensor " + s.name + " is not packed in its bucket";
            end += s.numel();
            real_elems += s.numel();
        }
        if (end != b.range.lo + b.used) return "bucket used size differs from its tensors";
        size_t shard_at = 0;
        for (int r = 0; r < dp; r++) {
            const Range p = zero_piece(b, dp, r);
            if (p.size() != b.range.size() / dp) return "unequal pieces";
            if ((p.lo * 2) % 16 != 0 || (p.lo * 4) % 16 != 0) return "piece not 16-byte aligned";
            for (size_t e = p.lo; e < p.hi; e++) hits[e]++;
            shard_at += p.size();
        }
        if (shard_at != b.range.size()) return "pieces do not add up to the bucket";
    }
    if (at != t.total || t.total % q != 0 || real_elems != dense.total) return "buckets do not tile the buffer";
    for (size_t e = 0; e < t.total; e++)
        if (hits[e] != 1) return "element " + std::to_string(e) + " in " + std::to_string(hits[e]) + " pieces";
    // shards: rank r's pieces in bucket order, bucket b at zero_shard_offset; zero_take_shard agrees
    std::vector<double> flat(t.total);
    for (size_t e = 0; e < t.total; e++) flat[e] = (double)e;
    for (int r = 0; r < dp; r++) {
        std::vector<double> shard(zero_shard_size(t, dp), -1);
        zero_take_shard(bs, dp, r, flat.data(), shard.data());
        size_t off = 0;
        for (const Bucket& b : bs) {
            const Range p = zero_piece(b, dp, r);
            if (zero_shard_offset(b, dp) != off) return "shard offset of a bucket is not the sum of the pieces before it";
            for (size_t e = 0; e < p.size(); e++)
                if (shard[off + e] != (double)(p.lo + e)) return "zero_take_shard misplaces an element";
            off += p.size();
        }
        if (off != shard.size()) return "shard size differs from the sum of its pieces";
    }
    return "";
}

static void test_zero() {
    std::string err;
    int n_cases = 0;
    for (const char* name : {"gpt3_tiny", "llama_tiny"}) {
        ModelConfig c = preset(name);
        ParamTable full = build_param_table(c);
        std::vector<Bucket> bs = zero_buckets(padded(full, 2), 2);
        int layers = 0;
        for (const Bucket& b : bs) layers += b.layer >= 0;
        if (!(layers == 4 && bs.size() == 6 && bs.front().layer == -1 && bs.back().layer == -1)) err = std::string(name) + ": bucket kinds";
        // whole tables, and the local tables of ranks of tp2 pp2 and pp4 (tensors of one stage, tp slices)
        for (int dp : {1, 2, 3, 8}) {
            std::string e = check_plan(full, dp);
            n_cases++;
            if (!e.empty() && err.empty()) err = std::string(name) + " dp" + std::to_string(dp) + ": " + e;
            for (int tp : {1, 2}) for (int pp : {2, 4}) for (int stage = 0; stage < pp; stage++) for (int tr = 0; tr < tp; tr++) {
                ModelConfig ct = preset(name, tp);
                ParamTable ft = build_param_table(ct);
                std::vector<bool> keep(ft.specs.size());
                for (size_t k = 0; k < ft.specs.size(); k++) {
                    const int l = ft.specs[k].layer;
                    keep[k] = l >= 0 ? l * pp / ct.n_layer == stage : ((int)k == ft.wte || (int)k == ft.wpe) ? stage == 0 : stage == pp - 1;
                }
                LocalTable lt = tp_local_table(ft, ct, tp, tr, keep);
                e = check_plan(lt.t, dp);
                n_cases++;
                if (!e.empty() && err.empty())
                    err = std::string(name) + " dp" + std::to_string(dp) + " tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " stage " +
                          std::to_string(stage) + ": " + e;
            }
        }
    }
    check(err.empty(), "zero: " + std::to_string(n_cases) + " (table, dp) plans: buckets embeddings + one per layer + head, "
          "padded to dp*8, equal 16-byte-aligned disjoint pieces covering every element once, padding off every tensor, "
          "shards the pieces in bucket order", "%s", err.c_str());
    // the example of llmc/parallel/zero.h by hand: a[5] (layer -1), b[12] c[9] (layer 0), d[3] (layer -1) at dp 2
    ParamTable t;
    param_add(t, "a", -1, 5, 1, false, INIT_ZEROS, TP_NONE, {});
    param_add(t, "b", 0, 12, 1, false, INIT_ZEROS, TP_NONE, {});
    param_add(t, "c", 0, 9, 1, false, INIT_ZEROS, TP_NONE, {});
    param_add(t, "d", -1, 3, 1, false, INIT_ZEROS, TP_NONE, {});
    zero_pad_table(&t, 2);
    std::vector<Bucket> ex = zero_buckets(t, 2);
    const Range p0 = zero_piece(ex[0], 2, 1), p1 = zero_piece(ex[1], 2, 1), p2 = zero_piece(ex[2], 2, 1);
    check(t.total == 64 && t.specs[1].offset == 16 && t.specs[2].offset == 28 && t.specs[3].offset == 48 && ex.size() == 3 &&
              p0.lo == 8 && p0.hi == 16 && p1.lo == 32 && p1.hi == 48 && p2.lo == 56 && p2.hi == 64 &&
              zero_shard_offset(ex[1], 2) == 8 && zero_shard_size(t, 2) == 32,
          "zero: the worked example of llmc/parallel/zero.h by hand (offsets 0,16,28,48 of 64; rank 1's pieces 8-16, 32-48, 56-64)");
}

// AdamW's addresses under ZeRO (zero_part_offset, ZeroBuffer): at every ZeRO level, the part of every tensor a dp rank
// updates sits, in each kind of buffer (flat below the stage that shards it, the shard from it on), inside the buffer
// and on the very elements its flat range names (shard positions through zero_take_shard).
static void test_zero_part_offset() {
    std::string err;
    int n_cases = 0;
    for (const char* name : {"gpt3_tiny", "llama_tiny"})
        for (int dp : {1, 2, 3, 8})
            for (int zero = 0; zero <= 3; zero++) {
                const ParamTable t = padded(build_param_table(preset(name)), dp);
                const std::vector<Bucket> bs = zero_buckets(t, dp);
                std::vector<double> flat(t.total), shard(zero_shard_size(t, dp));
                for (size_t e = 0; e < flat.size(); e++) flat[e] = (double)e;
                for (int r = 0; r < dp; r++) {
                    n_cases++;
                    zero_take_shard(bs, dp, r, flat.data(), shard.data());
                    for (const ZeroPart& p : zero_parts(t, bs, dp, r, zero == 0))
                        for (ZeroBuffer kind : {ZERO_OPTIM, ZERO_GRADS, ZERO_PARAMS}) {
                            const std::vector<double>& buf = zero >= (int)kind ? shard : flat;
                            const size_t at = zero_part_offset(p, kind, zero);
                            bool ok = at + p.flat.size() <= buf.size();
                            for (size_t i = 0; ok && i < p.flat.size(); i++) ok = buf[at + i] == (double)(p.flat.lo + i);
                            if (!ok && err.empty())
                                err = std::string(name) + " dp" + std::to_string(dp) + " zero " + std::to_string(zero) + " rank " +
                                      std::to_string(r) + ": " + t.specs[p.spec].name + " misplaced in buffer kind " + std::to_string((int)kind);
                        }
                }
            }
    check(err.empty(), "zero: AdamW's addresses (zero_part_offset) in the weights, gradients, master weights and moments at ZeRO "
          "0-3 name the flat elements of each part, inside each buffer, in " + std::to_string(n_cases) + " (table, dp, stage, rank) cases",
          "%s", err.c_str());
}

// Every element of the whole model is counted exactly once in the global norm over all ranks of
// a layout (layout_norm_ranges; replicated tensors once across tp, the tied embedding once
// across the pipeline ends, each dp rank its piece), and the shard positions name the same elements.
static void test_norm_ranges() {
    std::string err;
    int n_layouts = 0;
    struct Lay { int dp, tp, pp, vpp; };
    for (const char* name : {"gpt3_tiny", "llama_tiny"})
        for (Lay y : {Lay{1, 1, 1, 1}, Lay{2, 1, 1, 1}, Lay{3, 1, 1, 1}, Lay{2, 2, 1, 1}, Lay{1, 1, 2, 1}, Lay{2, 2, 2, 1},
                      Lay{1, 2, 2, 2}, Lay{3, 1, 4, 1}, Lay{2, 1, 2, 2}}) {
            ModelConfig c = preset(name, y.tp);
            ParamTable full = build_param_table(c);
            std::vector<std::vector<int>> hits(full.specs.size());
            for (size_t k = 0; k < full.specs.size(); k++) hits[k].assign(full.specs[k].numel(), 0);
            n_layouts++;
            for (int r = 0; r < y.dp * y.tp * y.pp; r++) {
                Layout L;
                L.topo = topo_make(y.dp, y.tp, y.pp, r);
                L.vpp = y.vpp;
                pp_layer_layout(c.n_layer, y.pp, y.vpp, "", &L.chunk_first);
                LocalTable lt = gpt_local_table(c, full, L, L.topo.pp_rank, L.topo.tp_rank);
                std::vector<Bucket> bs = zero_buckets(lt.t, y.dp);
                // flat element -> (full tensor, element) through the tp slices
                std::vector<std::pair<int, int>> src(lt.t.total, {-1, -1});
                for (size_t i = 0; i < lt.t.specs.size(); i++) {
                    const ParamSpec& f = full.specs[lt.global[i]];
                    std::vector<float> idx(f.numel()), loc(lt.t.specs[i].numel());
                    for (size_t e = 0; e < idx.size(); e++) idx[e] = (float)e;
                    tp_extract(idx.data(), f.cols, lt.slice[i], loc.data());
                    for (size_t e = 0; e < loc.size(); e++) src[lt.t.specs[i].offset + e] = {lt.global[i], (int)loc[e]};
                }
                std::vector<double> flat(lt.t.total), shard(zero_shard_size(lt.t, y.dp));
                for (size_t e = 0; e < flat.size(); e++) flat[e] = (double)e;
                zero_take_shard(bs, y.dp, L.topo.dp_rank, flat.data(), shard.data());
                std::vector<Range> rf = layout_norm_ranges(lt.t, bs, L, false), rs = layout_norm_ranges(lt.t, bs, L, true);
                std::vector<size_t> in_flat, in_shard;
                for (const Range& q : rf)
                    for (size_t e = q.lo; e < q.hi; e++) {
                        in_flat.push_back(e);
                        if (src[e].first < 0) { if (err.empty()) err = "a counted element is padding"; continue; }
                        hits[src[e].first][src[e].second]++;
                    }
                for (const Range& q : rs)
                    for (size_t e = q.lo; e < q.hi && e < shard.size(); e++) in_shard.push_back((size_t)shard[e]);
                if (in_flat != in_shard && err.empty()) err = "shard ranges name other elements than the flat ones";
            }
            for (size_t k = 0; k < full.specs.size(); k++)
                for (int h : hits[k])
                    if (h != 1 && err.empty())
                        err = std::string(name) + " dp" + std::to_string(y.dp) + " tp" + std::to_string(y.tp) + " pp" + std::to_string(y.pp) +
                              " vpp" + std::to_string(y.vpp) + ": " + full.specs[k].name + " counted " + std::to_string(h) + " times";
        }
    check(err.empty(), "norm ranges: every parameter counted exactly once across all ranks, in " + std::to_string(n_layouts) +
          " layouts (dp, tp, pp, vpp; tied and untied)", "%s", err.c_str());
}

// A rank's part of the whole model and back (llmc/run/assemble.h), in every layout: each rank's part of the
// initial weights made one tensor at a time (part_init) equals its part of the whole init (part_of_full of
// params_init_full); the parts assembled on world rank 0 one tensor at a time (assemble_send on every other rank,
// assemble_tensor on rank 0; the transport hands rank 0 what each sender sent) give every tensor back exactly, in one
// message per slice or in pieces; the senders are the dp-rank-0 ranks, each send matched by a receive of the same
// tensor and count, a replicated tensor and the tied embedding sent once.
static void test_assemble() {
    std::string err;
    int n_layouts = 0;
    struct Lay { int dp, tp, pp, vpp; };
    auto fail = [&](const std::string& e) { if (err.empty()) err = e; };
    for (const char* name : {"gpt3_tiny", "llama_tiny"})
        for (Lay y : {Lay{1, 1, 1, 1}, Lay{2, 1, 1, 1}, Lay{2, 2, 1, 1}, Lay{1, 1, 2, 1}, Lay{2, 2, 2, 1}, Lay{1, 2, 2, 2},
                      Lay{3, 1, 4, 1}, Lay{2, 1, 2, 2}})
            for (size_t piece : {(size_t)0, (size_t)1000}) {
                const std::string where = std::string(name) + " dp" + std::to_string(y.dp) + " tp" + std::to_string(y.tp) + " pp" +
                                          std::to_string(y.pp) + " vpp" + std::to_string(y.vpp) + " piece " + std::to_string(piece) + ": ";
                const ModelConfig c = preset(name, y.tp);
                const ParamTable full = build_param_table(c);
                std::vector<float> whole(full.total);
                params_init_full(c, full, whole.data(), 5);
                const int W = y.dp * y.tp * y.pp;
                n_layouts++;
                std::vector<Layout> Ls(W);
                std::vector<std::vector<float>> parts;
                struct Msg { int k; size_t n; std::vector<float> data; };
                std::vector<std::vector<Msg>> sent(W);
                for (int r = 0; r < W; r++) {
                    Ls[r].topo = topo_make(y.dp, y.tp, y.pp, r);
                    Ls[r].vpp = y.vpp;
                    pp_layer_layout(c.n_layer, y.pp, y.vpp, "", &Ls[r].chunk_first);
                    const LocalTable lt = gpt_local_table(c, full, Ls[r], Ls[r].topo.pp_rank, Ls[r].topo.tp_rank);
                    parts.emplace_back(lt.t.total, 0.0f);
                    part_of_full(full, whole.data(), lt.t, lt.global, lt.slice, parts.back().data());
                    std::vector<float> made(lt.t.total, 0.0f);
                    part_init(c, full, lt.t, lt.global, lt.slice, 5, nullptr, made.data());
                    if (made != parts.back()) fail(where + "rank " + std::to_string(r) + ": part_init differs from its part of the whole init");
                }
                // every rank but 0: what it sends
                for (int r = 1; r < W; r++) {
                    AssembleTransport<float> io;
                    io.send = [&](int k, const float* d, size_t n) { sent[r].push_back({k, n, std::vector<float>(d, d + n)}); };
                    io.recv = [&](int, int, float*, size_t) { fail(where + "rank " + std::to_string(r) + " received"); };
                    assemble_send(assemble_plan(c, full, Ls[r]), r, parts[r].data(), piece, io);
                    if ((Ls[r].topo.dp_rank == 0) != !sent[r].empty()) fail(where + "rank " + std::to_string(r) + " sent, or did not");
                    for (const Msg& m : sent[r])
                        if (piece > 0 && m.n > piece) fail(where + "a message larger than the piece");
                }
                // world rank 0: receives, in order, what each sender sent, and assembles each tensor
                std::vector<size_t> next(W, 0);
                AssembleTransport<float> io;
                io.send = [&](int, const float*, size_t) { fail(where + "rank 0 sent"); };
                io.recv = [&](int k, int from, float* d, size_t n) {
                    if (next[from] >= sent[from].size()) return fail(where + "a receive from rank " + std::to_string(from) + " never sent");
                    const Msg& m = sent[from][next[from]++];
                    if (m.k != k || m.n != n) return fail(where + "a receive does not match its send");
                    std::copy(m.data.begin(), m.data.end(), d);
                };
                const AssemblePlan plan = assemble_plan(c, full, Ls[0]);
                for (size_t k = 0; k < full.specs.size(); k++) {
                    const ParamSpec& f = full.specs[k];
                    std::vector<float> got(f.numel(), -1.0f);
                    assemble_tensor(plan, full, parts[0].data(), k, piece, io, got.data());
                    if (!std::equal(got.begin(), got.end(), whole.begin() + f.offset)) fail(where + "tensor " + f.name + " differs from the whole one");
                }
                for (int r = 0; r < W; r++)
                    if (next[r] != sent[r].size()) fail(where + "rank " + std::to_string(r) + "'s sends not all received");
            }
    check(err.empty(), "assemble: every rank's part of the init made a tensor at a time (part_init) is its part of the whole "
          "init; every tensor assembled on rank 0 one at a time (assemble_send, assemble_tensor) is the whole one, in " +
          std::to_string(n_layouts) + " (layout, piece) cases (dp, tp, pp, vpp; tied and untied); dp-rank-0 ranks send, "
          "every send received in order, nothing sent twice", "%s", err.c_str());
}

// Checkpoints reshard (llmc/run/checkpoint.h, part_write and part_read of llmc/run/assemble.h): a model whose
// every value says where it is written by every rank of one layout (each rank its owned parts, from the buffers a
// trainer keeps: whole or its ZeRO shard), then read back by every rank of another layout, gives each reader rank
// exactly its part of the model (part_of_full, and its shard under ZeRO), padding rows zero, for writers and readers
// over dp, tp, pp, vpp and ZeRO 0-3 (the CPU trainer's buffers: params sharded under ZeRO 3, moments from ZeRO 1),
// with a vocabulary whose padding differs between tp 1 and tp 2.
static void test_checkpoint_reshard() {
    struct Lay { int dp, tp, pp, vpp, zero; };
    const std::vector<Lay> lays = {{1, 1, 1, 1, 0}, {2, 1, 1, 1, 1}, {2, 2, 1, 1, 0}, {1, 2, 2, 1, 0}, {2, 1, 2, 2, 3},
                                   {3, 1, 1, 1, 2}, {2, 2, 2, 1, 1}};
    std::string err;
    int n_cases = 0;
    auto fail = [&](const std::string& e) { if (err.empty()) err = e; };
    // whole [full.total]: value f(kind, tensor, row, column) in live rows, zero in padding rows
    auto whole_of = [](const ParamTable& full, int kind) {
        std::vector<float> w(full.total, 0.0f);
        for (size_t k = 0; k < full.specs.size(); k++) {
            const ParamSpec& s = full.specs[k];
            for (int64_t e = 0; e < s.live_rows * s.cols; e++) w[s.offset + e] = (float)(kind * 2000000 + (int64_t)k * 1000 + e + 1);
        }
        return w;
    };
    auto layout_of = [](const ModelConfig& c, Lay y, int r) {
        Layout L;
        L.topo = topo_make(y.dp, y.tp, y.pp, r);
        L.vpp = y.vpp;
        L.zero = y.zero;
        pp_layer_layout(c.n_layer, y.pp, y.vpp, "", &L.chunk_first);
        return L;
    };
    auto preset300 = [](const char* name, int tp) {  // a vocabulary of 300: padded to 384 at tp 1, 512 at tp 2
        ModelConfig c;
        find_preset(name, &c);
        c.vocab_size = 300;
        config_finalize(c, tp);
        return c;
    };
    const char* kinds[3] = {"p", "m", "v"};
    for (const char* name : {"gpt3_tiny", "llama_tiny"})
        for (size_t wi = 0; wi < lays.size(); wi++) {
            const Lay wy = lays[wi];
            const ModelConfig wc = preset300(name, wy.tp);
            const ParamTable wfull = build_param_table(wc);
            const std::string dir = "build/test_parallel_ckpt";
            std::error_code ec;
            fs::remove_all(dir, ec);
            fs::create_directories(dir, ec);
            TrainState st;
            st.step = 7;
            const int W = wy.dp * wy.tp * wy.pp;
            ckpt_prepare(dir, st.step);
            for (int r = 0; r < W; r++) {
                const Layout L = layout_of(wc, wy, r);
                const LocalTable lt = gpt_local_table(wc, wfull, L, L.topo.pp_rank, L.topo.tp_rank);
                const std::vector<Bucket> bs = zero_buckets(lt.t, wy.dp);
                CkptShardWriter w;
                ckpt_shard_open(&w, dir, st.step, r);
                for (int i = 0; i < 3; i++) {
                    const bool sharded = wy.zero >= (i == 0 ? 3 : 1);
                    std::vector<float> part(lt.t.total, 0.0f), shard(lt.t.total / wy.dp, 0.0f);
                    part_of_full(wfull, whole_of(wfull, i).data(), lt.t, lt.global, lt.slice, part.data());
                    zero_take_shard(bs, wy.dp, L.topo.dp_rank, part.data(), shard.data());
                    const float* buf = sharded ? shard.data() : part.data();
                    part_write(&w, kinds[i], wfull, lt.t, lt.global, lt.slice, bs, L, sharded, [&](size_t pos, size_t) { return buf + pos; });
                }
                ckpt_shard_close(&w);
            }
            ckpt_commit(dir, wc, wfull, "{}", W, st, 1);
            const std::string ck = dir + "/" + ckpt_dir_name(st.step);
            for (const Lay ry : lays) {
                const ModelConfig rc = preset300(name, ry.tp);
                const ParamTable rfull = build_param_table(rc);
                const std::string where = std::string(name) + " written at dp" + std::to_string(wy.dp) + " tp" + std::to_string(wy.tp) +
                                          " pp" + std::to_string(wy.pp) + " zero" + std::to_string(wy.zero) + ", read at dp" + std::to_string(ry.dp) +
                                          " tp" + std::to_string(ry.tp) + " pp" + std::to_string(ry.pp) + " vpp" + std::to_string(ry.vpp) +
                                          " zero" + std::to_string(ry.zero) + ": ";
                n_cases++;
                for (int r = 0; r < ry.dp * ry.tp * ry.pp; r++) {
                    const Layout L = layout_of(rc, ry, r);
                    const LocalTable lt = gpt_local_table(rc, rfull, L, L.topo.pp_rank, L.topo.tp_rank);
                    const std::vector<Bucket> bs = zero_buckets(lt.t, ry.dp);
                    CkptReader R;
                    TrainState got_state;
                    ckpt_open(&R, ck, rc, rfull, &got_state);
                    if (got_state.step != st.step) fail(where + "state.json's step");
                    for (int i = 0; i < 3; i++) {
                        const bool sharded = ry.zero >= (i == 0 ? 3 : 1);
                        std::vector<float> want(lt.t.total, 0.0f), want_shard(lt.t.total / ry.dp, 0.0f);
                        part_of_full(rfull, whole_of(rfull, i).data(), lt.t, lt.global, lt.slice, want.data());
                        zero_take_shard(bs, ry.dp, L.topo.dp_rank, want.data(), want_shard.data());
                        std::vector<float> got(sharded ? want_shard.size() : want.size(), 0.0f);
                        part_read(&R, kinds[i], rfull, lt.t, lt.global, lt.slice, bs, L, sharded, got.data());
                        if (got != (sharded ? want_shard : want)) fail(where + "rank " + std::to_string(r) + "'s " + kinds[i] + " differs");
                    }
                    ckpt_close(&R);
                }
            }
        }
    check(err.empty(), "checkpoints reshard: written by every rank of " + std::to_string(lays.size()) + " layouts and read by every rank of each, " +
          std::to_string(n_cases) + " (writer, reader) cases over dp, tp, pp, vpp and ZeRO 0-3 (GPT and LLaMA): every reader rank gets "
          "exactly its part and shard (vocabulary padded differently by writer and reader)", "%s", err.c_str());
}

// The executor over every stage's list: each (micro-batch, chunk) acquired once before its use,
// released once after its last use, receives and sends with matching tags.
static void test_pp_exec() {
    std::string err;
    int n_groups = 0;
    for (int pp : {1, 2, 3}) for (int vpp : {1, 2}) for (bool bwd : {true, false}) for (bool grouped : {false, true}) {
        if (vpp > 1 && pp == 1) continue;
        const int n_mb = vpp == 1 ? 3 : 2 * pp, n_chunks = pp * vpp;
        std::set<std::tuple<int, int, int>> sent;  // (tag, from stage, to stage)
        std::vector<std::tuple<int, int, int>> received;
        for (int s = 0; s < pp; s++) {
            std::set<std::pair<int, int>> live;
            int acquired = 0, released = 0;
            auto use = [&](int mb, int chunk) { if (!live.count({mb, chunk}) && err.empty()) err = "use of activations not acquired"; };
            PpCallbacks cb;
            cb.acquire = [&](int mb, int chunk) { acquired++; if (!live.insert({mb, chunk}).second) err = "acquired twice"; };
            cb.release = [&](int mb, int chunk) { released++; use(mb, chunk); live.erase({mb, chunk}); };
            cb.forward = use;
            cb.backward = use;
            cb.recv_act = [&](int mb, int chunk, int peer, int tag) { use(mb, chunk); received.push_back({tag, peer, s}); };
            cb.recv_grad = cb.recv_act;
            cb.send_act = [&](int mb, int chunk, int peer, int tag) { use(mb, chunk); sent.insert({tag, s, peer}); };
            cb.send_grad = cb.send_act;
            // grouped: the exchange callback gets each run of communication ops of pp_steps, in order
            const std::vector<PpOp> ops = bwd ? pp_schedule(pp, vpp, n_mb, s) : pp_forward_schedule(pp, vpp, n_mb, s);
            std::vector<std::vector<PpOp>> runs;
            for (const std::pair<int, int>& st : pp_steps(ops))
                if (pp_is_comm(ops[st.first].kind)) runs.push_back(std::vector<PpOp>(ops.begin() + st.first, ops.begin() + st.second));
            size_t next_run = 0;
            if (grouped) cb.exchange = [&](const PpMsg* m, int n) {
                n_groups++;
                bool same = next_run < runs.size() && (int)runs[next_run].size() == n;
                for (int i = 0; same && i < n; i++) {
                    const PpMsg want = pp_msg(runs[next_run][i], n_chunks);
                    same = want.kind == m[i].kind && want.mb == m[i].mb && want.chunk == m[i].chunk && want.peer == m[i].peer && want.tag == m[i].tag;
                }
                if (!same && err.empty()) err = "exchange called with other messages than the next run of pp_steps";
                next_run++;
                for (int i = 0; i < n; i++) {
                    use(m[i].mb, m[i].chunk);
                    if (m[i].kind == PP_RECV_ACT || m[i].kind == PP_RECV_GRAD) received.push_back({m[i].tag, m[i].peer, s});
                    else sent.insert({m[i].tag, s, m[i].peer});
                }
            };
            pp_run(bwd ? pp_schedule(pp, vpp, n_mb, s) : pp_forward_schedule(pp, vpp, n_mb, s), n_chunks, bwd, cb);
            if (grouped && next_run != runs.size() && err.empty()) err = "exchange not called for every run of pp_steps";
            if ((acquired != n_mb * vpp || released != acquired || !live.empty()) && err.empty())
                err = "pp" + std::to_string(pp) + " vpp" + std::to_string(vpp) + " stage " + std::to_string(s) + ": " + std::to_string(acquired) +
                      " acquired, " + std::to_string(released) + " released";
        }
        std::set<std::tuple<int, int, int>> got(received.begin(), received.end());
        if ((got != sent || received.size() != sent.size()) && err.empty()) err = "sends and receives do not match by tag";
    }
    check(err.empty() && n_groups > 0, "pp exec: activations acquired once before use and released once after, every send received under its tag, "
          "one op at a time and through exchange (" + std::to_string(n_groups) + " groups, each the next run of pp_steps)",
          "%s", err.c_str());
}

static void test_tp() {
    bool ok = true;
    std::string where;
    for (const char* name : {"gpt3_tiny", "llama_tiny"}) for (int tp : {1, 2, 4}) {
        ModelConfig c = preset(name, tp);
        if (!tp_check(c, tp).empty()) continue;
        ParamTable full = build_param_table(c);
        std::vector<bool> keep(full.specs.size(), true);
        size_t sum = 0;
        std::vector<std::vector<int>> hits(full.specs.size());
        for (size_t k = 0; k < full.specs.size(); k++) hits[k].assign(full.specs[k].numel(), 0);
        for (int r = 0; r < tp; r++) {
            LocalTable lt = tp_local_table(full, c, tp, r, keep);
            sum += lt.t.total;
            for (size_t i = 0; i < lt.t.specs.size(); i++) {
                const ParamSpec& f = full.specs[lt.global[i]];
                // mark through extract: a full tensor of element indices
                std::vector<float> idx(f.numel()), loc(lt.t.specs[i].numel());
                for (size_t e = 0; e < idx.size(); e++) idx[e] = (float)e;
                tp_extract(idx.data(), f.cols, lt.slice[i], loc.data());
                for (float e : loc) hits[lt.global[i]][(size_t)e]++;
                std::vector<float> back(f.numel(), -1);
                tp_insert(loc.data(), lt.slice[i], f.cols, back.data());
                for (size_t e = 0; e < back.size(); e++) ok &= back[e] < 0 || back[e] == idx[e];
            }
        }
        size_t replicated = 0;
        for (size_t k = 0; k < full.specs.size(); k++) {
            const bool split = !tp_replicated(full.specs[k].tp);
            if (!split) replicated += full.specs[k].numel();
            for (int h : hits[k]) if (h != (split ? 1 : tp)) { ok = false; where = name + std::string(" ") + full.specs[k].name; }
        }
        ok &= sum == full.total + replicated * (tp - 1);
    }
    check(ok, "tp: the slices of every split tensor cover it exactly once, replicated ones on every rank", "%s", where.c_str());
    // llama_tiny: H 4, KV 2, hd 32, F 352; tp 2 rank 1 holds q heads 2,3 (rows 64..127), k head 1, v head 1
    ModelConfig c = preset("llama_tiny", 2);
    ParamTable full = build_param_table(c);
    std::vector<TpBlock> q = tp_slice(full.specs[full.blocks[0].qkv_w], c, 2, 1);
    std::vector<TpBlock> gu = tp_slice(full.specs[full.blocks[0].fc1_w], c, 2, 1);
    std::vector<TpBlock> o = tp_slice(full.specs[full.blocks[0].fc2_w], c, 2, 1);
    check(q.size() == 3 && q[0].row0 == 64 && q[0].rows == 64 && q[1].row0 == 128 + 32 && q[1].rows == 32 && q[2].row0 == 192 + 32 &&
              gu[0].row0 == 176 && gu[1].row0 == 352 + 176 && o[0].col0 == 176 && o[0].cols == 176 && o[0].rows == 128,
          "tp: llama_tiny tp2 rank 1 slices of qkv, gate-up and fc2 by hand");
    check(c.padded_vocab == 256 && preset("gpt3_tiny", 4).padded_vocab == 512, "tp: vocabulary padded to a multiple of 128*tp");
    std::string e = tp_check(preset("llama_tiny", 4), 4);
    check(e.find("--kv-heads 2 is not divisible by --tp 4") != std::string::npos, "tp: kv heads that do not divide name the number", "%s", e.c_str());
    ParamTable fv = build_param_table(preset("gpt3_tiny", 4));
    LocalTable l3 = tp_local_table(fv, preset("gpt3_tiny", 4), 4, 3, std::vector<bool>(fv.specs.size(), true));
    LocalTable l1 = tp_local_table(fv, preset("gpt3_tiny", 4), 4, 1, std::vector<bool>(fv.specs.size(), true));
    check(l3.t.specs[l3.t.wte].live_rows == 0 && l1.t.specs[l1.t.wte].live_rows == 128, "tp: live vocabulary rows per shard (256 of 512 over 4)");
}

static void test_comm_single() {
    Comm c;
    std::vector<float> a = {1, 2, 3}, r(3);
    comm_all_reduce_sum(c, a.data(), 3);
    comm_all_reduce_max(c, a.data(), 3);
    comm_reduce_scatter(c, a.data(), r.data(), 3);
    std::vector<float> g(3);
    comm_all_gather(c, r.data(), g.data(), 3);
    comm_broadcast(c, g.data(), 3, 0);
    Comm sub = comm_group(c, {0});
    check(g == std::vector<float>({1, 2, 3}) && sub.size == 1 && sub.rank == 0, "comm: one process, every collective is the identity");
}

static int compare(const char* a, const char* b, double tol, const char* name) {
    SafeTensors sa, sb;
    st_open(&sa, a);
    st_open(&sb, b);
    double worst = 0;
    std::string worst_name;
    size_t n = 0;
    bool same_names = sa.tensors.size() == sb.tensors.size();
    for (const StTensor& t : sa.tensors) {
        const StTensor* u = st_find(&sb, t.name);
        if (!u || u->numel() != t.numel()) { same_names = false; continue; }
        std::vector<float> x(t.numel()), y(t.numel());
        st_read_f32(&sa, &t, x.data());
        st_read_f32(&sb, u, y.data());
        double mx, mb;
        const bool finite = max_abs_diff(x.data(), y.data(), x.size(), &mx, &mb);  // NaN or inf: +inf
        const double rel = finite ? mx / (mb + 1e-3) : INFINITY;
        if (rel > worst || worst_name.empty()) { worst = rel; worst_name = t.name; }
        n++;
    }
    const bool ok = same_names && n > 0 && worst <= tol;
    if (ok) printf("[PASS] %s (%zu tensors, worst %.3g at %s)\n", name, n, worst, worst_name.c_str());
    else printf("[FAIL] %s: %zu tensors, names match %d, worst %.3g at %s > %.3g%s\n", name, n, same_names, worst,
                worst_name.c_str(), tol, std::isfinite(worst) ? "" : " (non-finite: a NaN or inf in the weights)");
    return ok ? 0 : 1;
}

int main(int argc, char** argv) {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "compare" && argc == 6) return compare(argv[2], argv[3], atof(argv[4]), argv[5]);
    if (mode != "units") {
        fprintf(stderr, "usage: %s units | compare A.safetensors B.safetensors TOL NAME\n", argv[0]);
        return 1;
    }
    test_topology();
    test_schedule();
    test_schedule_nccl();
    test_zero();
    test_zero_part_offset();
    test_norm_ranges();
    test_assemble();
    test_checkpoint_reshard();
    test_pp_exec();
    test_tp();
    test_comm_single();
    return g_failed ? 1 : 0;
}
