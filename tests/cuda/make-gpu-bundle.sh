#!/usr/bin/env bash
# Builds the GPU programs here and packs them for a GPU host that has CUDA
# (driver, cuBLAS) but none of our other dependencies (gRPC, protobuf, absl,
# gtest, liburing) and no package registry:
#
#   tests/cuda/make-gpu-bundle.sh [--build DIR] [--build-type T] [--arch SM] [--out DIR]
#                                 [--without-data]
#
#   --build DIR  build directory (default build-gpu), configured with CUDA on
#                for --arch
#   --build-type T  CMAKE_BUILD_TYPE (default Release)
#   --arch SM    CUDA architecture to compile for (default 90: H100/H200)
#   --out DIR    the bundle folder (default gpu-bundle); DIR.tar.xz is the one
#                file to move
#   --without-data  leave the test vectors (about 30 MB) out: the GPU host
#                then has them in a checkout (gpu-check.sh --data DIR)
#
# The bundle holds bin/ (every CUDA test, moetier-bench-cuda,
# moetier-bench-cache, moetier-synth, moetier-tracegen, moetier-worker, moetierd, moetier,
# stripped), lib/ (every shared library they need except the C library, the
# loader and the CUDA/driver libraries, which the GPU host has matching its
# driver), data/vectors (the test vectors the CUDA tests read), run
# (`run PROGRAM ARGS` starts a bundled program with lib/ first on the library
# path and the host's CUDA libraries found) and gpu-check.sh, the one script
# to run there. Before packing, every program must start through `run` with
# an empty LD_LIBRARY_PATH.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-gpu"
arch=90
build_type=Release
with_data=1
out="$root/gpu-bundle"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --arch) arch="$2"; shift 2 ;;
    --build-type) build_type="$2"; shift 2 ;;
    --without-data) with_data=0; shift ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "make-gpu-bundle.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$arch" =~ ^[0-9]+$ ]] || { echo "make-gpu-bundle.sh: --arch wants a number such as 90" >&2; exit 2; }
export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || { echo "make-gpu-bundle.sh: nvcc not found (CUDA Toolkit in /usr/local/cuda)" >&2; exit 1; }

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DMOETIER_ENABLE_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
programs=(moetier-bench-cuda moetier-bench-cache moetier-synth moetier-tracegen moetier-worker moetierd
          moetier)
mapfile -t tests < <(sed -n 's/^ *moetier_add_test(\(cuda_[a-z0-9_]*\).*/\1/p' \
                       "$root"/tests/cuda/CMakeLists.txt | sort -u)
[[ ${#tests[@]} -gt 0 ]] || { echo "make-gpu-bundle.sh: no CUDA tests in tests/cuda/CMakeLists.txt" >&2; exit 1; }
ninja -C "$build" "${programs[@]}" "${tests[@]}"

rm -rf "$out" "$out.tar.xz"
mkdir -p "$out/bin" "$out/lib"
# Libraries the GPU host brings itself: the C runtime and loader, and CUDA's
# own (the driver's libcuda must match the host's kernel module).
host_provided='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libcuda\.so|libcudart\.so|libcublas|libcublasLt|libnvidia|libnvrtc|libnvJitLink)'
add_program() {
  local path="$1"
  [[ -x "$path" ]] || { echo "make-gpu-bundle.sh: $path was not built" >&2; exit 1; }
  cp "$path" "$out/bin/"
  strip --strip-unneeded "$out/bin/$(basename "$path")" 2>/dev/null || true
  ldd "$path" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name lib; do
    [[ "$name" =~ $host_provided ]] && continue
    [[ -e "$out/lib/$name" ]] || cp -L "$lib" "$out/lib/$name"
  done
}
for t in "${tests[@]}"; do add_program "$build/tests/cuda/$t"; done
for p in "${programs[@]}"; do add_program "$(find "$build" -name "$p" -type f -perm -u+x | head -1)"; done
if [[ $with_data == 1 ]]; then mkdir -p "$out/data" && cp -r "$root/tests/data/vectors" "$out/data/"; fi
printf '%s\n' "${tests[@]}" > "$out/cuda-tests.txt"
cp "$root/tests/cuda/gpu-check.sh" "$out/"

cat > "$out/run" <<'LAUNCHER'
#!/usr/bin/env bash
# run PROGRAM [ARGS...]: a bundled program, with the bundle's libraries and
# the host's CUDA libraries (BUNDLE_CUDA_LIB, or the usual CUDA folders).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prog="$1"; shift
cuda="${BUNDLE_CUDA_LIB:-}"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
  [[ -z "$cuda" && -n "$(ls "$d"/libcublas.so.* 2>/dev/null)" ]] && cuda="$d"
done
export LD_LIBRARY_PATH="$here/lib${cuda:+:$cuda}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[[ -d "$here/data" ]] && export MOETIER_TEST_DATA_DIR="${MOETIER_TEST_DATA_DIR:-$here/data}"
exec "$here/bin/$prog" "$@"
LAUNCHER
chmod +x "$out/run" "$out/gpu-check.sh"

# Every program must start with nothing but the bundle (and CUDA) to go on.
for p in "${programs[@]}"; do
  if ! env -u LD_LIBRARY_PATH "$out/run" "$p" --help >/dev/null 2>&1; then
    echo "make-gpu-bundle.sh: '$out/run $p --help' does not start:" >&2
    env -u LD_LIBRARY_PATH "$out/run" "$p" --help 2>&1 | head -5 >&2
    exit 1
  fi
done
missing="$(for f in "$out"/bin/*; do LD_LIBRARY_PATH="$out/lib" ldd "$f" | grep 'not found' |
             grep -Ev 'libcuda|libcublas|libcudart|libnvidia' || true; done)"
[[ -z "$missing" ]] || { echo "make-gpu-bundle.sh: unresolved libraries:" >&2; echo "$missing" >&2; exit 1; }
tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
echo "make-gpu-bundle.sh: ${#tests[@]} CUDA tests and ${#programs[@]} programs for sm_$arch," \
     "$(ls "$out/lib" | wc -l) libraries, $(du -h "$out.tar.xz" | cut -f1) in $out.tar.xz"
