#!/usr/bin/env bash
# Seed row baichuan2_13b_sd8_stage2 (PaddleNLP pretraining on 8 x A100 80G, BENCHMARK_CASES.md section 3): the row's facts; scripts/seeds/seed_lib.sh does the rest (--plan default, --run, --tiny).
SEED_NAME="baichuan2_13b_sd8_stage2"
SEED_SOURCE="PaddleNLP pretraining on 8 x A100 80G, BENCHMARK_CASES.md section 3"
SEED_PUB_TOKS="1355.0"
SEED_PUB_MEM="74.8 GB"
SEED_SKIP="no preset for this model in llmc/model_config.h (Baichuan2-13B: ALiBi positions are no switch yet)"
source "$(dirname "$0")/seed_lib.sh"
