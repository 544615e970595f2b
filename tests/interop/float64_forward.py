#!/usr/bin/python3
"""Independent float64 forward pass of a GGUF MoE model.

Parses the GGUF file, dequantizes every weight to float64 and runs a plain
forward pass over the token ids, one sequence from position 0. The logits are
written as raw little-endian float32, one row of n_vocab values per position
(the layout of moetier-worker's --logits-out). Uses only the Python standard
library and numpy, and no code of the C++ project.

Architectures: qwen3moe, olmoe, llama (with experts, e.g. Mixtral), qwen35moe, qwen3next,
qwen2moe, qwen3vlmoe (text), glm4moe, ernie4_5-moe, gpt-oss.
Tensor types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K,
Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS.

examples:
  float64_forward.py model.gguf --ids 1,2,3 --out logits.f32
  float64_forward.py model.gguf --ids-file model.ids --compare other.f32 --tolerance-of-range 1e-4

With --compare, prints per position max |ours - other| / (row max - row min of
other) and KL(softmax(ours) || softmax(other)), and exits with status 1 when
any position is over the tolerance. Exit status 2 means the model or the
inputs could not be used (unsupported architecture or tensor type, bad file).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import f64_model  # noqa: E402
import logit_compare  # noqa: E402
from gguf_file import GGUFError  # noqa: E402


def parse_ids(text):
    try:
        return [int(t) for t in text.replace("\n", ",").split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"token ids must be comma-separated integers, got {text!r}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="the GGUF model file (a single file, not split)")
    ids = ap.add_mutually_exclusive_group(required=True)
    ids.add_argument("--ids", type=parse_ids, help="input token ids, comma-separated (positions 0..n-1)")
    ids.add_argument("--ids-file", help="a file holding the comma-separated input token ids")
    ap.add_argument("--out", help="write the logits here (raw little-endian float32, n_positions x n_vocab)")
    ap.add_argument("--compare", metavar="OTHER.f32",
                    help="compare the logits with this file of the same layout")
    ap.add_argument("--tolerance-of-range", type=float, default=1e-3, metavar="TOL",
                    help="with --compare: largest allowed max |diff| / row range at any position "
                         "(default 1e-3)")
    ap.add_argument("--quiet", action="store_true", help="with --compare: print only the summary line")
    args = ap.parse_args(argv)
    if not args.out and not args.compare:
        ap.error("nothing to do: give --out and/or --compare")

    try:
        if args.ids_file:
            with open(args.ids_file) as f:
                token_ids = parse_ids(f.read())
        else:
            token_ids = args.ids
        start = time.monotonic()
        model = f64_model.load(args.model)
        logits = model.forward(token_ids)
        elapsed = time.monotonic() - start
    except (f64_model.ModelError, GGUFError, argparse.ArgumentTypeError, OSError) as e:
        print(f"float64_forward: {args.model}: {e}", file=sys.stderr)
        return 2
    print(f"{os.path.basename(args.model)}: {model.arch}, {model.n_layer} layers, "
          f"{len(token_ids)} positions x {model.n_vocab} logits in {elapsed:.1f} s", file=sys.stderr)

    if args.out:
        logits.astype("<f4").tofile(args.out)
    if args.compare:
        try:
            other = logit_compare.read_logits(args.compare, model.n_vocab)
            # Compare with our logits as written (float32), like any consumer of the file.
            rel, kl = logit_compare.compare(logits.astype(np.float32).astype(np.float64), other)
        except (ValueError, OSError) as e:
            print(f"float64_forward: {e}", file=sys.stderr)
            return 2
        lines = []
        ok = logit_compare.report(rel, kl, args.tolerance_of_range, os.path.basename(args.compare), lines.append)
        print("\n".join(lines[-1:] if args.quiet else lines))
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
