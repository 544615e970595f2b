// node llamacpp_logits.mjs MODEL.gguf IDS_FILE OUT.f32
//
// llama.cpp's logits for one sequence (IDS_FILE: comma-separated token ids,
// positions 0..n-1), written as raw little-endian float32, one row of n_vocab
// per position: the layout of moetier-worker --logits-out and of the
// test vectors' M.llamacpp.f32. CPU only, flash attention off, F32 keys and
// values, the whole sequence in one batch, as the shared vectors were made.
// Uses node-llama-cpp's prebuilt binaries; it never downloads or compiles.
import fs from "node:fs";
import path from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [modelPath, idsPath, outPath] = process.argv.slice(2);
if (!modelPath || !idsPath || !outPath) {
  console.error("usage: node llamacpp_logits.mjs MODEL.gguf IDS_FILE OUT.f32");
  process.exit(2);
}
const ids = fs.readFileSync(idsPath, "utf8").split(/[,\s]+/).filter((s) => s !== "").map((s) => {
  const id = Number(s);
  if (!Number.isInteger(id) || id < 0) throw new Error(`${idsPath}: bad token id ${JSON.stringify(s)}`);
  return id;
});
if (ids.length === 0) throw new Error(`${idsPath}: no token ids`);

const llama = await getLlama({
  gpu: false,
  build: "never",
  usePrebuiltBinaries: true,
  skipDownload: true,
  progressLogs: false,
  logLevel: LlamaLogLevel.warn,
});
const model = await llama.loadModel({ modelPath: path.resolve(modelPath), gpuLayers: 0 });
const context = await model.createContext({
  contextSize: ids.length,
  batchSize: ids.length,
  sequences: 1,
  flashAttention: false,
  experimentalKvCacheKeyType: "F32",
  experimentalKvCacheValueType: "F32",
});
if (context.flashAttention !== false) throw new Error("flash attention could not be turned off");

// Greedy sampling with no penalties leaves llama_get_logits_ith's values as they are.
const results = await context.getSequence().controlledEvaluate(
  ids.map((id) => [id, { generateNext: { logits: true } }]));
let nVocab = 0;
let out;
results.forEach((result, pos) => {
  const logits = result?.next?.logits;
  if (logits == null) throw new Error(`no logits at position ${pos}`);
  if (pos === 0) {
    nVocab = logits.size;
    out = new Float32Array(ids.length * nVocab).fill(NaN);
  }
  if (logits.size !== nVocab) throw new Error(`position ${pos}: ${logits.size} logits, not ${nVocab}`);
  for (const [token, value] of logits) out[pos * nVocab + token] = value;
});
if (out.some(Number.isNaN)) throw new Error("a position lacks some vocabulary entries");
if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) throw new Error("needs a little-endian host");
fs.writeFileSync(outPath, Buffer.from(out.buffer));
console.error(`${outPath}: ${ids.length} positions x ${nVocab} logits`);
await context.dispose();
await model.dispose();
await llama.dispose();
