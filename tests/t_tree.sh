#!/usr/bin/env bash
# The map of the tree against the tree (no builds, about a second). Checks:
#   1. llmc/README.md, the index of the headers, lists every file under llmc/ (*.h and *.cuh, every folder)
#      by its path in backquotes, and names no llmc/ header that does not exist.
#   2. every relative link [text](path) of README.md, docs/*.md and llmc/README.md (outside code blocks)
#      names a file or folder that exists, relative to the page that holds it (web links and #anchors are
#      not checked).
#   3. docs/reading.md's "Read:" lines name files that exist and, after each file, functions, classes and
#      structs that occur in it (`Class.method`: both names), so the tour follows the code when it moves.
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
exit $status
