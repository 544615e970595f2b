#!/usr/bin/env python3
"""Checks that no dependency in the source tree runs back up (DESIGN.md,
"Dependency rules the tree should make visible").

Every quoted #include of every C++/CUDA source is resolved against the
include roots CMake gives its folder, and the file it names must lie in a
folder the rules allow:

  base/                          nothing of ours
  proto/, gguf/                  base/ (gguf/ also its own); never each other's runtime
  worker/backend/<cpu|cuda>/     kernels: base/, gguf/tensor/ and their own backend only
  worker/model/                  base/, gguf/, worker/model/
  daemon/                        daemon/, proto/, gguf/, base/ (never worker/)
  worker/                        worker/, proto/, gguf/, base/ (never daemon/)
  client/                        client/, base/, the generated gRPC API and proto/request/
                                 (the request settings every edge shares) only

Whole-model benchmark programs (daemon/bench/) may use the tests' model
writers. Exits 1 listing every violation.

usage: check_dependencies.py REPO_ROOT
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".h", ".cc", ".cu", ".cuh", ".inc")


def roots_for(rel):
    """Include roots a file under `rel` (a path relative to the repo) sees."""
    parts = rel.parts
    roots = ["", "proto", "worker", "tools"]
    if parts[0] == "daemon":
        roots.append("daemon")
        if parts[:2] == ("daemon", "bench"):
            roots.append("tests/daemon")
    if parts[0] == "client":
        roots.append("client")
    if parts[0] == "tests":
        roots += ["daemon", "client", str(pathlib.Path(*parts[:2]))]
    # Headers next to the including file.
    roots.append(str(rel.parent))
    return roots


def allowed(rel, target):
    """Whether the file at `rel` may include the repo file `target`."""
    src, dst = rel.parts, target.parts
    top = dst[0]
    if src[0] == "base":
        return top == "base"
    if src[0] == "proto":
        return top in ("proto", "base")
    if src[0] == "gguf":
        if dst[:2] == ("gguf", "writer") and src[:2] != ("gguf", "writer"):
            return False  # the runtime format library never writes files
        return top in ("gguf", "base")
    if src[:2] == ("worker", "backend"):
        backend = src[:3]
        return top == "base" or dst[:2] == ("gguf", "tensor") or dst[:3] == backend
    if src[:2] == ("worker", "model"):
        return top in ("base", "gguf") and dst[:2] != ("gguf", "writer") or dst[:2] == ("worker", "model")
    if src[0] == "daemon":
        if src[:2] == ("daemon", "bench") and top == "tests":
            return True
        return top in ("daemon", "proto", "gguf", "base") and dst[:2] != ("gguf", "writer")
    if src[0] == "worker":
        return top in ("worker", "proto", "gguf", "base") and dst[:2] != ("gguf", "writer")
    if src[0] == "client":
        return top in ("client", "base") or dst[:2] == ("proto", "request")
    return True  # tools/ and tests/ may use anything


EXTERNAL = ("absl/", "grpcpp/", "grpc/", "google/", "gtest/", "gmock/", "benchmark/", "liburing",
            "nlohmann/", "httplib")


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    violations = []
    checked = 0
    for path in sorted(root.rglob("*")):
        if path.suffix not in SOURCES or not path.is_file():
            continue
        rel = path.relative_to(root)
        if rel.parts[0] not in ("base", "proto", "gguf", "daemon", "worker", "client"):
            continue
        text = path.read_text(errors="replace")
        for name in INCLUDE.findall(text):
            checked += 1
            target = None
            for r in roots_for(rel):
                candidate = root / r / name
                if candidate.is_file():
                    target = candidate.relative_to(root)
                    break
            if target is None:
                if name.startswith(EXTERNAL):
                    continue
                if name.endswith(".pb.h"):
                    # Generated code: the client speaks the gRPC API only.
                    if rel.parts[0] == "client" and name.startswith("moetier/worker/"):
                        violations.append(f"{rel}: includes generated {name}")
                    continue
                violations.append(f"{rel}: cannot resolve \"{name}\"")
                continue
            if not allowed(rel, target):
                violations.append(f"{rel}: includes {target}")
    for v in violations:
        print(v)
    if violations:
        print(f"{len(violations)} includes break the dependency rules")
        return 1
    print(f"{checked} includes checked; no dependency runs back up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
