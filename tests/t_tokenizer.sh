#!/usr/bin/env bash
# tests/t_tokenizer.sh: llmc/tokenizer.h against the reference tokenizers, token for token:
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

if ! bash tests/tokenizer/npm_install.sh; then
    fail "npm packages: could not install; run 'cd tests/tokenizer && npm ci' by hand"
    exit 1
fi
if ! bash dev/data/fetch_tokenizers.sh > /dev/null; then
    fail "rank files: 'bash dev/data/fetch_tokenizers.sh' failed"
    exit 1
fi
pass "rank files: r50k_base.tiktoken and llama3.tiktoken have the official SHA-256"
make -s build/test_tokenizer || { fail "build: make build/test_tokenizer failed"; exit 1; }

bin=build/test_tokenizer
dir=build/tokenizer_test
node tests/tokenizer/make_texts.cjs "$dir" || { fail "texts: make_texts.cjs failed"; exit 1; }
node tests/tokenizer/reference.cjs encode "$dir" moby stress soup special || { fail "reference: reference.cjs failed"; exit 1; }

$bin selftest || fails=$((fails + 1))
for name in moby stress soup special; do
    for tok in gpt2 llama3; do
        if [ "$name" = special ]; then $bin compare $tok $dir/$name.txt $dir/$name.$tok.u32 "$tok $name" special
        else $bin compare $tok $dir/$name.txt $dir/$name.$tok.u32 "$tok $name"; fi || fails=$((fails + 1))
    done
done

# Bad input: exit status 1 (not a crash) and a message naming the problem.
bad=$dir/bad
mkdir -p $bad
printf '' > $bad/empty.tiktoken
head -c 400000 data/tokenizers/r50k_base.tiktoken > $bad/truncated.tiktoken
head -n 1000 data/tokenizers/r50k_base.tiktoken > $bad/short.tiktoken
{ echo "IQ== 0"; echo "Ig== 2"; } > $bad/order.tiktoken
{ echo "IQ== 0"; echo "I*g= 1"; } > $bad/base64.tiktoken
{ echo "IQ== 0"; echo "IQ== 1"; } > $bad/duplicate.tiktoken
sed -n '1,255p' data/tokenizers/r50k_base.tiktoken > $bad/bytes.tiktoken
expect_error() {  # name, expected message part, command...
    local name=$1 want=$2; shift 2
    local out rc
    out=$("$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -eq 1 ] && grep -q -- "$want" <<< "$out"; then pass "bad input: $name: $(head -n 1 <<< "$out" | cut -c1-150)"
    else fail "bad input: $name: exit $rc, message '$(head -n 1 <<< "$out")', expected exit 1 and '$want'"; fi
}
expect_error "missing file" "no such file" $bin info $bad/none.tiktoken
expect_error "empty file" "is empty" $bin info $bad/empty.tiktoken
expect_error "truncated file" "truncated.tiktoken' line" $bin info $bad/truncated.tiktoken
expect_error "unknown size" "1000 ranks" $bin info $bad/short.tiktoken
expect_error "rank order" "line 2: rank 2, expected 1" $bin info $bad/order.tiktoken
expect_error "bad base64" "line 2: token is not valid base64" $bin info $bad/base64.tiktoken
expect_error "duplicate token" "line 2: token repeats" $bin info $bad/duplicate.tiktoken
expect_error "missing byte" "no token for the single byte 0x" $bin info $bad/bytes.tiktoken
expect_error "bytes has no eot" "no end-of-text token" $bin info bytes

[ $fails -eq 0 ]
