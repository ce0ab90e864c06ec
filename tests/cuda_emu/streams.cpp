// tests/cuda_emu/streams.cpp: the runtime of the emulation's stream mode (tests/cuda_emu/include/cuda_emu_streams.h
// says what it does): the arena and its shadow, the queues and their scheduler, the vector clocks and the checker,
// and the __tsan_* entry points that the -fsanitize=thread instrumentation of the program calls on every load and
// store. Compiled without instrumentation (tests/cuda_emu/build.sh --streams) and linked with the program.
#include "include/cuda_emu_streams.h"
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>
#include <sys/mman.h>

namespace emu_streams {
namespace {

const int MAXS = 16;  // index 0 the host, 1 the legacy default stream, 2.. created streams
typedef std::array<uint32_t, MAXS> Clock;
inline uint32_t epoch(int s, uint32_t c) { return ((uint32_t)s << 27) | c; }  // 0: none
inline int epoch_stream(uint32_t e) { return (int)(e >> 27); }
inline uint32_t epoch_clock(uint32_t e) { return e & ((1u << 27) - 1); }

struct Shadow { uint32_t w, r1, r2; };  // per 2-byte granule: last write, last reads of up to two streams
struct Alloc { size_t n; bool pinned; const char* file; int line; };
struct Name { const char* what; const char* file; int line; };
struct Op {
    int s;
    uint32_t clock;  // 0: touches no memory (a wait)
    Clock vc;
    std::vector<std::pair<int, uint32_t>> deps;  // (stream, clock) that must have run first
    std::function<void()> run;
    std::function<bool()> poll;
    bool started = false;
    const void* host_src = nullptr;
    size_t host_n = 0;
    long seq = 0;  // the order of the calls that queued it
};
struct Stream {
    std::deque<Op*> q;
    Clock vc{};
    uint32_t done = 0;  // the clock of its last completed operation
    bool live = false;
    std::vector<Name> names{Name{"(none)", "", 0}};  // names[clock]
};
struct Event {
    int s = -1;
    uint32_t clock = 0;
    Clock vc{};
};

const size_t ARENA = (size_t)16 << 30;
char* g_base = nullptr;
size_t g_size = 0;  // 0 until the first allocation: every access test fails fast
size_t g_top = 0;
Shadow* g_shadow = nullptr;
uint8_t* g_page = nullptr;  // per 4 KiB page of the arena: 0 unused, 1 device, 2 pinned (pinned pages hold nothing else)
std::map<uintptr_t, Alloc> g_allocs;  // every allocation, for the messages
Stream g_s[MAXS];
int g_ns = 2;
std::vector<Event> g_events;
int g_cur = 0;  // the stream whose operation runs now (0: the host)
Clock* g_cur_vc = nullptr;
uint32_t g_cur_epoch = 0;
const char* g_cur_what = "host code";
long g_errors = 0, g_pending = 0;
long g_seq = 0, g_ran = 0, g_overtook = 0;  // operations queued, run, and run before earlier-queued work of another stream
uint64_t g_rng = 0;
std::set<std::pair<uint32_t, uint32_t>> g_reported;

uint32_t rnd(uint32_t n) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((g_rng >> 33) % n);
}
void init() {
    if (g_base) return;
    g_base = (char*)mmap(nullptr, ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    g_shadow = (Shadow*)mmap(nullptr, ARENA / 2 * sizeof(Shadow), PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    g_page = (uint8_t*)mmap(nullptr, ARENA / 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g_base == MAP_FAILED || g_shadow == MAP_FAILED || g_page == MAP_FAILED) { perror("emulation stream mode: mmap"); abort(); }
    const char* seed = getenv("EMU_STREAM_SEED");
    const char* rank = getenv("OMPI_COMM_WORLD_RANK");
    g_rng = 0x9E3779B97F4A7C15ull * (uint64_t)((seed ? atol(seed) : 1) * 1000003 + (rank ? atol(rank) : 0) + 1);
    g_s[0].live = g_s[1].live = true;
    g_s[0].vc[0] = 1;
    g_size = ARENA;
    if (getenv("EMU_STREAM_STATS"))
        atexit([] {
            fprintf(stderr, "stream mode: %ld operations run on %d streams, %ld of them before work queued earlier on "
                    "another stream; %ld unordered accesses\n", g_ran, g_ns - 1, g_overtook, g_errors);
        });
}

const Name& name_of(uint32_t e) {
    static Name none{"?", "", 0};
    const Stream& st = g_s[epoch_stream(e)];
    const uint32_t c = epoch_clock(e);
    return c < st.names.size() ? st.names[c] : none;
}
// a source path as the repository names it (the emulated builds compile a copy under build/NAME_src/)
const char* repo_path(const char* f) {
    const char* q = strstr(f, "_src/");
    return q ? q + 5 : f;
}
std::string describe(uint32_t e) {
    const int s = epoch_stream(e);
    const Name& n = name_of(e);
    char b[512];
    if (s == 0) snprintf(b, sizeof b, "host code (host step %u)", epoch_clock(e));
    else snprintf(b, sizeof b, "%s (%s:%d) on stream %d, its operation #%u", n.what, repo_path(n.file), n.line, s - 1, epoch_clock(e));
    return b;
}
void race(const char* kind, const void* p, uint32_t other, bool other_write) {
    g_errors++;
    if (!g_reported.insert({other, g_cur_epoch}).second || g_reported.size() > 20) return;
    auto it = g_allocs.upper_bound((uintptr_t)p);
    std::string buf = "memory outside every allocation";
    if (it != g_allocs.begin()) {
        --it;
        char b[512];
        snprintf(b, sizeof b, "offset %zu of the %zu-byte %s buffer allocated at %s:%d", (size_t)((uintptr_t)p - it->first),
                 it->second.n, it->second.pinned ? "pinned host" : "device", repo_path(it->second.file), it->second.line);
        buf = b;
    }
    fprintf(stderr, "EMU STREAM RACE: %s in %s: this access by %s; the %s by %s; no event, wait or synchronisation "
            "orders the two\n", kind, buf.c_str(), describe(g_cur_epoch).c_str(), other_write ? "write" : "read",
            describe(other).c_str());
}
// is the access of epoch e ordered before the current operation?
inline bool before(uint32_t e) {
    const int s = epoch_stream(e);
    return e == 0 || s == g_cur || epoch_clock(e) <= (*g_cur_vc)[s];
}
// an access of n bytes at p by the running operation or the host; explicit: a range a copy, memset or transfer names
void check(const void* p, size_t n, bool write, bool explicit_ = false) {
    const size_t off = (const char*)p - g_base;
    if (off >= g_top) return;  // the arena's unused end: nothing is there
    if (g_cur == 0) { g_cur_vc = &g_s[0].vc; g_cur_epoch = epoch(0, g_s[0].vc[0]); }
    const uint8_t kind = g_page[off >> 12];
    if (kind) {
        const bool pinned = kind == 2;
        if (g_cur == 0 && !pinned) {
            g_errors++;
            if (g_errors < 20) fprintf(stderr, "EMU ERROR: host code %s device memory at %p (a GPU's host cannot)\n", write ? "writes" : "reads", p);
            return;
        }
        if (g_cur != 0 && pinned && !explicit_) {
            g_errors++;
            if (g_errors < 20) fprintf(stderr, "EMU ERROR: %s accesses pinned host memory at %p (the stream mode's poison assumes none does)\n", g_cur_what, p);
        }
    }
    Shadow* sh = g_shadow + off / 2;
    const size_t ng = (off + n + 1) / 2 - off / 2;
    for (size_t i = 0; i < ng; i++) {
        Shadow& g = sh[i];
        if (write) {
            if (!before(g.w)) race("write after an unordered write", p, g.w, true);
            else if (!before(g.r1)) race("write after an unordered read", p, g.r1, false);
            else if (!before(g.r2)) race("write after an unordered read", p, g.r2, false);
            g.w = g_cur_epoch;
            g.r1 = g.r2 = 0;
        } else {
            if (!before(g.w)) race("read of an unordered write", p, g.w, true);
            const int s1 = g.r1 ? epoch_stream(g.r1) : -1, s2 = g.r2 ? epoch_stream(g.r2) : -1;
            if (s1 == g_cur || g.r1 == 0) g.r1 = g_cur_epoch;
            else if (s2 == g_cur || g.r2 == 0) g.r2 = g_cur_epoch;
            else if (before(g.r1)) g.r1 = g_cur_epoch;  // an ordered earlier read: any write unordered with it
            else g.r2 = g_cur_epoch;                     // is unordered with this one too (a third stream: one dropped)
        }
    }
}

// ---- the scheduler
bool ran(int s, uint32_t c) { return g_s[s].done >= c; }
bool runnable(Op* o) {
    if (o->started) return false;
    for (auto& d : o->deps)
        if (!ran(d.first, d.second)) return false;
    return true;
}
void complete(int s) {
    Op* o = g_s[s].q.front();
    g_s[s].q.pop_front();
    if (o->clock) g_s[s].done = o->clock;
    g_pending--;
    delete o;
}
void run_op(int s) {
    Op* o = g_s[s].q.front();
    o->started = true;
    const int cur = g_cur;
    Clock* cur_vc = g_cur_vc;
    const uint32_t cur_epoch = g_cur_epoch;
    const char* cur_what = g_cur_what;
    g_cur = s;
    g_cur_vc = &o->vc;
    g_cur_epoch = epoch(s, o->clock);
    g_cur_what = o->clock ? g_s[s].names[o->clock].what : "a wait";
    if (o->run) o->run();
    const bool done = !o->poll || o->poll();
    g_cur = cur;
    g_cur_vc = cur_vc;
    g_cur_epoch = cur_epoch;
    g_cur_what = cur_what;
    if (done) complete(s);
}
// one scheduling step: completes what finished, runs one random runnable operation; false when nothing moved
bool step() {
    bool moved = false;
    int cand[MAXS], nc = 0;
    for (int s = 1; s < g_ns; s++) {
        if (g_s[s].q.empty()) continue;
        Op* o = g_s[s].q.front();
        if (o->started) {
            const int cur = g_cur;
            Clock* cur_vc = g_cur_vc;
            const uint32_t cur_epoch = g_cur_epoch;
            g_cur = s; g_cur_vc = &o->vc; g_cur_epoch = epoch(s, o->clock);
            const bool done = o->poll();
            g_cur = cur; g_cur_vc = cur_vc; g_cur_epoch = cur_epoch;
            if (done) { complete(s); moved = true; }
            continue;
        }
        if (runnable(o)) cand[nc++] = s;
    }
    if (nc == 0) return moved;
    const int pick = cand[rnd(nc)];
    for (int s = 1; s < g_ns; s++)
        if (!g_s[s].q.empty() && g_s[s].q.front()->seq < g_s[pick].q.front()->seq) { g_overtook++; break; }
    g_ran++;
    run_op(pick);
    return true;
}
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
template <typename F> void drain(F done, const char* why) {
    double last = now_s();
    const double limit = getenv("EMU_NCCL_TIMEOUT") ? atof(getenv("EMU_NCCL_TIMEOUT")) : 600.0;
    while (!done()) {
        if (step()) { last = now_s(); continue; }
        bool busy = false;
        for (int s = 1; s < g_ns; s++) busy |= !g_s[s].q.empty() && g_s[s].q.front()->started;
        if (!busy) {
            fprintf(stderr, "EMU: stream mode: %s waits for work that can never run (a wait on an event whose work is "
                    "not queued)\n", why);
            fflush(stderr);
            _exit(1);
        }
        if (now_s() - last > limit) {
            fprintf(stderr, "EMU: stream mode: %s waited %.0f s (EMU_NCCL_TIMEOUT) for these NCCL operations:\n", why, limit);
            for (int s = 1; s < g_ns; s++)
                if (!g_s[s].q.empty() && g_s[s].q.front()->started)
                    fprintf(stderr, "  stream %d: %s\n", s - 1, describe(epoch(s, g_s[s].q.front()->clock)).c_str());
            fflush(stderr);
            _exit(1);
        }
        usleep(20);
    }
}
// a GPU works while the host goes on: a few random steps after each call, and no queue deeper than 1024
void progress() {
    while (rnd(2) == 0 && step()) {}
    if (g_pending > 1024) drain([] { return g_pending <= 512; }, "a deep queue");
}
void host_join(const Clock& c) {
    Clock& h = g_s[0].vc;
    for (int i = 1; i < MAXS; i++) h[i] = std::max(h[i], c[i]);
}
void join(Clock& a, const Clock& b) {
    for (int i = 0; i < MAXS; i++) a[i] = std::max(a[i], b[i]);
}
// queues o on internal stream s; clocked: it touches memory (takes the stream's next clock)
Op* push(int s, Op* o, bool clocked, const char* what, const char* file, int line) {
    init();
    Stream& st = g_s[s];
    join(st.vc, g_s[0].vc);  // after what the host did before the call
    if (s == 1) {            // the legacy default stream: after all earlier work of the other streams
        for (int t = 2; t < g_ns; t++)
            if (g_s[t].live) {
                join(st.vc, g_s[t].vc);
                if (g_s[t].vc[t]) o->deps.push_back({t, g_s[t].vc[t]});
            }
    }
    if (clocked) {
        st.vc[s]++;
        st.names.push_back(Name{what, file, line});
    }
    o->s = s;
    o->clock = clocked ? st.vc[s] : 0;
    o->vc = st.vc;
    o->seq = ++g_seq;
    st.q.push_back(o);
    g_pending++;
    g_s[0].vc[0]++;  // the host's later accesses are not ordered before this operation
    if (s == 1 && clocked) {  // and the other streams' later work waits for it
        for (int t = 2; t < g_ns; t++)
            if (g_s[t].live) {
                Op* w = new Op();
                w->seq = o->seq;
                w->deps.push_back({1, o->clock});
                join(g_s[t].vc, st.vc);
                w->s = t;
                w->vc = g_s[t].vc;
                g_s[t].q.push_back(w);
                g_pending++;
            }
    }
    return o;
}
int internal(int s) {
    if (s < 0 || s + 1 >= g_ns || !g_s[s + 1].live) {
        fprintf(stderr, "EMU ERROR: stream mode: stream %d was not created or is destroyed\n", s);
        abort();
    }
    return s + 1;
}
}  // namespace

void* alloc(size_t n, bool pinned, const char* file, int line) {
    init();
    const size_t align = pinned ? 4096 : 256;
    const size_t at = (g_top + align - 1) & ~(align - 1);
    if (at + n + 4096 > ARENA) return nullptr;
    g_top = at + n + 256;  // a gap: a read past the end shows as unwritten 0xff bytes
    if (pinned) g_top = (g_top + 4095) & ~(size_t)4095;
    for (size_t pg = at >> 12; pg <= (at + (n ? n - 1 : 0)) >> 12; pg++) g_page[pg] = pinned ? 2 : 1;
    g_allocs[(uintptr_t)(g_base + at)] = Alloc{n, pinned, file, line};
    memset(g_base + at, pinned ? 0 : 0xff, n);
    return g_base + at;
}
bool release(void* p) {
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end()) return false;
    sync_device();  // cudaFree and cudaFreeHost wait for the device
    const size_t off = (char*)p - g_base, n = it->second.n;
    memset(g_shadow + off / 2, 0, ((n + 1) / 2) * sizeof(Shadow));
    const size_t lo = (off + 4095) & ~(size_t)4095, hi = (off + n) & ~(size_t)4095;
    if (hi > lo) madvise(g_base + lo, hi - lo, MADV_DONTNEED);
    g_allocs.erase(it);
    return true;
}
bool in_arena(const void* p) { return g_base && (size_t)((const char*)p - g_base) < g_top; }
bool is_pinned(const void* p) { return in_arena(p) && g_page[(size_t)((const char*)p - g_base) >> 12] == 2; }
void enqueue(int stream, const char* what, const char* file, int line, std::function<void()> run,
             std::function<bool()> poll, const void* host_src, size_t host_n) {
    init();
    Op* o = new Op();
    o->run = std::move(run);
    o->poll = std::move(poll);
    o->host_src = host_src;
    o->host_n = host_n;
    push(internal(stream), o, true, what, file, line);
    progress();
}
void access(const void* p, size_t n, bool write) {
    if (n && in_arena(p)) check(p, n, write, true);
}
void poison_pinned(void* p, size_t n) {
    for (int s = 1; s < g_ns; s++)
        for (Op* o : g_s[s].q)
            if (o->host_n && (const char*)o->host_src < (char*)p + n && (char*)p < (const char*)o->host_src + o->host_n)
                return;
    memset(p, 0xff, n);
}
int stream_create() {
    init();
    if (g_ns == MAXS) { fprintf(stderr, "EMU ERROR: stream mode: more than %d streams\n", MAXS - 2); abort(); }
    Stream& st = g_s[g_ns];
    st.live = true;
    join(st.vc, g_s[1].vc);  // a new blocking stream's work follows the default stream's
    return g_ns++ - 1;
}
void stream_destroy(int s) {
    const int i = internal(s);
    drain([i] { return g_s[i].q.empty(); }, "cudaStreamDestroy");
    g_s[i].live = false;
}
void sync_stream(int s) {
    const int i = internal(s);
    drain([i] { return g_s[i].q.empty(); }, "cudaStreamSynchronize");
    host_join(g_s[i].vc);
}
bool query_stream(int s) {
    const int i = internal(s);
    step();
    if (!g_s[i].q.empty()) return false;
    host_join(g_s[i].vc);
    return true;
}
void sync_last(int s) {
    const int i = internal(s);
    const uint32_t c = g_s[i].vc[i];
    drain([i, c] { return ran(i, c); }, "a copy to or from pageable memory");
    host_join(g_s[i].vc);
}
void sync_device() {
    init();
    drain([] { return g_pending == 0; }, "cudaDeviceSynchronize");
    for (int s = 1; s < g_ns; s++) host_join(g_s[s].vc);
}
int event_create() {
    g_events.push_back(Event{});
    return (int)g_events.size() - 1;
}
void event_record(int e, int s, std::function<void()> run) {
    Op* o = new Op();
    o->run = std::move(run);
    const int i = internal(s);
    push(i, o, true, "cudaEventRecord", "", 0);
    g_events[e] = Event{i, o->clock, o->vc};
    progress();
}
void event_wait(int s, int e) {
    const Event ev = g_events[e];
    if (ev.s < 0) return;  // never recorded: nothing to wait for
    const int i = internal(s);
    Op* o = new Op();
    o->deps.push_back({ev.s, ev.clock});
    join(g_s[i].vc, ev.vc);
    push(i, o, false, "", "", 0);
    progress();
}
void event_sync(int e) {
    const Event ev = g_events[e];
    if (ev.s < 0) return;
    drain([ev] { return ran(ev.s, ev.clock); }, "cudaEventSynchronize");
    host_join(ev.vc);
}
bool event_query(int e) {
    const Event ev = g_events[e];
    if (ev.s < 0) return true;
    step();
    if (!ran(ev.s, ev.clock)) return false;
    host_join(ev.vc);
    return true;
}
long errors() { return g_errors; }
const char* current_what() { return g_cur_what; }
}  // namespace emu_streams

// ---- the entry points of -fsanitize=thread's instrumentation (GCC's names and signatures); the host's own threads
// all count as the host, the emulated GPU's work runs on the thread that calls the runtime
using emu_streams::g_base;
using emu_streams::g_size;
#define EMU_TSAN_ACCESS(n)                                                                               \
    extern "C" void __tsan_read##n(void* p) {                                                            \
        if ((size_t)((char*)p - g_base) < g_size) emu_streams::check(p, n, false);                        \
    }                                                                                                    \
    extern "C" void __tsan_write##n(void* p) {                                                           \
        if ((size_t)((char*)p - g_base) < g_size) emu_streams::check(p, n, true);                         \
    }                                                                                                    \
    extern "C" void __tsan_unaligned_read##n(void* p) { __tsan_read##n(p); }                             \
    extern "C" void __tsan_unaligned_write##n(void* p) { __tsan_write##n(p); }
EMU_TSAN_ACCESS(1)
EMU_TSAN_ACCESS(2)
EMU_TSAN_ACCESS(4)
EMU_TSAN_ACCESS(8)
EMU_TSAN_ACCESS(16)
extern "C" void __tsan_read_range(void* p, unsigned long n) {
    if ((size_t)((char*)p - g_base) < g_size) emu_streams::check(p, n, false);
}
extern "C" void __tsan_write_range(void* p, unsigned long n) {
    if ((size_t)((char*)p - g_base) < g_size) emu_streams::check(p, n, true);
}
extern "C" void __tsan_init() {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit() {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}
extern "C" int __tsan_atomic32_fetch_add(volatile int* a, int v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
extern "C" int __tsan_atomic32_fetch_sub(volatile int* a, int v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
extern "C" int __tsan_atomic32_load(const volatile int* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic32_store(volatile int* a, int v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }
extern "C" char __tsan_atomic8_load(const volatile char* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic8_store(volatile char* a, char v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }
extern "C" long __tsan_atomic64_load(const volatile long* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic64_store(volatile long* a, long v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }
extern "C" long __tsan_atomic64_fetch_add(volatile long* a, long v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_signal_fence(int) {}
