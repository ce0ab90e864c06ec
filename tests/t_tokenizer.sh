#!/usr/bin/env bash
# tests/t_tokenizer.sh: llmc/data/tokenizer.h against the reference tokenizers, token for token:
# js-tiktoken (r50k_base, GPT-2) and llama3-tokenizer-js (Llama 3), on Moby Dick (1.2 MB), a
# hand-made stress text, 600 KB of random character soup and special tokens; plus round trips,
# hand-derived values, the rank files' SHA-256 and bad inputs. Installs the pinned npm packages
# into tests/tokenizer/node_modules and writes data/tokenizers/llama3.tiktoken when missing.
# About 5 s (the first run also installs about 55 MB of npm packages, ~10 s).
set -u
cd "$(dirname "$0")/.."
fails=0
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; fails=$((fails + 1)); }

# Network: the npm packages (reference tokenizers, Moby Dick) and the Llama 3 rank file made from one of
# them. When they cannot be fetched, the checks that need them fail with one message saying why; the
# bad-input checks (the committed GPT-2 rank file only) still run.
net=1
if ! bash tests/tokenizer/npm_install.sh; then
    fail "npm packages: 'bash tests/tokenizer/npm_install.sh' failed (no network or npm registry?): the reference comparisons, the Llama 3 rank file and the self-test need them and did not run"
    net=0
elif ! bash dev/data/fetch_tokenizers.sh > /dev/null; then
    fail "rank files: 'bash dev/data/fetch_tokenizers.sh' failed: the reference comparisons and the self-test need them and did not run"
    net=0
else
    pass "rank files: r50k_base.tiktoken and llama3.tiktoken have the official SHA-256"
fi
make -s build/test_tokenizer || { fail "build: make build/test_tokenizer failed"; exit 1; }

bin=build/test_tokenizer
dir=build/tokenizer_test
mkdir -p "$dir"
if [ $net = 1 ]; then
    node tests/tokenizer/make_texts.cjs "$dir" || { fail "texts: make_texts.cjs failed"; exit 1; }
    node tests/tokenizer/reference.cjs encode "$dir" moby stress soup special || { fail "reference: reference.cjs failed"; exit 1; }

    $bin selftest || fails=$((fails + 1))
    for name in moby stress soup special; do
        for tok in gpt2 llama3; do
            if [ "$name" = special ]; then $bin compare $tok $dir/$name.txt $dir/$name.$tok.u32 "$tok $name" special
            else $bin compare $tok $dir/$name.txt $dir/$name.$tok.u32 "$tok $name"; fi || fails=$((fails + 1))
        done
    done
fi

# UTF-8 decoding of the pre-tokenizer against Python's strict decoder (no rank files needed)
if /usr/bin/python3 tests/tokenizer/utf8_cases.py "$dir/utf8_cases.bin" > /dev/null; then
    $bin utf8 "$dir/utf8_cases.bin" || fails=$((fails + 1))
else fail "utf8 cases: tests/tokenizer/utf8_cases.py failed"; fi

# Bad input: exit status 1 (not a crash) and a message naming the file and the problem.
bad=$dir/bad
mkdir -p $bad
printf '' > $bad/empty.tiktoken
head -c 400000 data/tokenizers/r50k_base.tiktoken > $bad/truncated.tiktoken
head -n 1000 data/tokenizers/r50k_base.tiktoken > $bad/short.tiktoken
{ echo "IQ== 0"; echo "Ig== 2"; } > $bad/order.tiktoken
{ echo "IQ== 0"; echo "I*g= 1"; } > $bad/base64.tiktoken
{ echo "IQ== 0"; echo "IQ== 1"; } > $bad/duplicate.tiktoken
sed -n '1,255p' data/tokenizers/r50k_base.tiktoken > $bad/bytes.tiktoken
expect_error() {  # name, the file named in the message (fixed string), expected message part, command...
    local name=$1 named=$2 want=$3; shift 3
    local out rc
    out=$("$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -eq 1 ] && grep -qF -- "$named" <<< "$out" && grep -q -- "$want" <<< "$out"; then pass "bad input: $name: $(head -n 1 <<< "$out" | cut -c1-150)"
    else fail "bad input: $name: exit $rc, message '$(head -n 1 <<< "$out")', expected exit 1, '$named' and '$want'"; fi
}
expect_error "missing file" "$bad/none.tiktoken" "no such file" $bin info $bad/none.tiktoken
expect_error "empty file" "$bad/empty.tiktoken" "is empty" $bin info $bad/empty.tiktoken
expect_error "truncated file" "$bad/truncated.tiktoken" "truncated.tiktoken' line" $bin info $bad/truncated.tiktoken
expect_error "unknown size" "$bad/short.tiktoken" "1000 ranks" $bin info $bad/short.tiktoken
expect_error "rank order" "$bad/order.tiktoken" "line 2: rank 2, expected 1" $bin info $bad/order.tiktoken
expect_error "bad base64" "$bad/base64.tiktoken" "line 2: token is not valid base64" $bin info $bad/base64.tiktoken
expect_error "duplicate token" "$bad/duplicate.tiktoken" "line 2: token repeats" $bin info $bad/duplicate.tiktoken
expect_error "missing byte" "$bad/bytes.tiktoken" "no token for the single byte 0x" $bin info $bad/bytes.tiktoken
expect_error "bytes has no eot" "byte-level tokenizer" "no end-of-text token" $bin info bytes

[ $fails -eq 0 ]
