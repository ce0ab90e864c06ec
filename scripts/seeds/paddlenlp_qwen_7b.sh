#!/usr/bin/env bash
# Seed row qwen_7b (PaddleNLP pretraining on 8 x A100 80G, BENCHMARK_CASES.md section 3): the row's facts; scripts/seeds/seed_lib.sh does the rest (--plan default, --run, --tiny).
SEED_NAME="qwen_7b"
SEED_SOURCE="PaddleNLP pretraining on 8 x A100 80G, BENCHMARK_CASES.md section 3"
SEED_PUB_TOKS="3607.3"
SEED_PUB_MEM="65.4 GB"
SEED_SKIP="no preset for this model in llmc/model_config.h (Qwen: QKV-only biases, vocabulary 151936)"
source "$(dirname "$0")/seed_lib.sh"
