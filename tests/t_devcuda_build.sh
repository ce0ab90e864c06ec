#!/usr/bin/env bash
# tests/t_devcuda_build.sh: the kernel playground dev/cuda (dev/cuda/Makefile, make devcuda) builds and behaves
# without a GPU.
#   - every program of dev/cuda/Makefile's PROGRAMS builds into build/devcuda/ and its compile log (written by
#     the build) has no warning
#   - every binary holds sm_80, sm_90a and sm_100a code (scripts/fatbin_archs.sh)
#   - the standalone `make -C dev/cuda` builds a program with the same flags (one program, fresh, into build/)
#   - --help prints a usage line and exits 0; with no GPU visible each program exits 1 saying so; bad arguments
#     (unknown flag, malformed or unsupported --sizes, version out of range) exit 1 with a clear message
#   - host-side harness logic (a small program compiled here): L2 rotation count, size parsing, tolerance
#     formula and comparison, the embedding backward's counting sort, per-version seeds, AdamW step constants
#   - run_all.sh parses (bash -n) and answers --help
#   - the attention programs' --docs (documents per sequence): bad values (0, negative, not an integer, not dividing
#     T) exit 1 naming --docs; built against the CPU emulation (tests/cuda_emu; --emu-build below): --docs at a tiny
#     --sizes prints a row per documents count with its time / the docs 1 time and the predicted fraction, the
#     documents check passes, at T 2048 the predicted fractions are dev/cuda/notes_attention.md's (27.3% of the tiles
#     for 4 documents, 9.1% for 16), and attention_tiles replays the tile counts of that file's table
#   - on a machine with a GPU: every program passes its own validation (--check-only at small sizes); skipped
#     only where no GPU is present (a failing kernel on a GPU fails, never skips)
# Takes about 20 s on 2 cores without a GPU when build/devcuda is up to date (two nvcc compiles; 70 s on a busy
# machine), plus about a minute for the emulated attention programs, about a minute more when it must build the six
# programs. Without nvcc it prints [SKIP] and exits 0.
#   tests/t_devcuda_build.sh --emu-build DIR PROGRAM...: builds those dev/cuda programs against the CPU emulation into
#   DIR (the builds this test runs, and tests/t_gpu_sprint.sh; needs no nvcc) and exits
set -u
cd "$(dirname "$0")/.."
unset MAKEFLAGS MFLAGS MAKELEVEL  # run from `make test -jN`, nested makes would warn about the jobserver

# dev/cuda programs against tests/cuda_emu: tests/cuda_emu/rewrite.py copies llmc/ and tests/ into DIR/src with every
# kernel launch rewritten, its rewrite_launches does the same for dev/cuda/ (which rewrite.py does not copy), and g++
# builds as tests/cuda_emu/build.sh does, with a header of what dev/cuda's harness uses beyond the emulation: uint4,
# the atomicAdd overloads of dev/cuda/ceilings.h and of the attention backward's version 2, and the L2 size attribute
# (answered with the SM count: no buffer set is rotated).
emu_build() {  # DIR PROGRAM...
    local dir=$1 p rc=0; shift
    mkdir -p "$dir" && rm -rf "$dir/src" || return 1
    "${PYTHON:-/usr/bin/python3}" - "$dir/src" <<'PY' || return 1
import contextlib, io, os, runpy, sys
dst = sys.argv[1]
sys.argv = ['tests/cuda_emu/rewrite.py', '.', dst]
with contextlib.redirect_stdout(io.StringIO()):
    g = runpy.run_path('tests/cuda_emu/rewrite.py')
os.makedirs(os.path.join(dst, 'dev/cuda'), exist_ok=True)
for f in sorted(os.listdir('dev/cuda')):
    if f.endswith(('.h', '.cu')):
        p = os.path.join('dev/cuda', f)
        open(os.path.join(dst, p), 'w').write(g['rewrite_launches'](open(p).read(), p)[0])
PY
    cat > "$dir/src/devcuda_emu.h" <<'HDR'
// what dev/cuda's harness uses beyond tests/cuda_emu (tests/t_devcuda_build.sh --emu-build)
#pragma once
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
static inline float atomicAdd(float* p, float v) { const float o = *p; *p = o + v; return o; }
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { const unsigned long long o = *p; *p = o + v; return o; }
#define cudaDevAttrL2CacheSize cudaDevAttrMultiProcessorCount
HDR
    for p in "$@"; do
        emu_cxx "$dir" "$dir/src/dev/cuda/$p.cu" "$dir/$p" || rc=1
    done
    return $rc
}
emu_cxx() {  # DIR SOURCE OUTPUT: one source of DIR/src against the emulation
    "${CXX:-g++}" -I tests/cuda_emu/include -I "$1/src" -std=c++17 -O2 -fopenmp -pthread -fno-strict-aliasing \
        -Wno-unknown-pragmas -include "$1/src/devcuda_emu.h" -x c++ "$2" -o "$3"
}
if [ "${1:-}" = --emu-build ]; then
    [ $# -ge 3 ] || { echo "usage: tests/t_devcuda_build.sh --emu-build DIR PROGRAM..." >&2; exit 2; }
    shift; emu_build "$@"; exit $?
fi

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
    echo "[SKIP] dev/cuda build: nvcc not found (PATH or $CUDA_HOME/bin); nothing to check"
    exit 0
fi
NVCC=$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")

fails=0
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1: $2"; fails=$((fails + 1)); }
B=build/devcuda
T=build/t_devcuda_build
rm -rf "$T"
mkdir -p "$T"
PROGRAMS=$(make -s --no-print-directory -C dev/cuda print-programs)
[ -n "$PROGRAMS" ] || fail "dev/cuda/Makefile" "no PROGRAMS line"

# ---- builds, compile logs, architectures
for p in $PROGRAMS; do
    if make -s --no-print-directory "$B/$p" > "$T/make_$p.log" 2>&1; then pass "make $B/$p"
    else fail "make $B/$p" "$(tail -n 5 "$T/make_$p.log")"; continue; fi
    if [ ! -f "$B/$p.log" ]; then fail "$p compile log" "$B/$p.log missing"
    elif grep -qi "warning" "$B/$p.log"; then fail "$p compiles warning-free" "$(grep -i -m 3 warning "$B/$p.log")"
    else pass "$p compiles warning-free"; fi
    archs=$(bash scripts/fatbin_archs.sh "$B/$p" | tr '\n' ' ')
    if echo " $archs" | grep -q " sm_80 " && echo " $archs" | grep -q " sm_90a " && echo " $archs" | grep -q " sm_100a "; then
        pass "$p has sm_80, sm_90a and sm_100a code ($archs)"
    else fail "$p architectures" "want sm_80, sm_90a and sm_100a, found '$archs'"; fi
done

# the standalone Makefile, fresh, one small program
if make -s --no-print-directory -C dev/cuda OUT="$(pwd)/$T/standalone" global_norm > "$T/standalone.log" 2>&1 \
    && [ -x "$T/standalone/global_norm" ]; then
    if grep -qi warning "$T/standalone.log"; then fail "make -C dev/cuda global_norm warning-free" "$(grep -i -m 3 warning "$T/standalone.log")"
    else pass "make -C dev/cuda global_norm (standalone Makefile) builds warning-free"; fi
    archs=$(bash scripts/fatbin_archs.sh "$T/standalone/global_norm" | tr '\n' ' ')
    if [ "$archs" = "sm_100a sm_80 sm_90a " ]; then pass "standalone build has sm_80, sm_90a and sm_100a code"
    else fail "standalone build architectures" "want 'sm_100a sm_80 sm_90a', found '$archs'"; fi
else
    fail "make -C dev/cuda global_norm" "$(tail -n 5 "$T/standalone.log")"
fi

# ---- behaviour without a GPU and on bad arguments (CUDA_VISIBLE_DEVICES= hides any GPU)
expect_error() {  # name, expected message, command...
    local name=$1 want=$2; shift 2
    local got rc
    got=$(timeout 60 "$@" 2>&1); rc=$?
    if [ $rc -eq 1 ] && echo "$got" | grep -q -- "$want"; then pass "$name"
    else fail "$name" "want exit 1 and '$want'; got exit $rc: $(echo "$got" | tail -n 3)"; fi
}
for p in $PROGRAMS; do
    bin=$B/$p
    [ -x "$bin" ] || continue
    got=$("$bin" --help 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$got" | head -n 1 | grep -q "^usage: "; then pass "$p --help"
    else fail "$p --help" "exit $rc: $(echo "$got" | head -n 2)"; fi
    expect_error "$p without a GPU" "no usable CUDA device" env CUDA_VISIBLE_DEVICES= "$bin" --check-only
    expect_error "$p: unknown flag" "unknown argument '--bogus'" "$bin" --bogus
    expect_error "$p: malformed --sizes" "is not a size" "$bin" --sizes 12xfoo
    expect_error "$p: version out of range" "version expects an integer" "$bin" 99
done
[ -x "$B/norm" ] && expect_error "norm: C not a multiple of 8" "C must be a multiple of 8" "$B/norm" --sizes 64x100
[ -x "$B/norm" ] && expect_error "norm: wrong number of dims" "has 3 numbers" "$B/norm" --sizes 1x2x3
[ -x "$B/rope" ] && expect_error "rope: head dim not a multiple of 16" "hd must be a multiple of 16" "$B/rope" --sizes 1x16x4x4x72
[ -x "$B/adamw" ] && expect_error "adamw: C not a multiple of 64" "C must be a multiple of 64" "$B/adamw" --sizes 2x100
for p in attention_forward attention_backward; do
    [ -x "$B/$p" ] || continue
    expect_error "$p: --docs 0" "--docs: '0' is not a positive integer" "$B/$p" --docs 0
    expect_error "$p: --docs negative" "--docs: '-4' is not a positive integer" "$B/$p" --docs 1,-4
    expect_error "$p: --docs not an integer" "--docs: '1.5' is not a positive integer" "$B/$p" --docs 1.5
    expect_error "$p: --docs empty item" "--docs: '' is not a positive integer" "$B/$p" --docs 1,,4
    expect_error "$p: --docs not dividing T" "--docs: 3 documents do not divide T=256" "$B/$p" --sizes 1x256x2x2x64 --docs 1,3
    expect_error "$p: --docs without a value" "--docs needs a value" "$B/$p" --docs
    got=$("$B/$p" --help 2>&1)
    if echo "$got" | head -n 1 | grep -q -- "--docs LIST" && echo "$got" | grep -q -- "--skip-matrix"; then pass "$p --help: --docs and --skip-matrix"
    else fail "$p --help" "no --docs / --skip-matrix: $(echo "$got" | head -n 1)"; fi
done

# ---- host-side harness logic
cat > "$T/units.cu" <<'EOF'
// host-only checks of dev/cuda/common.h and the host parts of llmc/embedding.cuh, llmc/adamw.cuh, llmc/norm.cuh
#include "dev/cuda/common.h"
#include "llmc/adamw.cuh"
#include "llmc/embedding.cuh"
#include "llmc/norm.cuh"
static int failures = 0;
static void expect(bool ok, const char* what) {
    printf("%s %s\n", ok ? "[PASS]" : "[FAIL]", what);
    if (!ok) failures++;
}
int main() {
    const size_t MiB = 1 << 20, GiB = 1ull << 30;
    expect(rotation_count(64 * MiB, 50 * MiB, 80 * GiB) == 3, "rotation: 64 MiB sets span 3x a 50 MiB L2 with 3 sets");
    expect(rotation_count(200 * MiB, 50 * MiB, 80 * GiB) == 1, "rotation: a set over 3x L2 is not rotated");
    expect(rotation_count(1024, 50 * MiB, 80 * GiB) == 64, "rotation: at most 64 sets");
    expect(rotation_count(1 * GiB, 512 * MiB, 2 * GiB) == 1, "rotation: limited by free memory");
    std::vector<std::vector<long>> s = parse_sizes("16384x2048,8x4", 2, "NxC");
    expect(s.size() == 2 && s[0][0] == 16384 && s[0][1] == 2048 && s[1][0] == 8 && s[1][1] == 4, "parse_sizes: two NxC sizes");
    Tolerance t = tolerance(U_BF16, 4096, 2.0);
    expect(t.rtol == 1.0 / 256 + 8.0 / 16777216 && t.atol == (64.0 + 8.0) / 16777216 * 2.0, "tolerance: u_out + 8 u32, (sqrt(K) + 8) u32 S");
    std::string rep;
    std::vector<float> got = {1.0f, 2.0f};
    std::vector<double> ref = {1.0, 2.0 + 2.0 * 1.0 / 256 * 2.0 * 0.99};  // just inside 2 * rtol * |ref| (atol 0)
    expect(check_close("x", got, ref, Tolerance{1.0 / 256, 0.0}, &rep) <= 1.0 && rep.empty(), "check_close: inside the bound passes");
    ref[1] = 2.0 * (1.0 + 2.0 / 256 * 1.02);
    expect(check_close("x", got, ref, Tolerance{1.0 / 256, 0.0}, &rep) > 1.0 && !rep.empty(), "check_close: outside the bound fails");
    std::vector<float> zero = {0.0f, 1e-30f};
    expect(check_close("z", std::vector<float>{0.0f}, std::vector<double>{0.0}, Tolerance{1.0 / 256, 0.0}, &rep) == 0.0 &&
           check_close("z", zero, std::vector<double>{0.0, 0.0}, Tolerance{1.0 / 256, 0.0}, &rep) > 1.0,
           "check_close: at atol 0 an exact zero passes and any difference from zero fails");
    got[0] = NAN;
    expect(check_close("x", got, std::vector<double>{1.0, 2.0}, Tolerance{1.0, 1.0}, &rep) > 1.0, "check_close: NaN fails");
    expect(seed_for("norm", 1, 0) != seed_for("norm", 2, 0) && seed_for("norm", 1, 0) != seed_for("norm", 1, 1) &&
           seed_for("norm", 1, 0) != seed_for("rope", 1, 0), "seed_for: fresh seeds per kernel, version, size");
    Layout lay;
    size_t a = lay.add(3), b = lay.add(5);
    expect(a == 0 && b == 256 && lay.total == 261, "Layout: 256-byte aligned offsets");
    float step, rsbc2;
    AdamWHyper h = {1e-3f, 0.9f, 0.95f, 1e-8f};
    adamw_step_constants(h, 2, &step, &rsbc2);
    const double b1 = h.beta1, b2 = h.beta2, want_step = (double)h.lr / (1 - b1 * b1), want_rs = 1 / std::sqrt(1 - b2 * b2);
    expect(std::fabs(step / want_step - 1) < 1e-6 && std::fabs(rsbc2 / want_rs - 1) < 1e-6 && std::fabs(want_step - 1e-3 / 0.19) < 1e-8,
           "adamw: bias-corrected constants lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t)");
    expect(norm_backward_scratch_floats(16384, 2048) == 512u * 4096u && norm_backward_scratch_floats(33, 8) == 2u * 16u,
           "norm backward: one partial row pair per 32 rows");
    // counting sort: random skewed tokens against a direct grouping
    const int N = 5000, V = 300;
    std::vector<int32_t> tok(N);
    for (int n = 0; n < N; n++) tok[n] = (int32_t)(V * std::pow(host_uniform(7, n, 0.0f, 1.0f), 3.0f)) % V;
    // packed [3N+1] = token [N] | offset [N+1] | rows [N], the first unique, unique+1 and N entries used
    std::vector<int> packed(embedding_plan_ints(N), -7);
    int unique = -1, max_count = 0;
    embedding_plan_rows(tok.data(), N, V, packed.data(), &unique, &max_count);
    const int* token = packed.data();
    const int* offset = packed.data() + N;
    const int* rows = packed.data() + 2 * N + 1;
    std::vector<std::vector<int>> direct(V);
    for (int n = 0; n < N; n++) direct[tok[n]].push_back(n);
    bool ok = unique > 0 && unique <= N && offset[0] == 0 && offset[unique] == N;
    int want_max = 0, u = 0;
    for (int v = 0; v < V && ok; v++) {
        want_max = std::max(want_max, (int)direct[v].size());
        if (direct[v].empty()) continue;
        ok = u < unique && token[u] == v && std::vector<int>(rows + offset[u], rows + offset[u + 1]) == direct[v];
        u++;
    }
    expect(ok && u == unique && max_count == want_max, "embedding plan: rows grouped by token, ascending, all once");
    return failures ? 1 : 0;
}
EOF
if "$NVCC" -std=c++17 -I. -Xcompiler -Wall,-Wno-unused-function,-fopenmp -arch=sm_80 "$T/units.cu" -o "$T/units" \
    > "$T/units_build.log" 2>&1; then  # sm_80: the headers' inline PTX (cp.async) needs it, as every build here targets it
    if grep -qi warning "$T/units_build.log"; then fail "harness unit program compiles warning-free" "$(grep -i -m 3 warning "$T/units_build.log")"
    else pass "harness unit program compiles warning-free"; fi
    "$T/units" > "$T/units.log" 2>&1
    rc=$?
    cat "$T/units.log"
    [ $rc -eq 0 ] || grep -q '^\[FAIL\]' "$T/units.log" || fail "harness unit program" "exit $rc: $(tail -n 3 "$T/units.log")"
else
    fail "compile harness unit program" "$(tail -n 5 "$T/units_build.log")"
fi

# ---- the attention programs against the CPU emulation: --docs (no GPU needed; the emulation's times are the CPU's:
# only the rows, the checks and the predicted fractions are checked)
if [ "$(uname -m)" != x86_64 ]; then
    echo "[SKIP] the attention programs in the emulation: its fiber switch is x86-64 only"
elif ! emu_build "$T/emu" attention_forward attention_backward > "$T/emu_build.log" 2>&1; then
    fail "attention_forward and attention_backward build against the emulation" "$(grep -m 3 error "$T/emu_build.log")"
else
    pass "attention_forward and attention_backward build against the emulation"
    num='[0-9]+\.[0-9]+'
    docs_check='documents 0,37,128,130,250 | 0,64,191: '
    # forward, version 3: the documents check, then a row per documents count (the list in any order: timed
    # increasing) with the ratio and the prediction (4 documents of 64 tokens at T 256: the 4 diagonal tiles of 10;
    # visible 4 x 64 x 65 / (256 x 257))
    f=$T/emu_forward_docs.log
    timeout 300 "$T/emu/attention_forward" 3 --skip-matrix --sizes 1x256x2x2x64 --docs 4,1 --reps 1 --warmup 0 > "$f" 2>&1; rc=$?
    if [ $rc = 0 ] && grep -qF "[PASS] attention_forward v3 B=2 T=256 H=4 KV=2 hd=128 $docs_check" "$f" &&
       grep -q '^# --skip-matrix: the fixed check matrix is not run$' "$f" && ! grep -q 'T=1024' "$f" &&
       grep -qE "^\| attention_forward \| 1x256x2x2x64 \| 1 \| 3 \| 1 \| $num \| $num \| $num \| 1\.000 \| 1\.000 \| 1\.000 \|$" "$f" &&
       grep -qE "^\| attention_forward \| 1x256x2x2x64 \| 4 \| 3 \| 1 \| $num \| $num \| $num \| $num \| 0\.400 \| 0\.253 \|$" "$f" &&
       [ "$(grep -c '^| attention_forward |' "$f")" = 2 ]; then
        pass "attention_forward 3 --docs 4,1 (emulated): the documents check, rows docs 1 then 4 with ms / docs 1, predicted 0.400"
    else fail "attention_forward --docs 4,1 (emulated)" "exit $rc: $(grep -E '^\||FAIL|error' "$f" | head -n 6 | tr '\n' ' ')"; fi
    # backward, version 3: the forward, the backward and both per documents count
    f=$T/emu_backward_docs.log
    timeout 300 "$T/emu/attention_backward" 3 --skip-matrix --sizes 1x256x2x2x64 --docs 1,4 --reps 1 --warmup 0 > "$f" 2>&1; rc=$?
    rows='^\| attention(_forward \(llmc\)|_backward| forward \+ backward) \| 1x256x2x2x64'
    if [ $rc = 0 ] && grep -qF "[PASS] attention_backward v3 B=2 T=256 H=4 KV=2 hd=128 $docs_check" "$f" &&
       [ "$(grep -cE "$rows \| 1 \| 3 \| 1 \| $num \| $num \| $num \| 1\.000 \| 1\.000 \| 1\.000 \|$" "$f")" = 3 ] &&
       [ "$(grep -cE "$rows \| 4 \| 3 \| 1 \| $num \| $num \| $num \| $num \| 0\.400 \| 0\.253 \|$" "$f")" = 3 ]; then
        pass "attention_backward 3 --docs 1,4 (emulated): the documents check; forward, backward and both for docs 1 and 4"
    else fail "attention_backward --docs 1,4 (emulated)" "exit $rc: $(grep -E '^\||FAIL|error' "$f" | head -n 8 | tr '\n' ' ')"; fi
    # without --docs: the table these programs always printed (run_all.sh and gpu_check.sh's sweep read it)
    f=$T/emu_forward_plain.log
    timeout 300 "$T/emu/attention_forward" 3 --skip-matrix --sizes 1x128x2x2x64 --reps 1 --warmup 0 > "$f" 2>&1; rc=$?
    if [ $rc = 0 ] && grep -qx '| kernel | size BxTxHxKVxhd | version | sets | ms | TFLOP/s | % of 400 target |' "$f" &&
       grep -qE "^\| attention_forward \| 1x128x2x2x64 \| 3 \| 1 \| $num \| $num \| $num \|$" "$f"; then
        pass "attention_forward without --docs (emulated): the table's columns unchanged"
    else fail "attention_forward without --docs (emulated)" "exit $rc: $(grep -E '^\||error' "$f" | head -n 4 | tr '\n' ' ')"; fi
    # the prediction at notes_attention.md's T 2048: 144 of 528 tiles for 4 documents, 48 for 16
    f=$T/emu_forward_2048.log
    timeout 300 "$T/emu/attention_forward" 3 --skip-matrix --sizes 1x2048x1x1x64 --docs 1,4,16 --reps 1 --warmup 0 > "$f" 2>&1
    got=$(grep -E '^\| attention_forward \| 1x2048x1x1x64 \|' "$f" | awk -F' [|] ' '{ printf "%s:%s ", $3, $10 }')
    [ "$got" = "1:1.000 4:0.273 16:0.091 " ] && pass "attention_forward --docs 1,4,16 at T 2048 (emulated): predicted 1.000, 0.273, 0.091 (notes_attention.md)" \
        || fail "attention_forward --docs 1,4,16 at T 2048 (emulated)" "docs:predicted '$got'; $(grep -m 2 error "$f")"
    # the tile counts of notes_attention.md's table, starts inside tiles included (attention_tiles, on the host)
    cat > "$T/emu/src/tiles.cu" <<'SRC'
#include "dev/cuda/attention_cases.h"
int main() {
    // notes_attention.md, "Documents: predicted cost", T 2048: documents, every start moved this far into its tile
    // (the first document then starts at that offset, after a 32-token tail), forward / dQ tiles, dK/dV tiles
    const int rows[6][4] = {{1, 0, 528, 1056}, {4, 0, 144, 288}, {16, 0, 48, 96},
                            {1, 32, 528, 1056}, {4, 32, 168, 312}, {16, 32, 78, 126}};
    int bad = 0;
    for (const auto& r : rows) {
        std::vector<int> starts = {0};
        for (int k = 0; k < r[0]; k++)
            if (k * (2048 / r[0]) + r[1] > 0) starts.push_back(k * (2048 / r[0]) + r[1]);
        const std::vector<int32_t> doc = documents_from_starts(2048, {starts});
        const AttentionTiles n = attention_tiles(doc.data(), 1, 2048);
        const bool ok = n.fwd == r[2] && n.dkdv == r[3];
        printf("[%s] attention_tiles at T 2048: %d documents, starts moved %d: %.0f and %.0f tiles (notes_attention.md: %d and %d)\n",
               ok ? "PASS" : "FAIL", r[0], r[1], n.fwd, n.dkdv, r[2], r[3]);
        bad += !ok;
    }
    return bad ? 1 : 0;
}
SRC
    if emu_cxx "$T/emu" "$T/emu/src/tiles.cu" "$T/emu/tiles" > "$T/emu_tiles_build.log" 2>&1; then
        "$T/emu/tiles" > "$T/emu_tiles.log" 2>&1; rc=$?
        cat "$T/emu_tiles.log"
        fails=$((fails + $(grep -c '^\[FAIL\]' "$T/emu_tiles.log")))
        [ $rc -eq 0 ] || grep -q '^\[FAIL\]' "$T/emu_tiles.log" || fail "attention_tiles program" "exit $rc: $(tail -n 3 "$T/emu_tiles.log")"
    else fail "attention_tiles program builds" "$(grep -m 3 error "$T/emu_tiles_build.log")"; fi
fi

# ---- the memory-bound programs' newest versions against the CPU emulation (no GPU needed): each checks itself
# against the double reference and, bit for bit, against the version it replaced: norm's backward version 4 against
# version 3 (C 768 and 4096: rows staged, N 100 and 70 over several row blocks, the last partial; C 5120: not staged),
# mlp_act's swiglu_backward version 3 against version 2 (a partial last block), rope's version 4 against version 3
# (head dims 128, 80 and 64, forward and backward, partial last blocks)
if [ "$(uname -m)" != x86_64 ]; then
    echo "[SKIP] norm, mlp_act and rope in the emulation: its fiber switch is x86-64 only"
elif ! emu_build "$T/emu_mem" norm mlp_act rope > "$T/emu_mem_build.log" 2>&1; then
    fail "norm, mlp_act and rope build against the emulation" "$(grep -m 3 error "$T/emu_mem_build.log")"
else
    f=$T/emu_norm.log
    timeout 300 "$T/emu_mem/norm" 4 --check-only --sizes 100x768,70x4096,40x5120 > "$f" 2>&1; rc=$?
    if [ $rc = 0 ] && [ "$(grep -cE '^\| norm_backward \| (layer|rms)norm \| [0-9]+x[0-9]+ \| 4 \| 1 \| - \| - \| - \| ok ' "$f")" = 6 ]; then
        pass "norm 4 --check-only (emulated): the backward's staged rows, 6 rows ok, bit for bit version 3"
    else fail "norm 4 --check-only (emulated)" "exit $rc: $(grep -E '^\||FAIL|error' "$f" | head -n 8 | tr '\n' ' ')"; fi
    f=$T/emu_mlp_act.log
    timeout 300 "$T/emu_mem/mlp_act" 3 --check-only --sizes 40x1000 > "$f" 2>&1; rc=$?
    if [ $rc = 0 ] && [ "$(grep -cE '^\| swiglu_backward \| swiglu \| 40x1000 \| 3 \| 1 \| - \| - \| - \| ok ' "$f")" = 1 ] &&
       [ "$(grep -c '^| ' "$f")" = 3 ]; then
        pass "mlp_act 3 --check-only (emulated): swiglu_backward in address order, bit for bit version 2; no other kernel has a version 3"
    else fail "mlp_act 3 --check-only (emulated)" "exit $rc: $(grep -E '^\||FAIL|error' "$f" | head -n 6 | tr '\n' ' ')"; fi
    f=$T/emu_rope.log
    timeout 300 "$T/emu_mem/rope" 4 --check-only --sizes 2x64x8x2x128,1x50x6x3x80,3x40x4x2x64 > "$f" 2>&1; rc=$?
    if [ $rc = 0 ] && [ "$(grep -cE '^\| rope \| (forward|backward) \| [0-9x]+ \| 4 \| 1 \| - \| - \| - \| ok ' "$f")" = 6 ]; then
        pass "rope 4 --check-only (emulated): a thread per head, 6 rows ok, bit for bit version 3"
    else fail "rope 4 --check-only (emulated)" "exit $rc: $(grep -E '^\||FAIL|error' "$f" | head -n 8 | tr '\n' ' ')"; fi
fi

# ---- the run-all script
if bash -n dev/cuda/run_all.sh; then pass "dev/cuda/run_all.sh parses (bash -n)"
else fail "dev/cuda/run_all.sh" "bash -n reports a syntax error"; fi
if bash dev/cuda/run_all.sh --help | grep -q "^usage: dev/cuda/run_all.sh"; then pass "dev/cuda/run_all.sh --help"
else fail "dev/cuda/run_all.sh --help" "no usage line"; fi

# ---- with a GPU: every program's own validation at small sizes. Skipped only when there is no GPU: the
# program says "no usable CUDA device" and nvidia-smi (when installed) lists none; any other failure of the
# first program, or that message where nvidia-smi lists a GPU, is a failure, never a skip.
gpu_listed() { command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }
if [ ! -x "$B/norm" ]; then
    echo "[SKIP] runs on a GPU: $B/norm did not build (counted above)"
elif "$B/norm" --check-only --sizes 64x256 > "$T/gpu_norm.log" 2>&1; then
    for p in $PROGRAMS; do
        case $p in
            norm) sizes=256x768,100x4096,40x12288 ;;
            rope) sizes=2x64x8x2x128,1x50x6x3x80 ;;
            mlp_act) sizes=300x1024 ;;
            adamw) sizes=2x256 ;;
            global_norm) sizes=1000003,8 ;;
            embedding) sizes=2x128x768 ;;
            *) sizes= ;;
        esac
        if timeout 300 "$B/$p" --check-only ${sizes:+--sizes $sizes} > "$T/gpu_$p.log" 2>&1; then pass "$p --check-only on this GPU"
        else fail "$p --check-only on this GPU" "$(grep -E 'FAIL|error' "$T/gpu_$p.log" | head -n 5)"; fi
    done
elif grep -q "no usable CUDA device" "$T/gpu_norm.log" && ! gpu_listed; then
    echo "[SKIP] runs on a GPU: none here ($(tail -n 1 "$T/gpu_norm.log"))"
else
    fail "norm --check-only --sizes 64x256 on this machine's GPU" "$(tail -n 5 "$T/gpu_norm.log")"
fi

[ $fails -eq 0 ]
