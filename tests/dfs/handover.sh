#!/usr/bin/env bash
# Measures one cross-host hand-over of the write lock on a rig set up by setup.sh, and
# where its time goes: host B (tests/netfs/host.sh, through client b) holds the write
# lock for 1 s; host A (client a) asks meanwhile and waits. Both rwdir processes run
# under strace -f -tt -T; prints B's unlink of .master_lock, A's attempts at it after
# that (syscall, result) and A's grant, so that a wait on a stale cache shows as
# attempts that fail after the name was already gone at the server.
#
#   eval "$(tests/dfs/setup.sh gluster)"; tests/dfs/handover.sh [ROUNDS]; tests/dfs/teardown.sh
#
# Needs strace (installed with apt-get if missing) and the rwdir binary
# ($RWDIR_BIN, default: target/debug/rwdir of $CARGO_TARGET_DIR or the repository).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${NETFS_A:?run setup.sh first}" "${NETFS_B:?run setup.sh first}"
ROUNDS=${1:-5}
BIN=${RWDIR_BIN:-${CARGO_TARGET_DIR:-$HERE/../../target}/debug/rwdir}
[ -x "$BIN" ] || { echo "no rwdir binary at $BIN (cargo build -p rwdir-cli)" >&2; exit 1; }
command -v strace >/dev/null 2>&1 || {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends strace >&2; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
D=handover-$$
mkdir -p "$NETFS_A/$D"
for r in $(seq "$ROUNDS"); do
  rm -f "$OUT"/*
  bash "$HERE/../netfs/host.sh" hostb --boot-id random -- \
    strace -f -tt -T -o "$OUT/b.trace" "$BIN" write "$NETFS_B/$D" -- \
    sh -c "touch $OUT/b.in; sleep 1" &
  bpid=$!
  for _ in $(seq 200); do [ -e "$OUT/b.in" ] && break; sleep 0.01; done
  strace -f -tt -T -o "$OUT/a.trace" "$BIN" write --timeout 30 "$NETFS_A/$D" -- \
    sh -c "date +%H:%M:%S.%N > $OUT/a.in"
  wait "$bpid"
  rel=$(grep -E 'unlink(at)?\(.*\.master_lock"' "$OUT/b.trace" | tail -1 | awk '{print $2}')
  got=$(cut -c1-15 "$OUT/a.in")
  echo "round $r: B removed .master_lock at $rel; A's COMMAND ran at $got"
  # A's calls on .master_lock after B's removal, with their results
  awk -v t="$rel" '$2 >= t && /master_lock/ {
      r = $0; sub(/^[0-9]+ /, "", r); print "   A " substr(r, 1, 150) }' "$OUT/a.trace" | head -12
  n=$(awk -v t="$rel" '$2 >= t && /master_lock/ && /EEXIST/' "$OUT/a.trace" | wc -l)
  echo "   A: $n EEXIST on .master_lock after B removed it"
done
rm -rf "${NETFS_A:?}/$D"
