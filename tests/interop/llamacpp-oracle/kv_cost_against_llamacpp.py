#!/usr/bin/env python3
"""What a quantized KV cache costs in logits, in moetier and in llama.cpp.

For each model: the same --context seeded random token ids, run once per KV
cache type by moetier-worker (--tokens ... --logits-out) and by
llamacpp_logits.mjs, keys and values in that type; every position's logits
are compared with the same engine's f16-cache logits. Prints the mean and
worst KL(f16 || type) and the top-1 agreement of each engine and type.

llama.cpp runs with flash attention on (it needs it for quantized values),
for every type alike; moetier with --activations as given (q8, llama.cpp's
own 8-bit activations, by default).
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from gguf_file import GGUFFile  # noqa: E402
from logit_compare import compare, read_logits  # noqa: E402
import node_llama  # noqa: E402

TYPES = ("q8_0", "q4_0")


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", required=True, metavar="FILE",
                   help="GGUF model (repeat for several)")
    p.add_argument("--build", default="build", metavar="DIR",
                   help="moetier build folder (default: build)")
    p.add_argument("--context", type=int, default=2048, metavar="N",
                   help="tokens in the sequence (default 2048)")
    p.add_argument("--seed", type=int, default=1, metavar="N",
                   help="seed of the token ids (default 1)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), metavar="N",
                   help="moetier-worker threads (default: all cores)")
    p.add_argument("--activations", default="q8", choices=["q8", "q8x2"],
                   help="moetier's activation format (default q8, llama.cpp's)")
    a = p.parse_args()
    if a.context < 2:
        p.error("--context must be at least 2")
    for m in a.model:
        if not os.path.isfile(m):
            p.error(f"--model: no such file: {m}")
    return a


def n_vocab_of(path):
    """The vocabulary size: token_embd.weight's second dimension."""
    tensor = GGUFFile(path).tensors.get("token_embd.weight")
    if tensor is None:
        sys.exit(f"kv_cost_against_llamacpp: {path}: no token_embd.weight")
    return int(tensor.ne[1])


def main():
    a = parse_args()
    worker = os.path.join(a.build, "worker", "moetier-worker")
    if not os.access(worker, os.X_OK):
        sys.exit(f"kv_cost_against_llamacpp: {worker} not found; build moetier first")
    node_llama.ensure_installed()
    print(f"{a.context} seeded random tokens (seed {a.seed}); KL(f16 cache || type) over every "
          f"position; moetier activations {a.activations}, llama.cpp flash attention on")
    print(f"{'model':32s} {'engine':9s} {'type':5s} {'mean KL':>9s} {'worst KL':>9s} {'top-1':>6s}")
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.model:
            files = {}
            for engine in ("moetier", "llama.cpp"):
                for kv in ("f16",) + TYPES:
                    out = os.path.join(tmp, f"{engine}-{kv}.f32")
                    files[engine, kv] = out
            n_vocab = n_vocab_of(model)
            rng = random.Random(a.seed)
            ids = [rng.randrange(n_vocab) for _ in range(a.context)]
            ids_path = os.path.join(tmp, "seq.ids")
            with open(ids_path, "w") as f:
                f.write(",".join(map(str, ids)))
            for kv in ("f16",) + TYPES:
                subprocess.run(node_llama.node_command("llamacpp_logits.mjs", model, ids_path,
                                                       files["llama.cpp", kv], "--cache-type", kv,
                                                       "--flash-attention"),
                               check=True, stderr=subprocess.DEVNULL)
                subprocess.run([worker, "--standalone", "--model", model, "--tokens",
                                ",".join(map(str, ids)), "--logits-out", files["moetier", kv],
                                "--ctx", str(a.context), "--threads", str(a.threads),
                                "--activations", a.activations, "--cache-type-k", kv,
                                "--cache-type-v", kv], check=True, stdout=subprocess.DEVNULL)
            for engine in ("moetier", "llama.cpp"):
                base = read_logits(files[engine, "f16"], n_vocab)
                for kv in TYPES:
                    other = read_logits(files[engine, kv], n_vocab)
                    _, kl = compare(base, other)
                    top1 = float(np.mean(np.argmax(base, axis=1) == np.argmax(other, axis=1)))
                    print(f"{os.path.basename(model):32s} {engine:9s} {kv:5s} {np.mean(kl):9.2e} "
                          f"{np.max(kl):9.2e} {top1:6.3f}", flush=True)


if __name__ == "__main__":
    main()
