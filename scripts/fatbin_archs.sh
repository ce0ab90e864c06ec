#!/usr/bin/env bash
# scripts/fatbin_archs.sh BINARY: prints the GPU architectures a CUDA executable holds machine code (ELF) for, one
# sm_XX or sm_XXa per line, sorted as bytes (sm_100a before sm_80). Used by tests/t_probe_build.sh,
# tests/t_devcuda_build.sh and tests/t_gpu_kit.sh.
# With cuobjdump (CUDA_HOME/bin or PATH) it asks cuobjdump --list-elf. Without it, it reads the fatbin entry
# headers in the executable. Layout (as nvcc 12-13 write it): fatbin header {u32 magic 0xBA55ED50, u16 version,
# u16 header size, u64 payload size}, then entries {u16 kind (1 PTX, 2 ELF), u16, u32 header size, u64 payload
# size, ..., u32 arch at +28, u64 flags at +40 where 0x100000 marks an arch-specific "a" target}.
set -u
if [ $# -ne 1 ] || [ "$1" = "--help" ]; then
    echo "usage: scripts/fatbin_archs.sh BINARY   (prints sm_XX[a] per ELF image in the executable's fatbin)"
    [ $# -eq 1 ] && exit 0 || exit 2
fi
[ -f "$1" ] || { echo "error: scripts/fatbin_archs.sh: no file '$1'" >&2; exit 1; }
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUOBJDUMP=$(command -v cuobjdump || { [ -x "$CUDA_HOME/bin/cuobjdump" ] && echo "$CUDA_HOME/bin/cuobjdump"; })
if [ -n "$CUOBJDUMP" ]; then
    "$CUOBJDUMP" --list-elf "$1" | grep -o 'sm_[0-9]*a\{0,1\}' | LC_ALL=C sort -u
    exit 0
fi
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
"$PY" - "$1" <<'PYEOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
magic = struct.pack("<I", 0xBA55ED50)
archs = set()
pos = data.find(magic)
while pos >= 0:
    _, _, hsize, fsize = struct.unpack_from("<IHHQ", data, pos)
    entry, end = pos + hsize, pos + hsize + fsize
    while entry + 48 <= end:
        kind, _, ehsize, esize = struct.unpack_from("<HHIQ", data, entry)
        arch = struct.unpack_from("<I", data, entry + 28)[0]
        flags = struct.unpack_from("<Q", data, entry + 40)[0]
        if kind == 2:
            archs.add("sm_%d%s" % (arch, "a" if flags & 0x100000 else ""))
        if ehsize == 0:
            break
        entry += ehsize + esize
    pos = data.find(magic, end)
print("\n".join(sorted(archs)))
PYEOF
