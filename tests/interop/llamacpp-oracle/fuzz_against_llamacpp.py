#!/usr/bin/env python3
"""Random model shapes, moetier's logits against llama.cpp's.

Each case draws an architecture and a shape (layers, widths, expert counts
and top-k, heads and KV heads, head size, vocabulary, RoPE base, RoPE
scaling (none, linear or YaRN) and norm epsilon, tied output; for llama
rope frequency factors (rope_freqs.weight); for qwen35moe and qwen3next also the DeltaNet
sizes and the attention interval, for qwen35moe the RoPE sections, for qwen3next the legacy
ssm_in layout now and then, for qwen2moe the shared expert's width, for qwen3vlmoe the
RoPE sections, for glm4moe the leading dense layers and their width, the shared
experts, the routing scale and renormalisation, q/k norm, the nextn blocks and
partial RoPE, for ernie4_5-moe the leading dense layers and their width, the MoE
layer step, the shared expert's width or none, the selection bias and the q/k/v
biases, for gpt-oss the sliding window), writes it with moetier-synth, runs a
seeded random token sequence through llama.cpp (llamacpp_logits.mjs) and
through moetier-worker on the reference and the CPU backend (or, with
--backend float64, through the independent float64 pass, ../float64_forward.py),
and compares every position's logits: max |diff| / row range, and KL. A case
fails past --tolerance; its synth command line is printed so that it can be
made again, and with --keep DIR its files stay there.

The files are F32, so both sides compute in f32 and only rounding separates
them (about 3e-7 of the row range). Quantized files make no sharp test here:
llama.cpp rounds activations to 8 bits for them, which alone moves logits by
1e-2 of the range and flips router near-ties; the block formats are checked
against llama.cpp another way (tests/data/vectors/README.md, mixed-low-bit
and iq-grids-low-bit).
"""

import argparse
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from logit_compare import compare, read_logits  # noqa: E402
import node_llama  # noqa: E402

ARCHS = ("qwen3moe", "qwen35moe", "qwen3next", "llama", "olmoe", "qwen2moe", "qwen3vlmoe",
         "glm4moe", "ernie4_5-moe", "gpt-oss")
BACKENDS = ("reference", "cpu", "float64")
FLOAT64_FORWARD = os.path.join(os.path.dirname(HERE), "float64_forward.py")


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", metavar="DIR",
                   help="moetier build folder (default: build)")
    p.add_argument("--cases", type=int, default=20, metavar="N", help="cases (default 20)")
    p.add_argument("--seed", type=int, default=1, metavar="N",
                   help="seed of the whole campaign (default 1)")
    p.add_argument("--arch", action="append", choices=ARCHS,
                   help="architectures to draw from (repeatable; default all)")
    p.add_argument("--tolerance", type=float, default=1e-4, metavar="X",
                   help="largest max |diff| / row range that passes (default 1e-4)")
    p.add_argument("--backend", action="append", choices=BACKENDS,
                   help="what llama.cpp is compared with: moetier's reference or CPU backend, or "
                        "the float64 pass (repeatable; default reference and cpu)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), metavar="N",
                   help="moetier-worker threads (default: all cores)")
    p.add_argument("--keep", metavar="DIR", help="copy each failing case's files here")
    a = p.parse_args()
    if a.cases < 1:
        p.error("--cases must be at least 1")
    a.arch = a.arch or list(ARCHS)
    a.backend = a.backend or ["reference", "cpu"]
    return a


def draw_shape(rng, arch, float64_only=False):
    """moetier-synth shape flags for one random model of `arch`."""
    heads_kv = rng.choice([1, 2, 4])
    heads = heads_kv * rng.choice([1, 2, 4])
    head_dim = rng.choice([16, 32, 64])
    experts = rng.choice([2, 4, 8, 16])
    flags = {
        "--layers": rng.randint(1, 4),
        "--embd": rng.choice([64, 128, 256]),
        "--experts": experts,
        "--experts-used": rng.randint(1, min(experts, 8)),
        "--expert-ffn": rng.choice([32, 64, 96, 256]),
        "--heads": heads,
        "--heads-kv": heads_kv,
        "--head-dim": head_dim,
        "--vocab": rng.choice([300, 512, 1000, 2048]),
        "--rope-base": rng.choice([1e4, 5e5, 1e6, 1e7]),
        "--rms-eps": rng.choice([1e-6, 1e-5]),
    }
    if arch == "olmoe":
        # llama.cpp's olmoe graph takes queries and keys to be embd wide
        # (attn_q embd x embd, attn_k_norm of embd): no GQA, heads of
        # embd / heads values. So is OLMoE-1B-7B.
        flags["--heads-kv"] = heads
        flags["--head-dim"] = flags["--embd"] // heads
    if arch == "qwen3vlmoe":
        # Pair i lies in sector i mod the sections' sum, which ggml allows
        # up to the head size.
        sections = [rng.randint(0, head_dim // 3) for _ in range(3)]
        sections[rng.randrange(3)] += 1
        flags["--rope-sections"] = ",".join(str(x) for x in sections + [0])
    if arch == "qwen2moe":
        # llama.cpp's qwen2moe reads attn_q as embd x embd.
        flags["--head-dim"] = flags["--embd"] // heads
        flags["--shared-ffn"] = rng.choice([32, 64, 256])
    if arch == "glm4moe":
        # Partial rope as GLM's (half of each head there), any even count
        # short of the head; the nextn blocks are written and never run.
        # At least one shared expert, as every GLM has: without one,
        # llama.cpp's glm4moe graph still calls build_ffn, with no tensors,
        # and adds silu of the FFN input to every MoE layer's output.
        flags.update({
            "--rope-dims": rng.randrange(2, head_dim, 2),
            # At least one layer keeps its experts: moetier refuses a
            # model of dense layers only.
            "--leading-dense-layers": rng.randint(0, min(2, flags["--layers"] - 1)),
            "--dense-ffn": rng.choice([32, 64, 96, 256]),
            "--shared-experts": rng.randint(1, 2),
            "--expert-weights-scale": rng.choice([0, 1, 0.5, 1.8, 2.5]),
            "--nextn-layers": rng.randint(0, 1),
        })
    if arch == "ernie4_5-moe":
        # A step of 2 leaves layers past the dense ones whose expert tensors
        # llama.cpp's graph skips (running silu of the FFN input there),
        # which moetier refuses (every released ERNIE-4.5 has step 1): only
        # the float64 pass, which follows llama.cpp there, draws it. At
        # least one layer runs its experts. The shared width is any, a whole
        # number of experts or none.
        layers = flags["--layers"]
        lead = rng.randint(0, min(2, layers - 1))
        step = rng.randint(1, 2) if float64_only else 1
        if not any((i + 1) % step == 0 for i in range(lead, layers)):
            step = 1
        flags.update({
            "--leading-dense-layers": lead,
            "--moe-layer-step": step,
            "--dense-ffn": rng.choice([32, 64, 96, 256]),
            "--shared-ffn": rng.choice([0, 0, 64, 96, 2 * flags["--expert-ffn"]]),
        })
    if arch == "gpt-oss":
        # Windows from one position (each query sees itself only) to more
        # than most sequences. Without a rope scaling draw below, the tiny
        # preset's YaRN (x4 from 64 positions) stays.
        flags["--sliding-window"] = rng.choice([1, 2, 5, 8, 16, 128])
    if arch in ("qwen35moe", "qwen3next"):
        rope_dims = rng.choice([d for d in (8, 16, 32, 64) if d <= head_dim])
        half = rope_dims // 2
        a = rng.randint(0, half)
        b = rng.randint(0, half - a)
        c = half - a - b
        key_heads = rng.choice([1, 2, 4])
        value_heads = key_heads * rng.choice([1, 2])
        state = rng.choice([16, 32, 64])
        interval = rng.randint(2, 4)
        flags["--layers"] = max(flags["--layers"], interval)
        flags.update({
            "--rope-dims": rope_dims,
            "--rope-sections": f"{a},{b},{c},0",
            "--shared-ffn": rng.choice([32, 64, 256]),
            # llama.cpp needs a DeltaNet layer and an attention layer
            # (interval 2 or more makes layer 0 the first, at least that many
            # layers give the second), and value heads as wide as key heads
            # (inner = value heads x state), as Qwen3.6's are.
            "--full-attention-interval": interval,
            "--ssm-conv-kernel": rng.choice([2, 4]),
            "--ssm-state-size": state,
            "--ssm-group-count": key_heads,
            "--ssm-time-step-rank": value_heads,
            "--ssm-inner-size": value_heads * state,
        })
        if arch == "qwen3next":
            del flags["--rope-sections"]
    if rng.random() < 0.5:
        # Rope scaling, with an original context short enough that the
        # sequences pass it and YaRN's ramp falls inside the rotated pairs.
        flags["--rope-scaling"] = rng.choice(["yarn", "yarn", "linear", "none"])
        flags["--rope-scaling-factor"] = rng.choice([0.5, 2, 4, 8, 32])
        flags["--rope-original-context"] = rng.choice([16, 64, 256, 4096])
        if arch == "gpt-oss" and flags["--rope-scaling"] == "none":
            # llama.cpp's gpt-oss gives its sliding window layers the scale
            # of rope.scaling.factor even when the type is none (it copies
            # the file's scale for them before the context resets it), so
            # such a file would rotate those layers differently from the
            # others. No real file is written that way: none means no factor.
            flags["--rope-scaling-factor"] = 0
            flags["--rope-original-context"] = 0
    args = [str(x) for kv in flags.items() for x in kv]
    # olmoe's and qwen2moe's graphs read output.weight always, gpt-oss's loader requires it.
    if arch not in ("olmoe", "qwen2moe", "gpt-oss") and rng.random() < 0.3:
        args.append("--tied-output")
    if arch == "llama" and rng.random() < 0.5:
        args.append("--rope-freq-factors")
    if arch == "qwen3next" and rng.random() < 0.3:
        args.append("--legacy-ssm-in")
    if arch == "glm4moe":
        args.append(rng.choice(["--qk-norm", "--no-qk-norm"]))
        args.append(rng.choice(["--expert-weights-norm", "--no-expert-weights-norm"]))
    if arch == "ernie4_5-moe":
        args.append(rng.choice(["--selection-bias", "--no-selection-bias"]))
        args.append(rng.choice(["--qkv-bias", "--no-qkv-bias"]))
    return args


def describe_glm4moe(shape):
    """The glm4moe draws of a case, for its result line."""
    def value(flag):
        return shape[shape.index(flag) + 1]
    return (f" dense {value('--leading-dense-layers')} shared {value('--shared-experts')}"
            f" scale {value('--expert-weights-scale')} nextn {value('--nextn-layers')}"
            f" rope {value('--rope-dims')}/{value('--head-dim')} {shape[-2][2:]} {shape[-1][2:]}")


def describe_ernie45moe(shape):
    """The ernie4_5-moe draws of a case, for its result line."""
    def value(flag):
        return shape[shape.index(flag) + 1]
    return (f" dense {value('--leading-dense-layers')}/{value('--layers')}"
            f" step {value('--moe-layer-step')} shared {value('--shared-ffn')}"
            f" {shape[-2][2:]} {shape[-1][2:]}{' tied' if '--tied-output' in shape else ''}")


def run(cmd, what):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}\n"
                           f"{proc.stdout}{proc.stderr}")


def main():
    a = parse_args()
    synth = os.path.join(a.build, "tools", "synth", "moetier-synth")
    worker = os.path.join(a.build, "worker", "moetier-worker")
    tools = [synth] + ([worker] if set(a.backend) - {"float64"} else [])
    for tool in tools:
        if not os.access(tool, os.X_OK):
            sys.exit(f"fuzz_against_llamacpp: {tool} not found; build moetier first")
    node_llama.ensure_installed()
    rng = random.Random(a.seed)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in range(1, a.cases + 1):
            arch = rng.choice(a.arch)
            shape = draw_shape(rng, arch, float64_only=set(a.backend) == {"float64"})
            model = os.path.join(tmp, f"case{case}.gguf")
            synth_cmd = [synth, "--arch", arch, "--quant", "f32", "--seed", str(case),
                         "--quiet", "--out", model] + shape
            ids = None
            try:
                run(synth_cmd, "moetier-synth")
                n_vocab = int(shape[shape.index("--vocab") + 1])
                # Mostly short sequences; one in five long enough that RoPE
                # angles and attention spans go well past a few dozen.
                length = rng.randint(4, 40) if rng.random() < 0.8 else rng.randint(100, 600)
                ids = [rng.randrange(n_vocab) for _ in range(length)]
                ids_path = os.path.join(tmp, f"case{case}.ids")
                with open(ids_path, "w") as f:
                    f.write(",".join(map(str, ids)))
                theirs = os.path.join(tmp, f"case{case}.llamacpp.f32")
                run(node_llama.node_command("llamacpp_logits.mjs", model, ids_path, theirs),
                    "llamacpp_logits.mjs")
                results = []
                for backend in a.backend:
                    ours = os.path.join(tmp, f"case{case}.{backend}.f32")
                    if backend == "float64":
                        cmd = [sys.executable, FLOAT64_FORWARD, model, "--ids-file", ids_path,
                               "--out", ours]
                        run(cmd, "float64_forward.py")
                    else:
                        cmd = [worker, "--standalone", "--backend", backend, "--model", model,
                               "--tokens", ",".join(map(str, ids)), "--logits-out", ours,
                               "--threads", str(a.threads)]
                        run(cmd, f"moetier-worker --backend {backend}")
                    rel, kl = compare(read_logits(ours, n_vocab), read_logits(theirs, n_vocab))
                    results.append((backend, float(np.max(rel)), float(np.mean(kl))))
                ok = all(r <= a.tolerance for _, r, _ in results)
                detail = ", ".join(f"{b} max|diff|/range {r:.2e} mean KL {k:.1e}"
                                   for b, r, k in results)
            except RuntimeError as e:
                ok, detail = False, str(e).strip()
            scaling = ""
            if "--rope-scaling" in shape:
                i = shape.index("--rope-scaling")
                scaling = f" rope {shape[i + 1]} x{shape[i + 3]} from {shape[i + 5]}"
            if "--rope-freq-factors" in shape:
                scaling += " rope_freqs"
            if arch == "glm4moe":
                scaling += describe_glm4moe(shape)
            if arch == "ernie4_5-moe":
                scaling += describe_ernie45moe(shape)
            if arch == "gpt-oss":
                scaling += f" window {shape[shape.index('--sliding-window') + 1]}"
            print(f"case {case} {arch}{scaling} {len(ids) if ids else 0} tokens: "
                  f"{'ok' if ok else 'FAILED'}: {detail}", flush=True)
            if not ok:
                failures += 1
                print(f"  made by: {shlex.join(synth_cmd)}", flush=True)
                if a.keep:
                    os.makedirs(a.keep, exist_ok=True)
                    for name in os.listdir(tmp):
                        if name.startswith(f"case{case}."):
                            shutil.copy(os.path.join(tmp, name), a.keep)
            for name in os.listdir(tmp):
                if name.startswith(f"case{case}."):
                    os.remove(os.path.join(tmp, name))
    print(f"{a.cases - failures} of {a.cases} cases agree within {a.tolerance:g} of the row range")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
