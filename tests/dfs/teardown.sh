#!/usr/bin/env bash
# Undo tests/dfs/setup.sh: unmount every client (lazily if busy or dead), stop the
# clients and the servers (by their pid files only: TERM, then KILL after 3 s), delete
# the bridge, namespaces and veths, remove the state dir. Safe to run twice or after a
# partial setup. Leaves nothing mounted or running.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/dfs/common.sh
. "$HERE/common.sh"

# 1. clients
for mp in "$STATE"/mnt/*; do
  [ -d "$mp" ] || continue
  bash "$HERE/client.sh" down "$(basename "$mp")" 2>/dev/null || true
done

# anything else still mounted under the state dir (a dead crash victim, say)
for _ in 1 2 3; do
  left=$(awk -v s="$STATE/" 'index($2, s) == 1 {print $2}' /proc/self/mounts)
  [ -z "$left" ] && break
  for m in $left; do umount -l "$m" 2>/dev/null || fusermount3 -u -z "$m" 2>/dev/null || true; done
  sleep 0.2
done

# 2. servers, by pid file
pids=()
for f in $(find "$STATE"/ceph "$STATE"/gluster -name '*.pid' 2>/dev/null); do
  [ -f "$f" ] || continue
  p=$(cat "$f" 2>/dev/null)
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null && { kill "$p" 2>/dev/null; pids+=("$p"); }
done
for _ in $(seq 30); do
  alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  [ $alive = 0 ] && break; sleep 0.1
done
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null; done
for p in "${pids[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.05; done; done

# 3. network
for ns in "$NS_B" "$NS_C"; do
  ip netns list 2>/dev/null | grep -qw "^$ns" && ip netns del "$ns"
done
for v in "$VETH_B" "$VETH_C" "$BR"; do
  ip link show "$v" >/dev/null 2>&1 && { ip link del "$v" 2>/dev/null || true; }
done

# 4. state
if grep -q " $STATE/" /proc/self/mounts; then
  log "mounts still present under $STATE; leaving it in place"
  exit 1
fi
rm -rf --one-file-system "$STATE"
log "teardown done"
