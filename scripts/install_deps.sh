#!/usr/bin/env bash
# Installs what the tests need and the machine lacks, with apt-get (Debian/Ubuntu):
#   python3-torch, python3-numpy for /usr/bin/python3 (the PyTorch reference, train_gpt.py)
#   openmpi-bin, libopenmpi-dev (the CPU trainer's parallel layouts)
#   python3-matplotlib (scripts/plot.py)
# Without root or apt-get it prints the exact command to run and exits 1.
set -u
need=()
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || need+=(python3-torch)
/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || need+=(python3-numpy)
/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1 || need+=(python3-matplotlib)
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
command -v mpicxx >/dev/null 2>&1 || need+=(libopenmpi-dev)
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing: ${need[*]}"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" > /tmp/train_gpt_apt.log 2>&1 && exit 0
    echo "apt-get failed; see /tmp/train_gpt_apt.log"
fi
echo "error: missing ${need[*]}. Install with:"
echo "  sudo apt-get install -y ${need[*]}"
exit 1
