#!/usr/bin/env bash
# dev/data/fetch_tokenizers.sh: writes the BPE rank files llmc/data/tokenizer.h reads, in tiktoken's
# format (one line per token: "<base64 token bytes> <rank>"), from npm packages:
#   data/tokenizers/r50k_base.tiktoken   GPT-2 / GPT-3 (from js-tiktoken)      committed to the repo
#   data/tokenizers/llama3.tiktoken      Llama 3 (from llama3-tokenizer-js)    fetched on demand
# Each output is checked against the SHA-256 of the official file (OpenAI's r50k_base.tiktoken,
# Meta's Llama 3 tokenizer.model), so the result is byte-identical to those files.
# The npm packages go to tests/tokenizer/node_modules (pinned by tests/tokenizer/package-lock.json).
# Usage: bash dev/data/fetch_tokenizers.sh [r50k_base|llama3|all]   (default: all; existing,
# verified files are kept)
set -euo pipefail
cd "$(dirname "$0")/../.."
which=${1:-all}
out_dir=data/tokenizers
npm_dir=tests/tokenizer

sha_r50k_base=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
sha_llama3=82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55

case "$which" in
    r50k_base) names=(r50k_base) ;;
    llama3) names=(llama3) ;;
    all) names=(r50k_base llama3) ;;
    *) echo "error: unknown tokenizer '$which' (expected r50k_base, llama3 or all)" >&2; exit 1 ;;
esac

mkdir -p "$out_dir"
for name in "${names[@]}"; do
    out=$out_dir/$name.tiktoken
    want_var=sha_$name
    want=${!want_var}
    if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$want" ]; then
        echo "$out: present and verified"
        continue
    fi
    command -v node >/dev/null || { echo "error: node is needed to write $out (e.g. apt-get install -y nodejs npm)" >&2; exit 1; }
    bash tests/tokenizer/npm_install.sh  # the pinned packages, installed once (quietly)
    node dev/data/tokenizers/export_ranks.cjs "$name" "$npm_dir/node_modules" "$out"
    got=$(sha256sum "$out" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
        echo "error: $out has SHA-256 $got, expected $want (the npm package's data changed?)" >&2
        rm -f "$out"
        exit 1
    fi
    echo "$out: SHA-256 verified"
done
