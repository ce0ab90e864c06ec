#!/usr/bin/env bash
# Writes data/mobydick_gpt2_{train,val}_000000.bin: data/mobydick.txt tokenized with GPT-2 BPE
# (r50k_base) into llm.c shards, one document per paragraph, the first 10% of paragraphs as the
# validation split. These shards are committed; this script regenerates them.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s build/prepare
build/prepare --tokenizer gpt2 --split-paragraphs --val-frac 0.1 --out data/mobydick_gpt2 data/mobydick.txt
