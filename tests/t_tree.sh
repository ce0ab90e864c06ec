#!/usr/bin/env bash
# The map of the tree against the tree (no builds, about a second). Checks:
#   1. llmc/README.md, the index of the headers, lists every file under llmc/ (*.h and *.cuh, every folder)
#      by its path in backquotes, and names no llmc/ header that does not exist.
#   2. every relative link [text](path) of README.md, docs/*.md and llmc/README.md (outside code blocks)
#      names a file or folder that exists, relative to the page that holds it (web links and #anchors are
#      not checked).
#   3. docs/reading.md's "Read:" lines name files that exist and, after each file, functions, classes and
#      structs that occur in it (`Class.method`: both names), so the tour follows the code when it moves.
#      Every line that docs/reading.md and llmc/README.md quote is anchored to a name, in one form:
#        `NAME` (`FILE:N`)  or  `NAME` (`FILE:N-M`)
#      NAME (a function, or the first words of a comment) must stand on line N of FILE (a path from the
#      repository root), and N-M must lie within the file; code that moves fails here with the file, the line
#      and the name, and the lines where the name now stands. A line quoted any other way (`FILE:N` without
#      its name, "line N", "lines N-M", "FILE N-M") fails.
#   4. llmc/ in layers, each header including only its own layer and those below (the #include "llmc/..."
#      lines of every header under llmc/):
#        0  llmc/*.h, llmc/*.cuh     kernels, the model, generic utilities
#        1  llmc/parallel/, llmc/data/   the parallel bookkeeping; token data and tokenizers (neither
#                                        includes the other)
#        2  llmc/run/                flags, checkpoints, logs, the run's file formats
#        3  llmc/gpt/                the CUDA trainer's parts (train_gpt.cu's translation unit)
#      An include of a higher layer, or between parallel/ and data/, fails naming the file, the line and
#      the two layers; a folder under llmc/ with no layer fails too. tests/t_headers.sh compiles each header
#      alone.
set -u
cd "$(dirname "$0")/.."
status=0
pass() { echo "[PASS] $1"; }
fail() { echo "[FAIL] $1"; status=1; }

# ---- 1. llmc/README.md against find llmc
index=llmc/README.md
if [ ! -f "$index" ]; then
    fail "$index: missing (the index of the headers under llmc/)"
else
    n=0; missing=0
    while IFS= read -r f; do
        n=$((n + 1))
        if ! grep -qF "\`$f\`" "$index"; then fail "$index does not list $f"; missing=$((missing + 1)); fi
    done < <(find llmc \( -name '*.h' -o -name '*.cuh' \) -type f | sort)
    [ $missing -eq 0 ] && pass "$index lists all $n headers under llmc/"
    named=0; stale=0
    while IFS= read -r f; do
        named=$((named + 1))
        if [ ! -f "$f" ]; then fail "$index names $f, which does not exist"; stale=$((stale + 1)); fi
    done < <(grep -oE 'llmc/[A-Za-z0-9_/.-]+\.(h|cuh)' "$index" | sort -u)
    [ $stale -eq 0 ] && pass "$index names no missing header ($named distinct llmc/ paths named, each exists)"
fi

# ---- 2. relative links of the documentation pages
pages=(README.md docs/*.md llmc/README.md)
links=0; broken=0
for p in "${pages[@]}"; do
    [ -f "$p" ] || continue
    dir=$(dirname "$p")
    # drop fenced code blocks, then take every ](target) of a link or an image
    while IFS= read -r target; do
        target=${target#](}; target=${target%)}
        target=${target%% *}  # [text](path "title")
        case "$target" in
            http://*|https://*|mailto:*|\#*|"") continue ;;
        esac
        target=${target%%#*}
        links=$((links + 1))
        if [ ! -e "$dir/$target" ]; then fail "$p links to $target, which does not exist ($dir/$target)"; broken=$((broken + 1)); fi
    done < <(awk '/^[ \t]*```/ { code = !code; next } !code' "$p" | grep -oE '\]\([^)]*\)')
done
[ $broken -eq 0 ] && pass "every relative link of README.md, docs/*.md and llmc/README.md exists ($links links)"

# ---- 3. docs/reading.md: the files and names of its "Read:" lines
tour=docs/reading.md
if [ ! -f "$tour" ]; then
    fail "$tour: missing (the reading path)"
else
    names=0; bad=0; stops=0
    while IFS= read -r line; do
        stops=$((stops + 1))
        file=
        while IFS= read -r tok; do
            tok=${tok#\`}; tok=${tok%\`}
            if [ -e "$tok" ]; then file=$tok; continue; fi
            if [ -z "$file" ]; then fail "$tour: '$tok' on a Read: line before any existing file ($line)"; bad=$((bad + 1)); continue; fi
            for part in ${tok//./ }; do
                names=$((names + 1))
                if [ -d "$file" ]; then
                    grep -rqw -- "$part" "$file" || { fail "$tour: $part not found under $file"; bad=$((bad + 1)); }
                else
                    grep -qw -- "$part" "$file" || { fail "$tour: $part not found in $file"; bad=$((bad + 1)); }
                fi
            done
        done < <(echo "$line" | grep -oE '`[^`]+`')
    done < <(grep -E '^Read:' "$tour")
    if [ $stops -eq 0 ]; then fail "$tour has no Read: lines"
    elif [ $bad -eq 0 ]; then pass "$tour: $stops Read: lines, every file they name exists and their $names names occur in it"; fi
fi

# ---- 3, continued: the lines the reading path and the index quote, each anchored to a name
# anchored form: `NAME` (`FILE:N`) or `NAME` (`FILE:N-M`)
anchored='`[^`]+` \(`[A-Za-z0-9_./-]+:[0-9]+(-[0-9]+)?`\)'
# a quoted line in any other form
bare='[A-Za-z0-9_/-]+\.(cu|cuh|h|cpp|py|sh|md)`?(:| )[0-9]+(-[0-9]+)?\b|\blines? [0-9]+(-[0-9]+)?'
refs=0; bad=0
for doc in docs/reading.md llmc/README.md; do
    [ -f "$doc" ] || continue
    n=0
    while IFS= read -r text; do
        n=$((n + 1))
        while IFS= read -r ref; do
            [ -n "$ref" ] || continue
            refs=$((refs + 1))
            name=${ref#\`}; name=${name%%\`*}
            loc=${ref##*(\`}; loc=${loc%\`)}
            file=${loc%:*}; range=${loc##*:}
            first=${range%-*}; last=${range#*-}
            if [ ! -f "$file" ]; then fail "$doc:$n quotes $file:$range (\`$name\`), a file that does not exist"; bad=$((bad + 1)); continue; fi
            size=$(wc -l < "$file")
            if [ "$first" -lt 1 ] || [ "$last" -lt "$first" ] || [ "$last" -gt "$size" ]; then
                fail "$doc:$n quotes $file:$range (\`$name\`), outside the file's $size lines"; bad=$((bad + 1)); continue
            fi
            if ! sed -n "${first}p" "$file" | grep -qwF -- "$name"; then
                now=$(grep -nwF -- "$name" "$file" | cut -d: -f1 | head -n 5 | paste -sd, -)
                fail "$doc:$n quotes $file:$range as \`$name\`, but line $first of $file does not hold it (it stands on line(s) ${now:-none} now): $(sed -n "${first}p" "$file" | cut -c1-80)"
                bad=$((bad + 1))
            fi
        done < <(grep -oE "$anchored" <<< "$text")
        while IFS= read -r b; do
            [ -n "$b" ] || continue
            fail "$doc:$n quotes a line without its name ('$b'): write \`NAME\` (\`FILE:N\`)"; bad=$((bad + 1))
        done < <(sed -E "s/$anchored//g" <<< "$text" | grep -oE "$bare")
    done < "$doc"
done
[ $bad -eq 0 ] && pass "docs/reading.md and llmc/README.md: each of the $refs lines they quote holds its name"

# ---- 4. llmc/ in layers: no header includes a layer above its own
# layer_of PATH: 0-3 (the table above), or nothing for a folder with no layer
layer_of() {
    case "$1" in
        llmc/gpt/*) echo 3 ;;
        llmc/run/*) echo 2 ;;
        llmc/parallel/*|llmc/data/*) echo 1 ;;
        llmc/*/*) echo "" ;;
        llmc/*) echo 0 ;;
    esac
}
layer_name() { case "$1" in 0) echo "0 (llmc/)" ;; 1) echo "1 (llmc/parallel/, llmc/data/)" ;; 2) echo "2 (llmc/run/)" ;; 3) echo "3 (llmc/gpt/)" ;; esac; }
incs=0; up=0
while IFS= read -r f; do
    lf=$(layer_of "$f")
    if [ -z "$lf" ]; then fail "layers: $f is in a folder of llmc/ with no layer (tests/t_tree.sh check 4)"; up=$((up + 1)); continue; fi
    while IFS=: read -r ln inc; do
        incs=$((incs + 1))
        li=$(layer_of "$inc")
        if [ -z "$li" ]; then
            fail "layers: $f:$ln includes $inc, in a folder of llmc/ with no layer"; up=$((up + 1))
        elif [ "$li" -gt "$lf" ]; then
            fail "layers: $f:$ln includes $inc: layer $(layer_name "$lf") includes layer $(layer_name "$li"), above it"; up=$((up + 1))
        elif [ "$li" = 1 ] && [ "$lf" = 1 ] && [ "${f%/*}" != "${inc%/*}" ]; then
            fail "layers: $f:$ln includes $inc: ${f%/*}/ and ${inc%/*}/ share layer 1, and neither includes the other"; up=$((up + 1))
        fi
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"llmc/' "$f" | sed -E 's/^([0-9]+):[^"]*"([^"]+)".*/\1:\2/')
done < <(find llmc \( -name '*.h' -o -name '*.cuh' \) -type f | sort)
[ $up -eq 0 ] && pass "layers: the $incs includes of llmc/'s headers go to their own layer or a lower one (0 llmc/, 1 parallel/ data/, 2 run/, 3 gpt/)"
exit $status
