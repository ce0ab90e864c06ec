// dev/data/tokenizers/export_ranks.cjs: writes a tokenizer's merge ranks as a tiktoken rank file,
// one line per ordinary token in rank order: "<base64 of the token's bytes> <rank>\n".
//   node export_ranks.cjs r50k_base <node_modules dir> <out file>   (from js-tiktoken)
//   node export_ranks.cjs llama3    <node_modules dir> <out file>   (from llama3-tokenizer-js)
// Special tokens are not part of the file; llmc/data/tokenizer.h appends them after the last rank.
'use strict';
const fs = require('fs');
const path = require('path');

function die(msg) {
    process.stderr.write('error: ' + msg + '\n');
    process.exit(1);
}

// js-tiktoken keeps r50k_base compactly: lines "<any> <first rank> <base64> <base64> ...", where
// the tokens of a line take consecutive ranks.
function r50kRanks(modules) {
    const ranks = require(path.join(modules, 'js-tiktoken', 'dist', 'ranks', 'r50k_base.cjs'));
    const out = [];
    for (const line of ranks.bpe_ranks.split('\n')) {
        if (!line) continue;
        const [, first, ...tokens] = line.split(' ');
        tokens.forEach((tok, i) => { out[Number.parseInt(first, 10) + i] = Buffer.from(tok, 'base64'); });
    }
    return out;
}

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the other 68 bytes are
// shifted to code points 256.. in byte order. The inverse maps a vocabulary string to bytes.
function unicodeToByte() {
    const printable = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    const map = new Map();
    let shifted = 0;
    for (let b = 0; b < 256; b++) map.set(printable(b) ? b : 256 + shifted++, b);
    return map;
}

// llama3-tokenizer-js keeps the Llama 3 vocabulary as byte-level strings whose index is the token
// id; in Meta's tiktoken file the rank of a token is its id.
function llama3Ranks(modules) {
    const src = fs.readFileSync(path.join(modules, 'llama3-tokenizer-js', 'src', 'data-converted.js'), 'utf8');
    const m = src.match(/const llama_vocab_base64 = "([A-Za-z0-9+/=]+)"/);
    if (!m) die('llama3-tokenizer-js: vocabulary not found in src/data-converted.js (package layout changed?)');
    const vocab = Buffer.from(m[1], 'base64').toString('utf8').split('\n');
    const toByte = unicodeToByte();
    return vocab.map((s, id) => Buffer.from([...s].map((ch) => {
        const b = toByte.get(ch.codePointAt(0));
        if (b === undefined) die(`llama3-tokenizer-js: token ${id} holds a character outside the byte-level alphabet`);
        return b;
    })));
}

const [name, modulesArg, outFile] = process.argv.slice(2);
const modules = path.resolve(modulesArg || '.');
if (!outFile) die('usage: node export_ranks.cjs r50k_base|llama3 <node_modules dir> <out file>');
const expected = { r50k_base: 50256, llama3: 128000 };
if (!(name in expected)) die(`unknown tokenizer '${name}' (expected r50k_base or llama3)`);
const tokens = name === 'r50k_base' ? r50kRanks(modules) : llama3Ranks(modules);
if (tokens.length !== expected[name]) die(`${name}: found ${tokens.length} tokens, expected ${expected[name]}`);
const seen = new Set();
let text = '';
tokens.forEach((bytes, rank) => {
    if (!bytes || bytes.length === 0) die(`${name}: rank ${rank} is missing or empty`);
    const b64 = bytes.toString('base64');
    if (seen.has(b64)) die(`${name}: rank ${rank} repeats an earlier token`);
    seen.add(b64);
    text += b64 + ' ' + rank + '\n';
});
fs.mkdirSync(path.dirname(outFile), { recursive: true });
fs.writeFileSync(outFile + '.tmp', text);
fs.renameSync(outFile + '.tmp', outFile);
console.log(`wrote ${outFile}: ${tokens.length} ranks, ${text.length} bytes`);
