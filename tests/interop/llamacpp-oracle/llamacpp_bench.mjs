// node llamacpp_bench.mjs --model FILE [--threads N] [--runs N] [--context N]
//     [--decode-tokens N] [--prompt-tokens N] [--batch N] [--cache-type T]
//     [--sequences N]
//
// llama.cpp's CPU decode and prompt speed on a GGUF file, timed the way
// moetier-bench-cpu times the moetier engine, so that the two can be put side
// by side (bench_against_llamacpp.py does):
// - decode: after --context random tokens, --decode-tokens greedy steps, one
//   forward pass each; a warm-up run first, then --runs timed ones, each on a
//   cleared sequence, and every run must generate the same tokens (with one
//   sequence);
// - prompt: --prompt-tokens random tokens in batches of --batch, on a cleared
//   sequence, a warm-up run first;
// - with --sequences N, the decode runs N sequences at once, each with its
//   own context and one token a step, as moetier-bench-batch does; the N
//   tokens of a step go to llama.cpp as one batch. The rate is their sum.
// Prints the medians as `decode: X tok/s median (min..max) ...` and
// `prompt: Y tok/s median ...` lines, the format of moetier-bench-cpu.
// Uses node-llama-cpp's prebuilt CPU binaries (the best variant this
// processor supports); it never downloads or compiles.
import path from "node:path";
import { getCpuLlama, kvCacheTypes } from "./cpu_llama.mjs";

const usage = `usage: node llamacpp_bench.mjs --model FILE [options]
  --model FILE          GGUF model
  --threads N           threads (default: all cores)
  --runs N              timed runs per measurement, after one warm-up (default 5)
  --context N           tokens in the cache when decoding starts (default 16)
  --decode-tokens N     tokens generated per decode run (default 32)
  --prompt-tokens N     tokens per prompt run (default 256)
  --batch N             prompt tokens per forward pass (default 256)
  --cache-type T        KV cache type for keys and values: f32, f16, q8_0, q4_0
                        (default f16, llama.cpp's)
  --sequences N         decode N sequences together, each after its own
                        context, and report their aggregate tok/s (default 1)`;

function parseArgs(argv) {
  const o = { model: null, threads: 0, runs: 5, context: 16, decodeTokens: 32, promptTokens: 256,
              batch: 256, cacheType: "f16", sequences: 1 };
  const numeric = { "--threads": "threads", "--runs": "runs", "--context": "context",
                    "--decode-tokens": "decodeTokens", "--prompt-tokens": "promptTokens",
                    "--batch": "batch", "--sequences": "sequences" };
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    if (flag === "-h" || flag === "--help") { console.log(usage); process.exit(0); }
    if (i + 1 >= argv.length) fail(`${flag} needs a value`);
    const value = argv[++i];
    if (flag === "--model") o.model = value;
    else if (flag === "--cache-type") o.cacheType = value.toLowerCase();
    else if (flag in numeric) {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 0) fail(`${flag}: not a count: ${JSON.stringify(value)}`);
      o[numeric[flag]] = n;
    } else fail(`unknown flag ${flag}`);
  }
  if (!o.model) fail("--model is required");
  if (o.runs < 1 || o.context < 1 || o.decodeTokens < 1 || o.promptTokens < 1 || o.batch < 1 ||
      o.sequences < 1) {
    fail("--runs, --context, --decode-tokens, --prompt-tokens, --batch and --sequences must be " +
         "at least 1");
  }
  if (!(o.cacheType in kvCacheTypes)) {
    fail(`--cache-type: ${o.cacheType} is not one of ${Object.keys(kvCacheTypes).join(", ")}`);
  }
  o.kvType = kvCacheTypes[o.cacheType];
  return o;
}

function fail(message) {
  console.error(`llamacpp_bench: ${message}\n${usage}`);
  process.exit(2);
}

function summarize(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  return { median, min: sorted[0], max: sorted[sorted.length - 1] };
}

// A fixed-seed generator, so every run of the program feeds the same tokens.
function randomTokens(count, nVocab, seed) {
  let state = seed >>> 0;
  const out = [];
  for (let i = 0; i < count; ++i) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    out.push(state % nVocab);
  }
  return out;
}

const o = parseArgs(process.argv.slice(2));
const llama = await getCpuLlama({ maxThreads: o.threads });
const model = await llama.loadModel({ modelPath: path.resolve(o.model), gpuLayers: 0 });
// node-llama-cpp sends a batch to llama.cpp on the next event-loop turn. The
// decode steps of several sequences are gathered whole instead: their tokens
// queue at slightly different times (each is sampled on its own), so a turn
// would split a step into several llama_decode calls. Waiting for the whole
// step reads the context's queue (an internal of node-llama-cpp 3.22.1,
// pinned in package.json); a step that never fills goes after 50 ms.
let gatherWholeSteps = false;
let context = null;
function dispatchWholeSteps(dispatch) {
  if (!gatherWholeSteps) return void setImmediate(dispatch);
  const start = performance.now();
  const check = () => {
    if (context._queuedDecodeSequenceIds.size >= o.sequences || performance.now() - start > 50) {
      dispatch();
    } else {
      setImmediate(check);
    }
  };
  setImmediate(check);
}
context = await model.createContext({
  batching: { dispatchSchedule: dispatchWholeSteps },
  contextSize: o.sequences * (Math.max(o.promptTokens, o.context + o.decodeTokens) + 16),
  batchSize: Math.max(o.batch, o.sequences),
  sequences: o.sequences,
  ...(o.threads > 0 ? { threads: { ideal: o.threads, min: o.threads } } : {}),
  experimentalKvCacheKeyType: o.kvType,
  experimentalKvCacheValueType: o.kvType,
});
const sequences = Array.from({ length: o.sequences }, () => context.getSequence());
const sequence = sequences[0];
const embedding = model.fileInfo.fullTensorInfo?.find((t) => t.name === "token_embd.weight");
const nVocab = embedding == null ? NaN : Number(embedding.dimensions[1]);
if (!Number.isInteger(nVocab) || nVocab < 2) throw new Error(`${o.model}: no token_embd.weight to size the vocabulary by`);
console.log(`llama.cpp: model ${o.model}, ${context.currentThreads} threads, ` +
            `KV ${o.kvType}, flash attention ${context.flashAttention ? "on" : "off"}, ` +
            `batch ${o.batch}, ${o.sequences} sequence(s) decoding together`);

const contextTokens = sequences.map((_, i) => randomTokens(o.context, nVocab, 1234 + i));
const promptTokens = randomTokens(o.promptTokens, nVocab, 5678);

// One sequence's decode run: decodeTokens greedy tokens after its context.
// The first token yielded took one forward pass over the context's last
// token, each later one a pass over the token before it: decodeTokens passes.
async function decodeRun(seq, tokens) {
  const generated = [];
  for await (const token of seq.evaluate(tokens.slice(-1), { temperature: 0 })) {
    generated.push(token);
    if (generated.length === o.decodeTokens) break;
  }
  if (generated.length !== o.decodeTokens) {
    throw new Error(`a decode run stopped after ${generated.length} tokens (end of generation)`);
  }
  return generated.join();
}

const decodeRates = [];
let firstGenerated = null;
let divergedSequences = 0;
for (let r = 0; r <= o.runs; ++r) {
  for (const [i, seq] of sequences.entries()) {
    await seq.clearHistory();
    await seq.evaluateWithoutGeneratingNewTokens(contextTokens[i].slice(0, -1));
  }
  gatherWholeSteps = o.sequences > 1;
  const t0 = performance.now();
  const generated = await Promise.all(sequences.map((seq, i) => decodeRun(seq, contextTokens[i])));
  const seconds = (performance.now() - t0) / 1000;
  gatherWholeSteps = false;
  if (r === 0) { firstGenerated = generated; continue; }
  const differing = generated.filter((g, i) => g !== firstGenerated[i]).length;
  // Alone, a sequence must repeat itself exactly. Together, llama.cpp's
  // batched steps may round differently from run to run (where each
  // sequence's cells land in the shared cache), and on a random-weight model
  // that can flip a greedy choice; the work per step stays the same.
  if (differing > 0 && o.sequences === 1) {
    throw new Error(`decode run ${r} generated different tokens`);
  }
  divergedSequences = Math.max(divergedSequences, differing);
  decodeRates.push(o.sequences * o.decodeTokens / seconds);
}

const promptRates = [];
for (let r = 0; r <= o.runs; ++r) {
  await sequence.clearHistory();
  const t0 = performance.now();
  await sequence.evaluateWithoutGeneratingNewTokens(promptTokens);
  const seconds = (performance.now() - t0) / 1000;
  if (r > 0) promptRates.push(o.promptTokens / seconds);
}

const decode = summarize(decodeRates);
if (divergedSequences > 0) {
  console.log(`note: in some runs up to ${divergedSequences} of ${o.sequences} sequences ` +
              "generated other tokens than in the warm-up run");
}
const prompt = summarize(promptRates);
console.log(`decode:  ${decode.median.toFixed(2)} tok/s median ` +
            `(${decode.min.toFixed(2)}..${decode.max.toFixed(2)}), ${o.decodeTokens} tokens after ` +
            `${o.context} of context${o.sequences > 1 ? ` in each of ${o.sequences} sequences` : ""}, ` +
            `${o.runs} runs`);
console.log(`prompt:  ${prompt.median.toFixed(1)} tok/s median ` +
            `(${prompt.min.toFixed(1)}..${prompt.max.toFixed(1)}), ${o.promptTokens} tokens, ` +
            `${o.runs} runs`);
await context.dispose();
await model.dispose();
await llama.dispose();
