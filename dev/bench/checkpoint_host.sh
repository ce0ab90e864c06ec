#!/usr/bin/env bash
# Checkpoint cost on the host, of the sharded format (llmc/run/checkpoint.h: a shard_*.bin and shard_*.json per rank,
# index.json, state.json, DONE). The figures of the earlier single-file format (model.safetensors, optim.safetensors,
# a whole-model gather on rank 0) are kept in docs/checkpoints.md, "Measured". A benchmark, not a test: it prints
# figures and judges nothing; it is not part of `make test`.
#
# What it measures, for both trainers (train_gpt_cpu and train_gpt.cu through the host emulation,
# build/train_gpt_emu: bf16, as the CUDA trainer runs) on a model of about 83M parameters (gpt3_125m's width,
# --layers 6), -b 1 -t 64, one micro-batch per rank, at 1, 2 and 4 ranks (--dp N --zero 1; 2 ranks also --zero 0):
#   1. Peak host memory per rank: GNU time's %M (maximum resident set size, KiB; the kernel's VmHWM at exit) of
#      every rank, each rank started through a small wrapper ($W/rank.sh) that writes its own figure. Three runs
#      per case: "none" (one step, no checkpoint: -o ""), "save" (one step, then the final checkpoint: -x 1 -o DIR)
#      and "resume" (--resume that checkpoint, one more step, no save: -x 2 -o ""). Beside each peak, a formula:
#        own    = (4 + 8/dz) P bytes: the fp32 weights and the two AdamW moments a rank owns (dz = dp under
#                 ZeRO >= 1, else 1; the master copy in the CUDA trainer)
#        large  = the largest tensor, fp32 (the token embedding, padded vocabulary x C)
#        const  = none's peak - own: everything else a rank holds without a checkpoint (gradients, activations,
#                 bf16 copies in the emulated device memory, init buffers, MPI and the runtime), taken from the
#                 "none" run of the same trainer and layout (its highest rank)
#        ratio  = measured / (1.5 own + large + const), the sharded format's goal being <= 1
#   2. Throughput against the same disk's raw figures, measured in the same run (before and after the trainers):
#        raw write: dd if=/dev/zero bs=1M count=DD_MIB conv=fsync; raw read: dd of the same file, bs=1M, after
#        evicting it from the page cache (posix_fadvise DONTNEED through dd iflag=nocache count=0: per file, no
#        root needed and other users' caches stay; fincore checks that nothing stayed resident).
#        save: rank 0's output lines are time-stamped as they arrive (stdbuf -oL); the save phase runs from the
#        last line before the checkpoint (the last one stamped before DONE's mtime: the step line / memory table)
#        to the mtime of DONE, split at the newest mtime among the shard_*.json (write: rank 0 makes .tmp_ckpt_N,
#        a barrier, every rank's pieces written, its .bin fsynced, then its .json written; then commit: rank 0's
#        index.json and state.json, the hashes of the small files (no .bin is read back), DONE, the rename and the
#        syncs). There is no gather phase now, and the short preparation (.tmp_ckpt_N and a barrier) is not split
#        off: it takes less than the stamps lag behind the prints (some milliseconds, tens on a busy host; mpirun
#        forwards the ranks' output), so every phase is good to a few hundredths of a second.
#        load: from the first read of index.json to rank 0's "resumed from" line, split at the first read of any
#        shard_*.bin (open: ckpt_open, every rank reading DONE and the small files it names, each hashed and parsed:
#        index.json, state.json, every shard_*.json; then read: part_read, each rank's pread of the byte ranges it
#        needs from the .bin files, 4 MiB chunks, each hash-checked). Not from the first read of DONE or a shard's
#        .json: train_gpt.cu reads those among its input checks (ckpt_check_files), before the model is built;
#        index.json is read by ckpt_open alone, microseconds after DONE. First reads are the files' atimes, reset to 0 before the
#        run (on relatime mounts the next read then sets them), the earliest of every rank's; every file of the
#        checkpoint is evicted from the page cache before the run.
#        Checkpoint bytes = the sizes of all the files in the checkpoint directory; throughput = those bytes / the
#        phase's time (on load a rank reads only what it needs: under ZeRO 0 the whole checkpoint; under ZeRO 1 its
#        piece of the moments, and all the weights in the CPU trainer, its piece of them in the emulated one; so at
#        dp > 1 the ranks together may read more than that size); vs_raw = the ratio to the mean of the two raw
#        figures.
# The trainers are built with make, then copied into $W/bin and run from there (a rebuild by someone else mid-run
# changes nothing). The load average at the start and the end says how busy the host was (timings, not peaks, move).
# Usage: bash dev/bench/checkpoint_host.sh   (from the repository root; KEEP=1 keeps build/bench_checkpoint_host)
# Knobs: LAYERS (6), T (64), DD_MIB (1024), CASES_CPU / CASES_EMU (NP:ZERO lists, "1:0 2:1 2:0 4:1" / "1:0 2:1 4:1").
# The emulated trainer's 2-rank ZeRO 0 case is left out by default to keep the run short; add it with
# CASES_EMU="1:0 2:1 2:0 4:1".
# Needs: GNU time (/usr/bin/time; apt-get install -y time), OpenMPI (mpirun), coreutils' stdbuf and dd,
# util-linux's fincore (optional), a file system that keeps atimes (relatime or strictatime, not noatime). Peak
# memory at most about 4 ranks x 4 GiB (the single-file format's figure).
# Run time: not yet measured for the sharded format. With the single-file format it took 19 minutes on 2 cores (AMD
# EPYC, 2026-11-25) that others' tests shared (load average 5-6), 27 under heavier load; the emulated trainer's
# 4 ranks were half of it (its step takes 23 s on one core, the CPU trainer's 3 s), and CASES_EMU="1:0 4:1" saved
# about 4 minutes.
set -u
cd "$(dirname "$0")/../.." || exit 1
W=build/bench_checkpoint_host
LAYERS=${LAYERS:-6}
T=${T:-64}
DD_MIB=${DD_MIB:-1024}
CASES_CPU=${CASES_CPU-"1:0 2:1 2:0 4:1"}
CASES_EMU=${CASES_EMU-"1:0 2:1 4:1"}
export OMP_NUM_THREADS=1
T_START=$SECONDS

if [ ! -x /usr/bin/time ] || ! /usr/bin/time -f %M -o /dev/null true 2> /dev/null; then
    echo "GNU time (/usr/bin/time) is missing: install it with 'apt-get install -y time'"; exit 1
fi
for t in mpirun stdbuf dd awk; do
    command -v $t > /dev/null || { echo "$t is missing (mpirun: apt-get install -y openmpi-bin libopenmpi-dev)"; exit 1; }
done
HAVE_FINCORE=0; command -v fincore > /dev/null && HAVE_FINCORE=1
echo "== building: make train_gpt_cpu build/train_gpt_emu"
if ! make -s train_gpt_cpu build/train_gpt_emu > /dev/null 2> "build/bench_checkpoint_host.build.log"; then
    echo "build failed:"; tail -n 20 build/bench_checkpoint_host.build.log; exit 1
fi
rm -f build/bench_checkpoint_host.build.log
rm -rf "$W" && mkdir -p "$W/bin"
# copies, so that a rebuild by someone else's make during the run (the trainers are shared files) cannot change them
cp train_gpt_cpu build/train_gpt_emu "$W/bin/" || exit 1
for b in "$W"/bin/*; do "$b" --help > /dev/null 2>&1 || { echo "$b does not run (--help)"; exit 1; }; done
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

# one rank: GNU time writes its peak RSS (KiB) to $RSS_OUT.<world rank>; stdbuf makes stdout line-buffered so that
# the time stamps below are those of the moment each line was printed
cat > "$W/rank.sh" << 'EOF'
#!/bin/sh
exec /usr/bin/time -f "%M" -o "$RSS_OUT.${OMPI_COMM_WORLD_RANK:-0}" stdbuf -oL "$@"
EOF
chmod +x "$W/rank.sh"

stamp() { while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }
fadd() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", a - b }'; }   # a - b
# job NAME PROG NP ZERO FLAGS...: one run, output time-stamped in $W/NAME.log, peaks in $W/NAME.rss.R; sets rc, took
job() {
    local name=$1 prog=$2 np=$3 zero=$4; shift 4
    local lay=()
    [ "$np" -gt 1 ] && lay=(--dp "$np" --zero "$zero")
    local args=(-c gpt3_125m --layers "$LAYERS" -b 1 -t "$T" -d $((T * np)) -v 0 -g 0 "${lay[@]}" "$@")
    rm -f "$W/$name.rss."*
    local t0=$SECONDS
    if [ "$np" = 1 ]; then
        RSS_OUT="$W/$name.rss" timeout 1200 "$W/rank.sh" "$prog" "${args[@]}" 2>&1 | stamp > "$W/$name.log"
        rc=${PIPESTATUS[0]}
    else
        RSS_OUT="$W/$name.rss" timeout 1200 "${MPIRUN[@]}" -x RSS_OUT -x OMP_NUM_THREADS -np "$np" "$W/rank.sh" "$prog" \
            "${args[@]}" 2>&1 | stamp > "$W/$name.log"
        rc=${PIPESTATUS[0]}
    fi
    took=$((SECONDS - t0))
    [ "$rc" = 0 ] || { echo "  $name exited $rc; its last lines:"; tail -n 5 "$W/$name.log" | sed 's/^/    /'; }
}
# rss NAME: "MAX_KIB RANK_OF_MAX MIN_KIB" over the ranks' figures (the last line of each file: a failed run's file
# begins with GNU time's "Command exited with non-zero status")
rss() {
    for f in "$W/$1".rss.*; do [ -f "$f" ] && echo "${f##*.} $(tail -n 1 "$f")"; done |
        awk 'NF == 2 { if (max == "" || $2 > max) { max = $2; r = $1 } if (min == "" || $2 < min) min = $2 }
             END { if (max == "") print "- - -"; else print max, r, min }'
}
stamp_of() { awk -v p="$2" 'index($0, p) { print $1; exit }' "$W/$1.log"; }   # first line containing P
mtime() { stat -c %.9Y "$1"; }
atime() { local a; a=$(stat -c %.9X "$1"); awk -v a="$a" 'BEGIN { exit !(a > 1e9) }' && echo "$a"; }   # "" if never read
resident() {   # bytes of the files in the page cache
    if [ $HAVE_FINCORE = 1 ]; then fincore -b -n -o RES "$@" | awk '{ s += $1 } END { print s + 0 }'; else echo "?"; fi
}
evict() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done; }
mem_avail_kib() { awk '/^MemAvailable:/ { print $2 }' /proc/meminfo; }

# raw disk: TAG
raw() {
    local f=$W/raw.bin out secs bytes
    out=$(dd if=/dev/zero of="$f" bs=1M count="$DD_MIB" conv=fsync 2>&1 | tail -n 1)
    bytes=$(echo "$out" | awk '{ print $1 }'); secs=$(echo "$out" | awk -F', ' '{ split($3, a, " "); print a[1] }')
    local w; w=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.0f", b / s / 1e6 }')
    evict "$f"
    local res; res=$(resident "$f")
    out=$(dd if="$f" of=/dev/null bs=1M 2>&1 | tail -n 1)
    secs=$(echo "$out" | awk -F', ' '{ split($3, a, " "); print a[1] }')
    local r; r=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.0f", b / s / 1e6 }')
    rm -f "$f"
    echo "raw disk ($1): write $w MB/s (dd bs=1M count=$DD_MIB conv=fsync), read $r MB/s (dd bs=1M after eviction; resident before: $res bytes)"
    RAW_W+=("$w"); RAW_R+=("$r")
}

echo "== host: $(getconf _NPROCESSORS_ONLN) cores, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo),"\
     "$(uname -r); $W on $(df -T "$W" | awk 'NR == 2 { print $1 " (" $2 ")" }'); $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD 2> /dev/null)"
echo "== load average (1, 5, 15 min) at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== model: -c gpt3_125m --layers $LAYERS -b 1 -t $T -d $T x ranks -v 0 -g 0, OMP_NUM_THREADS=1, ranks under ${MPIRUN[*]}"
RAW_W=(); RAW_R=()
raw before

ROWS=()   # memory table rows
TDATA=()  # throughput figures, formatted at the end (against the raw disk figures taken before and after)
PARAMS=""
declare -A PEAK1   # the largest 1-rank peak of each trainer, KiB (a guard against running the host out of memory)
for tr in cpu emu; do
    if [ $tr = cpu ]; then prog=$W/bin/train_gpt_cpu; cases=$CASES_CPU; else prog=$W/bin/train_gpt_emu; cases=$CASES_EMU; fi
    for c in $cases; do
        np=${c%%:*}; zero=${c##*:}
        [ "$np" = 1 ] && zero=0
        lay="-"; [ "$np" -gt 1 ] && lay="dp$np zero$zero"
        if [ "$np" -gt 1 ] && [ -n "${PEAK1[$tr]:-}" ]; then
            need=$(( np * PEAK1[$tr] + 1048576 )); avail=$(mem_avail_kib)
            if [ "$avail" -lt "$need" ]; then
                echo "[$tr $lay] skipped: $np ranks may need $((need / 1024)) MiB, $((avail / 1024)) MiB available"; continue
            fi
        fi
        n=${tr}_${np}_z$zero
        ck=$W/$n.out/ckpt_00000001
        job "$n.none" $prog "$np" "$zero" -x 1 -o ""; t_none=$took; rc_none=$rc
        job "$n.save" $prog "$np" "$zero" -x 1 -o "$W/$n.out"; t_save=$took; rc_save=$rc
        res_before="-"; t_res=0; rc_res=1
        if [ "$rc_save" = 0 ] && [ -f "$ck/DONE" ]; then
            evict "$ck"/*
            res_before=$(resident "$ck"/*)
            touch -a -d @0 "$ck"/*   # relatime: each file's next read sets its atime, the moment it is first read
            job "$n.resume" $prog "$np" "$zero" -x 2 -o "" --resume "$ck"; t_res=$took; rc_res=$rc
        fi
        echo "[$tr $lay] none ${t_none} s (exit $rc_none), save ${t_save} s (exit $rc_save), resume ${t_res} s (exit $rc_res)"
        [ -z "$PARAMS" ] && PARAMS=$(awk -F'|' '$2 ~ /^ *parameters *$/ { split($3, a, " "); print a[1]; exit }' "$W/$n.save.log")
        shape=$(grep -m 1 -o 'C=[0-9]* H=[0-9]* KV=[0-9]* hd=[0-9]* ffn=[0-9]*' "$W/$n.save.log")
        vpad=$(grep -m 1 -o 'padded [0-9]*' "$W/$n.save.log" | awk '{ print $2 }')
        # the largest tensor, fp32: max of the embedding [Vpad, C], fc [ffn, C], qkv [(H + 2 KV) hd, C]
        large=$(echo "$shape $vpad" | tr '=' ' ' | awk '{ C = $2; H = $4; KV = $6; hd = $8; F = $10; V = $11
            m = V * C; if (F * C > m) m = F * C; if ((H + 2 * KV) * hd * C > m) m = (H + 2 * KV) * hd * C; print 4 * m }')
        dz=1; [ "$zero" -ge 1 ] && dz=$np
        own=$(awk -v P="$PARAMS" -v dz="$dz" 'BEGIN { printf "%.0f", (4 + 8 / dz) * P }')
        read -r none_max none_r none_min <<< "$(rss "$n.none")"
        if [ "$np" = 1 ]; then
            for ph in none save resume; do
                read -r m _ _ <<< "$(rss "$n.$ph")"
                [ "$m" != - ] && [ "$m" -gt "${PEAK1[$tr]:-0}" ] && PEAK1[$tr]=$m
            done
        fi
        for ph in none save resume; do
            read -r mx r mn <<< "$(rss "$n.$ph")"
            ROWS+=("$(awk -v tr=$tr -v np="$np" -v lay="$lay" -v ph=$ph -v mx="$mx" -v r="$r" -v mn="$mn" -v P="$PARAMS" \
                -v own="$own" -v large="$large" -v nm="$none_max" 'BEGIN {
                M = 1048576
                if (mx == "-") { printf "%-4s %5s %-11s %-6s %9s\n", tr, np, lay, ph, "(failed)"; exit }
                cst = nm * 1024 - own; f = 1.5 * own + large + cst
                printf "%-4s %5s %-11s %-6s %9.0f %4s %9.0f %8.2f %9.0f %7.0f %7.0f %9.0f %6s\n", tr, np, lay, ph,
                    mx / 1024, "r" r, mn / 1024, P / 1e6, own / M, large / M, cst / M, f / M,
                    ph == "none" ? "-" : sprintf("%.2f", mx * 1024 / f) }')")
        done
        # throughput
        if [ "$rc_save" = 0 ] && [ -f "$ck/DONE" ]; then
            bytes=$(stat -c %s "$ck"/* | awk '{ s += $1 } END { print s }')
            t_done=$(mtime "$ck/DONE")
            t_shards=$(for f in "$ck"/shard_*.json; do mtime "$f"; done | sort -g | tail -n 1)   # the newest
            t_pre=$(awk -v lim="$t_done" '$1 < lim { t = $1 } END { print t }' "$W/$n.save.log")
            t_resumed=$(stamp_of "$n.resume" "resumed from ")
            # the first reads: of index.json (ckpt_open's), of any shard_*.bin (a file never read keeps atime 0 and
            # is left out)
            t_r0=$(atime "$ck/index.json")
            t_r1=$(for f in "$ck"/shard_*.bin; do atime "$f"; done | sort -g | head -n 1)
            TDATA+=("$tr|$np|$lay|$bytes|$t_pre|$t_shards|$t_done|$t_r0|$t_r1|$t_resumed|$res_before")
        fi
        rm -rf "$W/$n.out"
    done
done
raw after
# the raw figures: the mean of the two measurements
RAW_WM=$(echo "${RAW_W[@]}" | awk '{ printf "%.0f", ($1 + $2) / 2 }'); RAW_RM=$(echo "${RAW_R[@]}" | awk '{ printf "%.0f", ($1 + $2) / 2 }')
TROWS=()
for e in "${TDATA[@]}"; do
    TROWS+=("$(echo "$e" | awk -F'|' -v rw="$RAW_WM" -v rr="$RAW_RM" '{
                tr = $1; np = $2; lay = $3; B = $4; pre = $5; sh = $6; dn = $7; r0 = $8; r1 = $9; rsm = $10; cached = $11
                save = dn - pre
                wt = B / save / 1e6
                ok = r0 != "" && r1 != "" && rsm != ""
                lt = ok ? sprintf("%.2f", rsm - r0) : "-"; h = ok ? sprintf("%.2f", r1 - r0) : "-"; q = ok ? sprintf("%.2f", rsm - r1) : "-"
                rt = ok ? sprintf("%.0f", B / (rsm - r0) / 1e6) : "-"; rv = ok ? sprintf("%.2f", B / (rsm - r0) / 1e6 / rr) : "-"
                printf "%-4s %5s %-11s %7.0f %7.2f %6.2f %6.2f %8.0f %6.2f %7s %6s %6s %8s %6s %8s\n", tr, np, lay, B / 1e6, save,
                    sh - pre, dn - sh, wt, wt / rw, lt, h, q, rt, rv, cached }')")
done

echo
echo "== peak host memory per rank (GNU time %M), MiB; P = $PARAMS parameters"
echo "   own = (4 + 8/dz) P bytes (fp32 weights + 2 AdamW moments, dz = dp under ZeRO >= 1); large = largest tensor (fp32);"
echo "   const = the 'none' run's peak (its highest rank) - own; formula = 1.5 own + large + const; ratio = max / formula"
printf "%-4s %5s %-11s %-6s %9s %4s %9s %8s %9s %7s %7s %9s %6s\n" trainer ranks layout phase max rank min "P (M)" own large const formula ratio
for r in "${ROWS[@]}"; do echo "$r"; done
echo
echo "== checkpoint throughput (MB = 1e6 bytes); raw disk in this run: write ${RAW_W[*]} MB/s, read ${RAW_R[*]} MB/s (before, after):"
echo "   vs_raw against their means, $RAW_WM and $RAW_RM MB/s"
echo "   MB = all the files of the checkpoint directory; save_s = rank 0's last line before the checkpoint -> DONE's mtime ="
echo "   write (-> the newest shard_*.json's mtime: every rank's shard written and its .bin synced) + commit (index.json,"
echo "   state.json, the small files' hashes, DONE, the rename);"
echo "   load_s = the first read of index.json (its atime) -> rank 0's 'resumed from' line = open (-> the first read of any"
echo "   shard_*.bin: DONE's files hashed, index.json, state.json and every shard_*.json parsed) + read (each rank's ranges"
echo "   of the .bin files, chunk hashes checked); atimes are the first reader's; cached = checkpoint bytes in the page cache"
echo "   when the resume started"
printf "%-4s %5s %-11s %7s %7s %6s %6s %8s %6s %7s %6s %6s %8s %6s %8s\n" trainer ranks layout MB save_s write commit \
    save_MB/s vs_raw load_s open read load_MB/s vs_raw cached
for r in "${TROWS[@]}"; do echo "$r"; done
echo
echo "== load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); took $((SECONDS - T_START)) s"
if [ "${KEEP:-0}" = 1 ]; then echo "kept $W"; else rm -rf "$W"; fi
