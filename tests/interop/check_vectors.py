#!/usr/bin/python3
"""Runs float64_forward.py on every test vector M.gguf of a folder that has
M.ids and M.exact.f32 beside it, and compares its logits with M.exact.f32.

usage: check_vectors.py [--vectors DIR] [--tolerance-of-range TOL]

Fails when any file is over the tolerance at any position, or when the folder
holds no vector at all. Exit status 77 (the ctest skip code) when numpy is
missing for this python3.
"""
import argparse
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vectors", default=str(HERE.parent / "data" / "vectors"),
                    help="folder of M.gguf, M.ids, M.exact.f32 (default: tests/data/vectors)")
    ap.add_argument("--tolerance-of-range", type=float, default=1e-4, metavar="TOL",
                    help="largest allowed max |diff| / row range at any position (default 1e-4)")
    args = ap.parse_args()

    try:
        import numpy  # noqa: F401
    except ImportError:
        print(f"SKIPPED: numpy is not installed for {sys.executable}", file=sys.stderr)
        return 77

    folder = pathlib.Path(args.vectors)
    models = sorted(p for p in folder.glob("*.gguf")
                    if p.with_suffix(".ids").exists() and p.with_suffix(".exact.f32").exists())
    if not models:
        print(f"check_vectors: no M.gguf with M.ids and M.exact.f32 in {folder}", file=sys.stderr)
        return 1

    failed = []
    for model in models:
        start = time.monotonic()
        cmd = [sys.executable, str(HERE / "float64_forward.py"), str(model),
               "--ids-file", str(model.with_suffix(".ids")),
               "--compare", str(model.with_suffix(".exact.f32")),
               "--tolerance-of-range", repr(args.tolerance_of_range), "--quiet"]
        run = subprocess.run(cmd, capture_output=True, text=True,
                             env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        summary = run.stdout.strip() or run.stderr.strip()
        print(f"{model.name}: {summary} [{time.monotonic() - start:.1f} s]")
        if run.returncode != 0:
            if run.stderr.strip() and run.stderr.strip() != summary:
                print(run.stderr.strip())
            failed.append(model.name)
    print(f"{len(models) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
