// tests/tokenizer/reference.cjs: the reference tokenizers, js-tiktoken (r50k_base, GPT-2) and
// llama3-tokenizer-js (Llama 3), from tests/tokenizer/node_modules (tests/tokenizer/npm_install.sh).
//   node reference.cjs encode <dir> <name>...  for each <dir>/<name>.txt write <name>.gpt2.u32 and
//                                              <name>.llama3.u32 (uint32 little-endian token ids).
//                                              The text named "special" is encoded with special
//                                              tokens recognised, the others as ordinary text.
//   node reference.cjs bench <text> [reps]     encode speed in MB/s (median of reps)
// Encode long texts: llama3-tokenizer-js orders equal merges by position / text length, which can
// reorder merges of neighbouring ranks in a very short text of multi-byte characters.
'use strict';
const fs = require('fs');
const path = require('path');

const modules = path.join(__dirname, 'node_modules');
const { Tiktoken } = require(path.join(modules, 'js-tiktoken', 'dist', 'lite.cjs'));
const r50k = require(path.join(modules, 'js-tiktoken', 'dist', 'ranks', 'r50k_base.cjs'));
const { llama3Tokenizer: llama3 } = require(path.join(modules, 'llama3-tokenizer-js', 'bundle', 'commonjs-llama3-tokenizer-with-baked-data.cjs'));
const gpt2 = new Tiktoken(r50k);

const neverMatches = /(?!)/g;  // a special-token pattern that matches nothing: plain text only
const encoders = {
    gpt2: (text, special) => special ? gpt2.encode(text, 'all') : gpt2.encode(text, [], []),
    llama3: (text, special) => special ? llama3.encode(text, { bos: false, eos: false })
                                       : llama3.encode(text, { bos: false, eos: false, specialTokenRegex: neverMatches }),
};

const [mode, ...args] = process.argv.slice(2);
if (mode === 'encode' && args.length >= 2) {
    const dir = args[0];
    for (const name of args.slice(1)) {
        const text = fs.readFileSync(path.join(dir, name + '.txt'), 'utf8');
        for (const [tok, encode] of Object.entries(encoders)) {
            const ids = Uint32Array.from(encode(text, name === 'special'));
            fs.writeFileSync(path.join(dir, `${name}.${tok}.u32`), Buffer.from(ids.buffer));
        }
    }
} else if (mode === 'bench' && args.length >= 1) {
    const text = fs.readFileSync(args[0], 'utf8');
    const bytes = Buffer.byteLength(text);
    const reps = args[1] ? parseInt(args[1], 10) : 3;
    for (const [tok, encode] of Object.entries(encoders)) {
        const mbs = [];
        let n = 0;
        for (let r = 0; r < reps; r++) {
            const t0 = process.hrtime.bigint();
            n = encode(text, false).length;
            mbs.push(bytes / 1e6 / (Number(process.hrtime.bigint() - t0) / 1e9));
        }
        mbs.sort((a, b) => a - b);
        const lib = tok === 'gpt2' ? 'js-tiktoken' : 'llama3-tokenizer-js';
        console.log(`${lib} ${tok}: ${mbs[Math.floor(reps / 2)].toFixed(2)} MB/s (median of ${reps}; ${bytes} bytes -> ${n} tokens)`);
    }
} else {
    console.error('usage: node reference.cjs encode <dir> <name>... | bench <text> [reps]');
    process.exit(1);
}
