#!/usr/bin/env bash
# scripts/seeds/table.sh: runs every seed script's default mode (the plan) and prints the markdown table of
# docs/seeds.md: each published row beside our plan. Run from anywhere; needs ./train_gpt_cpu built.
set -u
cd "$(dirname "$0")/../.." || exit 1
echo "| case | published tokens/s/GPU | published memory per GPU | our plan: peak per stage (GiB) | largest -b that fits | predicted tokens/s per rank | measured |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
status=0
for s in scripts/seeds/*.sh; do
    case $(basename "$s") in seed_lib.sh|table.sh) continue ;; esac
    bash "$s" | grep '^| ' || { echo "error: $s failed" >&2; status=1; }
done
exit $status
