#!/usr/bin/env bash
# tests/tokenizer/bench.sh: encode speed of llmc/data/tokenizer.h and of the JavaScript references
# (js-tiktoken for GPT-2, llama3-tokenizer-js for Llama 3) on the same text in one run, one core
# each, and the ratios. A benchmark, not a test: it asserts nothing.
# Usage: bash tests/tokenizer/bench.sh [text file]   (default: Moby Dick, 1.2 MB)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tests/tokenizer/npm_install.sh
bash dev/data/fetch_tokenizers.sh > /dev/null
make -s build/test_tokenizer
text=${1:-}
if [ -z "$text" ]; then
    node tests/tokenizer/make_texts.cjs build/tokenizer_test > /dev/null
    text=build/tokenizer_test/moby.txt
fi
echo "text: $text ($(wc -c < "$text") bytes); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
ours=$( { build/test_tokenizer bench gpt2 "$text" 5; build/test_tokenizer bench llama3 "$text" 5; } )
refs=$(node tests/tokenizer/reference.cjs bench "$text" 3)
echo "$ours"
echo "$refs"
mbs() { grep "$1" <<< "$2" | sed -E 's/.*: ([0-9.]+) MB\/s.*/\1/'; }
for tok in gpt2 llama3; do
    awk -v tok=$tok -v a="$(mbs "ours $tok" "$ours")" -v b="$(mbs " $tok:" "$refs")" \
        'BEGIN { printf "ratio %s: ours / reference = %.1fx\n", tok, a / b }'
done
