#!/usr/bin/env bash
# tests/t_datasets.sh: token data sets (llmc/data/datasets.h) and the preparation tool (build/prepare).
# Oracles: the documented byte layouts written by hand (Python struct), numpy's np.save/np.savez,
# Python's json module for JSONL, and direct computation of the sample windows. Every corrupt
# input runs as a subprocess that must exit with status 1 and name the file, and so does a token file truncated
# while mapped. Takes about 1 s.
# This script builds nothing and prepares the directory; the checks are tests/datasets_checks.py.
set -u
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
for b in build/test_datasets build/prepare; do
    if [ ! -x "$b" ]; then echo "[FAIL] datasets_build: $b is missing; run 'make $b'"; exit 1; fi
done
# the Llama 3 rank file is not committed: fetch it (npm) if this checkout lacks it. Without it (no network)
# only the checks that tokenize with Llama 3 fail (bpe_llama3, saying so); the rest still run.
if [ ! -f data/tokenizers/llama3.tiktoken ] && ! bash dev/data/fetch_tokenizers.sh llama3 > /dev/null; then
    echo "note: 'bash dev/data/fetch_tokenizers.sh llama3' failed (no network or npm registry?): the Llama 3 checks fail"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

rc=0
build/test_datasets selftest "$tmp/self" || rc=1

"$PY" tests/datasets_checks.py "$tmp" || rc=1

# a token file shrinking under a run (another program rewriting it): a 200,000-token llm.c shard (header written here
# from the documented layout), opened, then truncated to one page; the reads past the new end exit 1 naming the file
"$PY" - "$tmp/shrink.bin" <<'PYEOF'
import struct, sys
n = 200000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<3i", 20240520, 1, n) + bytes(1024 - 12) + struct.pack("<%dH" % n, *[i % 50000 for i in range(n)]))
PYEOF
out=$(build/test_datasets shrink "$tmp/shrink.bin" 64 4096 2>&1); st=$?
if [ $st -eq 1 ] && grep -q "error: '$tmp/shrink.bin': shrank while being read" <<< "$out"; then
    echo "[PASS] shrunk_token_file: a shard truncated while mapped stops the reader with exit 1 naming it"
else echo "[FAIL] shrunk_token_file: exit $st: $out"; rc=1; fi
exit $rc
