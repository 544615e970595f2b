#!/usr/bin/python3
"""Checks moetier's fp32 reference backend against the independent float64
pass (float64_forward.py) on models that moetier-synth writes.

For every case it writes a synthetic GGUF with moetier-synth, runs
`moetier-worker --standalone --backend reference --tokens ... --logits-out`
on it, runs the float64 pass on the same ids, and compares the two logit
files per position (max |diff| / row range, and KL).

A case is one string: "PRESET QUANT ARCH [extra moetier-synth flags...]",
e.g. "tiny q4_k_m qwen3moe" or "tiny q8_0 qwen3moe --embd 48 --tied-output".
ARCH is checked against the general.architecture of the written file. It is
passed to moetier-synth as --arch when moetier-synth has that flag; without
it only moetier-synth's own architecture (qwen3moe) can be asked for.

usage: check_reference.py --worker PATH --synth PATH --case "tiny f32 qwen3moe" [--case ...]
Exit status 77 (the ctest skip code) when numpy is missing for this python3.
"""
import argparse
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SYNTH_DEFAULT_ARCH = "qwen3moe"  # what moetier-synth writes without --arch


def run(cmd, what):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}\n"
                           f"{proc.stdout}{proc.stderr}")
    return proc


def synth_has_arch_flag(synth):
    proc = subprocess.run([synth, "--help"], capture_output=True, text=True)
    return "--arch" in proc.stdout + proc.stderr


def token_ids(n_vocab, count, seed):
    """A fixed pseudo-random id sequence, the same on every run."""
    state = seed * 2654435761 + 12345
    ids = []
    for _ in range(count):
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        ids.append((state >> 33) % n_vocab)
    return ids


def check_case(case, index, args, work, has_arch_flag):
    import f64_model
    import logit_compare

    fields = shlex.split(case)
    if len(fields) < 3:
        raise ValueError(f"case {case!r}: expected 'PRESET QUANT ARCH [synth flags...]'")
    preset, quant, arch, extra = fields[0], fields[1], fields[2], fields[3:]
    label = " ".join(fields)
    stem = f"case{index}-{preset}-{quant}-{arch}"
    model = os.path.join(work, stem + ".gguf")
    logits = os.path.join(work, stem + ".f32")

    synth = [args.synth, "--preset", preset, "--quant", quant, "--seed", str(args.seed + index),
             "--out", model, "--quiet"]
    if has_arch_flag:
        synth += ["--arch", arch]
    elif arch != SYNTH_DEFAULT_ARCH:
        raise ValueError(f"case {label!r}: this moetier-synth has no --arch flag and writes only "
                         f"{SYNTH_DEFAULT_ARCH}")
    run(synth + extra, "moetier-synth")

    m = f64_model.load(model)
    if m.arch != arch:
        raise ValueError(f"case {label!r}: moetier-synth wrote general.architecture {m.arch!r}")
    ids = token_ids(m.n_vocab, args.positions, args.seed + index)
    run([args.worker, "--standalone", "--model", model, "--backend", "reference",
         "--tokens", ",".join(map(str, ids)), "--logits-out", logits], "moetier-worker")

    ours = m.forward(ids).astype("<f4").astype("float64")
    reference = logit_compare.read_logits(logits, m.n_vocab)
    if reference.shape[0] != len(ids):
        raise ValueError(f"case {label!r}: the reference wrote {reference.shape[0]} rows for {len(ids)} ids")
    rel, kl = logit_compare.compare(reference, ours)
    types = sorted({t.type_name for t in m.gguf.tensors.values()})
    print(f"[{label}] {m.n_layer} layers, tensor types {', '.join(types)}, {len(ids)} positions")
    lines = []
    ok = logit_compare.report(rel, kl, args.tolerance_of_range, f"[{label}] reference vs float64", lines.append)
    print("\n".join(lines if args.verbose or not ok else lines[-1:]))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", required=True, help="path of the moetier-worker binary")
    ap.add_argument("--synth", required=True, help="path of the moetier-synth binary")
    ap.add_argument("--case", action="append", required=True, metavar="'PRESET QUANT ARCH [FLAGS]'",
                    help="one model to check; repeat for more")
    ap.add_argument("--seed", type=int, default=11, help="seed of the first case; case i uses seed+i (default 11)")
    ap.add_argument("--positions", type=int, default=24, help="token ids per case (default 24)")
    ap.add_argument("--tolerance-of-range", type=float, default=1e-3, metavar="TOL",
                    help="largest allowed max |reference - float64| / row range at any position (default 1e-3)")
    ap.add_argument("--work-dir", help="keep the generated files here instead of a temporary folder")
    ap.add_argument("--verbose", action="store_true", help="print every position, not only the summary")
    args = ap.parse_args()

    try:
        import numpy  # noqa: F401
    except ImportError:
        print(f"SKIPPED: numpy is not installed for {sys.executable}", file=sys.stderr)
        return 77
    for tool in (args.worker, args.synth):
        if not os.access(tool, os.X_OK):
            print(f"check_reference: {tool} is not an executable (build moetier-worker and moetier-synth)",
                  file=sys.stderr)
            return 1

    has_arch_flag = synth_has_arch_flag(args.synth)
    failed = []
    with tempfile.TemporaryDirectory(prefix="moetier-f64-") as tmp:
        work = args.work_dir or tmp
        os.makedirs(work, exist_ok=True)
        for i, case in enumerate(args.case):
            try:
                ok = check_case(case, i, args, work, has_arch_flag)
            except Exception as e:  # a failed case is reported, the others still run
                print(f"[{case}] FAILED: {e}")
                ok = False
            if not ok:
                failed.append(case)
    print(f"{len(args.case) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
