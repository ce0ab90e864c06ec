#!/usr/bin/env bash
# Unit checks of the shared headers and finite differences (double) of the CPU model.
set -u
mkdir -p build
status=0
./test_gpt_cpu units || status=1
./test_gpt_cpu fd || status=1
exit $status
