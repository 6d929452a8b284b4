#!/usr/bin/env bash
# rkubelet's full test run (what CI runs through .ci/run):
#
#   1. system packages (hack/install-deps.sh)
#   2. cargo fmt --check, clippy with -D warnings
#   3. cargo test --workspace (unit and integration tests)
#   4. a private containerd in a temporary directory, the test images, and
#      the end-to-end tests against it (cargo test -p rkubelet --test e2e
#      -- --ignored), which read RKUBELET_E2E_ENDPOINT and
#      RKUBELET_E2E_RUNTIME_DIR
#
# Whatever happens, containerd is stopped and the temporary directory removed
# on exit, so a run leaves nothing behind.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$PWD

if [[ "${CI:-}" == true ]]; then
  export CARGO_TERM_COLOR=never
fi

# A pod network of its own, so a developer's containerd from
# `hack/containerd.sh start` (rkbr0, 10.88.0.0/16) can keep running.
export RKUBELET_CNI_BRIDGE=${RKUBELET_CNI_BRIDGE:-rkbr-e2e}
export RKUBELET_POD_SUBNET=${RKUBELET_POD_SUBNET:-10.89.0.0/16}

START=$SECONDS
stage() {
  printf '\n==> %s  [%ss]\n' "$*" "$((SECONDS - START))"
}

die() { echo "test.sh: error: $*" >&2; exit 1; }

TMP_DIR=""
RUNTIME_DIR=""
cleanup() {
  local rc=$?
  if [[ -n "$RUNTIME_DIR" ]]; then
    "$REPO_ROOT/hack/containerd.sh" stop "$RUNTIME_DIR" ||
      echo "test.sh: warning: stopping containerd in $RUNTIME_DIR failed" >&2
  fi
  if [[ -n "$TMP_DIR" && -d "$TMP_DIR" ]]; then
    if grep -qF " $TMP_DIR/" /proc/mounts; then
      echo "test.sh: warning: mounts remain under $TMP_DIR; not removing it" >&2
    else
      rm -rf --one-file-system "$TMP_DIR"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

stage "install system packages"
hack/install-deps.sh

stage "cargo fmt --check"
cargo fmt --all -- --check

stage "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

stage "cargo test"
cargo test --workspace

stage "start a private containerd"
TMP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/rkubelet-test.XXXXXX")
RUNTIME_DIR="$TMP_DIR/runtime"
hack/containerd.sh start "$RUNTIME_DIR" >/dev/null
echo "containerd on unix://$RUNTIME_DIR/containerd.sock"

stage "import test images"
hack/images.sh "$RUNTIME_DIR/containerd.sock"

stage "end-to-end tests"
RKUBELET_E2E_ENDPOINT="unix://$RUNTIME_DIR/containerd.sock" \
  RKUBELET_E2E_RUNTIME_DIR="$RUNTIME_DIR" \
  cargo test -p rkubelet --test e2e -- --ignored --test-threads=1

stage "done"
