#!/usr/bin/env bash
# Installs what moetier needs to build and test on Debian 12, and nothing that
# is already there. Safe to run any number of times.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev liburing-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3-numpy  # the independent float64 forward pass of tests/interop
  python3-jinja2  # the chat template oracle of tests/interop
  tmux  # drives `moetier run`'s chat as a person would (tests/client/run_chat_tmux_test.py)
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
apt_updated=0
if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq && apt_updated=1
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

# Node.js runs the independent GGUF parser of the interop test. It is optional
# (the test skips without it), and a Node.js from another source that already
# brings npm is used as it is.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup: installing nodejs and npm for the GGUF interop test"
  ((apt_updated)) || "${sudo_cmd[@]}" apt-get update -qq || true
  if ! DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nodejs npm; then
    echo "setup: warning: could not install nodejs/npm; the GGUF interop test will be skipped" >&2
  fi
fi

# The independent GGUF parser used by the interop test (pinned in package.json).
interop_dir="$repo_root/tests/interop"
if [[ -f "$interop_dir/package.json" ]] && command -v npm >/dev/null; then
  if [[ ! -d "$interop_dir/node_modules/@huggingface/gguf" ]]; then
    echo "setup: installing the npm packages of tests/interop"
    if ! (cd "$interop_dir" && npm install --no-audit --no-fund --loglevel=error); then
      echo "setup: warning: npm install failed; the GGUF interop test will be skipped" >&2
    fi
  fi
fi

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: CUDA toolkit found at /usr/local/cuda ($(/usr/local/cuda/bin/nvcc --version | tail -n 2 | head -n 1))"
else
  echo "setup: no CUDA toolkit at /usr/local/cuda; building the CPU parts only"
fi
