#!/usr/bin/env bash
# Installs what moetier needs on Debian 12, and nothing that is already there.
# Safe to run any number of times.
#   deploy/setup.sh           what building and running needs
#   deploy/setup.sh --tests   also what the test suite needs (GoogleTest, the
#                             independent oracles in Python and Node.js, tmux)
# As root it installs directly; as a user it uses sudo; without either it
# prints the command to run and exits 1.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
with_tests=0
case "${1:-}" in
  "") ;;
  --tests) with_tests=1 ;;
  -h|--help) sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup: unknown argument '$1' (use --tests, or nothing)" >&2; exit 2 ;;
esac

build_packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev liburing-dev
  libcpp-httplib-dev nlohmann-json3-dev  # the daemon's HTTP (OpenAI-compatible) API
)
test_packages=(
  libgtest-dev libgmock-dev
  python3-numpy   # the independent float64 forward pass of tests/interop
  python3-regex   # llama.cpp's pre-tokenizer regexes, the oracle of tests/interop/check_pre_tokenizers.py
  python3-jinja2  # the chat template oracle of tests/interop
  tmux            # drives `moetier run`'s interactive chat as a person would
  python3-grpcio python3-protobuf  # the API from a client that is not ours
  python3-prometheus-client  # parses GET /metrics as Prometheus does
  dpkg-dev file   # cpack -G DEB: dpkg-shlibdeps for Depends, file to find the programs
  help2man        # man pages from each program's --help
)

packages=("${build_packages[@]}")
((with_tests)) && packages+=("${test_packages[@]}")

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

# Runs apt-get as root: directly, through sudo, or not at all (then it says
# exactly what to run and fails).
apt_updated=0
apt_install() {
  local runner=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then
      runner=(sudo)
    else
      echo "setup: these Debian packages are missing: $*" >&2
      echo "setup: this user is not root and sudo is not installed; as root, run:" >&2
      echo "  apt-get update && apt-get install -y --no-install-recommends $*" >&2
      echo "setup: then run this script again." >&2
      exit 1
    fi
  fi
  echo "setup: installing $*"
  if ((!apt_updated)); then
    "${runner[@]}" apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive "${runner[@]}" apt-get install -y -qq --no-install-recommends "$@"
}

missing=()
for pkg in "${packages[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done
if ((${#missing[@]} > 0)); then
  apt_install "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

if ((with_tests)); then
  # Node.js runs the independent GGUF parser and tokenizers of the interop
  # tests. They skip without it; a Node.js from another source that already
  # brings npm is used as it is.
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "setup: nodejs and npm are for the interop tests"
    apt_install nodejs npm ||
      echo "setup: warning: could not install nodejs/npm; the interop tests that need them will be skipped" >&2
  fi
  # The independent GGUF parser of the interop test, pinned in package.json.
  interop_dir="$repo_root/tests/interop"
  if command -v npm >/dev/null && [[ ! -d "$interop_dir/node_modules/@huggingface/gguf" ]]; then
    echo "setup: installing the npm packages of tests/interop"
    (cd "$interop_dir" && npm install --no-audit --no-fund --loglevel=error) ||
      echo "setup: warning: npm install failed; the GGUF interop test will be skipped" >&2
  fi
  # The official OpenAI and Anthropic clients of the HTTP API tests, pinned in package.json.
  http_clients_dir="$repo_root/tests/http/clients"
  if command -v npm >/dev/null && { [[ ! -d "$http_clients_dir/node_modules/openai" ]] ||
                                    [[ ! -d "$http_clients_dir/node_modules/@anthropic-ai/sdk" ]]; }; then
    echo "setup: installing the npm packages of tests/http/clients"
    (cd "$http_clients_dir" && npm install --no-audit --no-fund --loglevel=error) ||
      echo "setup: warning: npm install failed; the HTTP client tests will be skipped" >&2
  fi
fi

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: CUDA toolkit found at /usr/local/cuda ($(/usr/local/cuda/bin/nvcc --version | tail -n 2 | head -n 1))"
else
  echo "setup: no CUDA toolkit at /usr/local/cuda; building the CPU parts only"
fi
