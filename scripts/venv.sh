#!/usr/bin/env bash
# scripts/venv.sh — create (once) and print the path of the trainer's Python venv.
#
# stdout: exactly one line, the venv path. Everything else goes to stderr.
#
# Where: ${TENZRO_VENV_ROOT:-$HOME/.cache/tenzro}/venv-<key>, outside the clone, so torch
# (with its CUDA wheels) is installed once per machine, not per clone. <key> is the first 16
# hex digits of SHA-256 over the bytes of trainer/pyproject.toml followed by the bytes of
# trainer/constraints.txt: changing a pin gives a new venv.
#
# Safe to run concurrently: the build holds an exclusive flock on <venv>.lock. A venv is not
# relocatable (pip writes absolute shebangs), so it cannot be built elsewhere and renamed into
# place; instead it is built in place under the lock and only counts as ready once the marker
# file <venv>/.tenzro-ready exists, which is written last, by an atomic rename. A directory
# without the marker (a crashed or killed build) is deleted and rebuilt.
#
# Reuse from another clone: the venv's dependencies depend only on the key, but the package
# itself is installed editable (`pip install -e trainer`), which points at one clone's path.
# Each run compares <venv>/.tenzro-src with this clone's trainer/ and, when they differ,
# re-runs the cheap `pip install --no-deps --no-build-isolation -e trainer` under the lock, so
# the `tenzro-trainer` entry point follows the clone that last ran this script. Anything that
# must use *this* clone's code even while another clone shares the venv (make test, make demo,
# the benchmarks) also sets PYTHONPATH=<clone>/trainer/src, which Python puts ahead of the
# editable .pth entry — so two clones can use one venv at the same time without crossing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-python3}"
log() { printf 'venv.sh: %s\n' "$*" >&2; }

"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
	{ log "need Python >= 3.11 (set PYTHON=...), found $("$py" --version 2>&1)"; exit 1; }

key="$(cat "$root/trainer/pyproject.toml" "$root/trainer/constraints.txt" | sha256sum | cut -c1-16)"
vroot="${TENZRO_VENV_ROOT:-$HOME/.cache/tenzro}"
venv="$vroot/venv-$key"
src="$root/trainer"

ready() { [[ -f "$venv/.tenzro-ready" && -x "$venv/bin/python" ]]; }
current() { ready && [[ -f "$venv/.tenzro-src" && "$(cat "$venv/.tenzro-src")" == "$src" ]]; }

if current; then
	printf '%s\n' "$venv"
	exit 0
fi

mkdir -p "$vroot"
exec 9>"$venv.lock"
log "waiting for lock $venv.lock"
flock 9

if ! ready; then
	if [[ -e "$venv" ]]; then
		log "removing incomplete venv $venv"
		rm -rf "$venv"
	fi
	log "creating $venv (torch and friends: several minutes the first time)"
	"$py" -m venv "$venv"
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
		-c "$root/trainer/constraints.txt" \
		-e "$src[timeseries,dev,chronos,granite,onnx]" >&2
	printf '%s\n' "$src" >"$venv/.tenzro-src.tmp" && mv -f "$venv/.tenzro-src.tmp" "$venv/.tenzro-src"
	date -u +%FT%TZ >"$venv/.tenzro-ready.tmp" && mv -f "$venv/.tenzro-ready.tmp" "$venv/.tenzro-ready"
	log "ready"
elif ! current; then
	log "pointing the editable install at $src"
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
		--no-build-isolation -e "$src" >&2
	printf '%s\n' "$src" >"$venv/.tenzro-src.tmp" && mv -f "$venv/.tenzro-src.tmp" "$venv/.tenzro-src"
fi
printf '%s\n' "$venv"
