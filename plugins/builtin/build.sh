#!/usr/bin/env bash
# Builds the built-in plugins reproducibly: same sources + same clang = same bytes.
# Usage: plugins/builtin/build.sh [OUTDIR]   (default: plugins/builtin/wasm)
# Needs clang and wasm-ld (Debian bookworm: apt-get install -y clang-14 lld-14, or `make tools`) and Go.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$here/wasm}"
mkdir -p "$out"
CLANG="${CLANG:-$(command -v clang-14 || echo clang)}"  # the pinned clang (wasm/TOOLCHAIN)
# Flags: wasm32, -O3, SIMD128 and bulk memory (WebAssembly 2.0), no libc, no FP
# contraction, no debug info, everything stripped (the manifest is appended after),
# paths and dates kept out of the output.
FLAGS=(--target=wasm32 -O3 -msimd128 -mbulk-memory -mnontrapping-fptoint -msign-ext
  -ffreestanding -nostdlib -ffp-contract=off -fno-ident -g0
  -Wall -Wno-unused-function -Werror
  "-ffile-prefix-map=$root=." -Wl,--no-entry -Wl,--strip-all -Wl,-z,stack-size=1048576)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go build -o "$tmp/addmanifest" ./plugins/internal/addmanifest)
for src in "$here"/src/*.c; do
  stem="$(basename "$src" .c)"
  "$CLANG" "${FLAGS[@]}" -o "$tmp/$stem.wasm" "$src"
  "$tmp/addmanifest" "$tmp/$stem.wasm" "$here/src/$stem.manifest.json" "$out/$stem.wasm"
done
"$CLANG" --version | head -1 > "$out/TOOLCHAIN"
