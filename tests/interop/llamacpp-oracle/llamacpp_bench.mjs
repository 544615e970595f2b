// node llamacpp_bench.mjs --model FILE [--threads N] [--runs N] [--context N]
//     [--decode-tokens N] [--prompt-tokens N] [--batch N] [--cache-type T]
//
// llama.cpp's CPU decode and prompt speed on a GGUF file, timed the way
// moetier-bench-cpu times the moetier engine, so that the two can be put side
// by side (bench_against_llamacpp.sh does):
// - decode: after --context random tokens, --decode-tokens greedy steps, one
//   forward pass each; a warm-up run first, then --runs timed ones, each on a
//   cleared sequence, and every run must generate the same tokens;
// - prompt: --prompt-tokens random tokens in batches of --batch, on a cleared
//   sequence, a warm-up run first.
// Prints the medians as `decode: X tok/s median (min..max) ...` and
// `prompt: Y tok/s median ...` lines, the format of moetier-bench-cpu.
// Uses node-llama-cpp's prebuilt CPU binaries (the best variant this
// processor supports); it never downloads or compiles.
import path from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const usage = `usage: node llamacpp_bench.mjs --model FILE [options]
  --model FILE          GGUF model
  --threads N           threads (default: all cores)
  --runs N              timed runs per measurement, after one warm-up (default 5)
  --context N           tokens in the cache when decoding starts (default 16)
  --decode-tokens N     tokens generated per decode run (default 32)
  --prompt-tokens N     tokens per prompt run (default 256)
  --batch N             prompt tokens per forward pass (default 256)
  --cache-type T        KV cache type for keys and values: f32, f16, q8_0, q4_0
                        (default f16, llama.cpp's)`;

function parseArgs(argv) {
  const o = { model: null, threads: 0, runs: 5, context: 16, decodeTokens: 32, promptTokens: 256,
              batch: 256, cacheType: "f16" };
  const numeric = { "--threads": "threads", "--runs": "runs", "--context": "context",
                    "--decode-tokens": "decodeTokens", "--prompt-tokens": "promptTokens",
                    "--batch": "batch" };
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
  if (o.runs < 1 || o.context < 1 || o.decodeTokens < 1 || o.promptTokens < 1 || o.batch < 1) {
    fail("--runs, --context, --decode-tokens, --prompt-tokens and --batch must be at least 1");
  }
  const kvTypes = { f32: "F32", f16: "F16", q8_0: "Q8_0", q4_0: "Q4_0" };
  if (!(o.cacheType in kvTypes)) fail(`--cache-type: ${o.cacheType} is not one of f32, f16, q8_0, q4_0`);
  o.kvType = kvTypes[o.cacheType];
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
const llama = await getLlama({
  gpu: false,
  build: "never",
  usePrebuiltBinaries: true,
  skipDownload: true,
  progressLogs: false,
  logLevel: LlamaLogLevel.warn,
  ...(o.threads > 0 ? { maxThreads: o.threads } : {}),
});
const model = await llama.loadModel({ modelPath: path.resolve(o.model), gpuLayers: 0 });
const context = await model.createContext({
  contextSize: Math.max(o.promptTokens, o.context + o.decodeTokens) + 16,
  batchSize: o.batch,
  sequences: 1,
  ...(o.threads > 0 ? { threads: { ideal: o.threads, min: o.threads } } : {}),
  experimentalKvCacheKeyType: o.kvType,
  experimentalKvCacheValueType: o.kvType,
});
const sequence = context.getSequence();
const embedding = model.fileInfo.fullTensorInfo?.find((t) => t.name === "token_embd.weight");
const nVocab = embedding == null ? NaN : Number(embedding.dimensions[1]);
if (!Number.isInteger(nVocab) || nVocab < 2) throw new Error(`${o.model}: no token_embd.weight to size the vocabulary by`);
console.log(`llama.cpp: model ${o.model}, ${context.currentThreads} threads, ` +
            `KV ${o.kvType}, flash attention ${context.flashAttention ? "on" : "off"}, ` +
            `batch ${o.batch}`);

const contextTokens = randomTokens(o.context, nVocab, 1234);
const promptTokens = randomTokens(o.promptTokens, nVocab, 5678);

const decodeRates = [];
let firstGenerated = null;
for (let r = 0; r <= o.runs; ++r) {
  await sequence.clearHistory();
  await sequence.evaluateWithoutGeneratingNewTokens(contextTokens.slice(0, -1));
  const generated = [];
  const t0 = performance.now();
  // The first token yielded took one forward pass over the context's last
  // token, each later one a pass over the token before it: decodeTokens passes.
  for await (const token of sequence.evaluate(contextTokens.slice(-1), { temperature: 0 })) {
    generated.push(token);
    if (generated.length === o.decodeTokens) break;
  }
  const seconds = (performance.now() - t0) / 1000;
  if (generated.length !== o.decodeTokens) {
    throw new Error(`decode run ${r} stopped after ${generated.length} tokens (end of generation)`);
  }
  if (r === 0) { firstGenerated = generated; continue; }
  if (generated.join() !== firstGenerated.join()) {
    throw new Error(`decode run ${r} generated different tokens`);
  }
  decodeRates.push(o.decodeTokens / seconds);
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
const prompt = summarize(promptRates);
console.log(`decode:  ${decode.median.toFixed(2)} tok/s median ` +
            `(${decode.min.toFixed(2)}..${decode.max.toFixed(2)}), ${o.decodeTokens} tokens after ` +
            `${o.context} of context, ${o.runs} runs`);
console.log(`prompt:  ${prompt.median.toFixed(1)} tok/s median ` +
            `(${prompt.min.toFixed(1)}..${prompt.max.toFixed(1)}), ${o.promptTokens} tokens, ` +
            `${o.runs} runs`);
await context.dispose();
await model.dispose();
await llama.dispose();
