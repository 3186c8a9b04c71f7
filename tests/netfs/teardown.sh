#!/usr/bin/env bash
# Adapted from the team's reference rig (shared/netfs/teardown.sh): also removes host C's
# netns and veth (see setup.sh here).
# Undo netfs/setup.sh: unmount every rig mount, stop the rig's sshd (by the
# pid in its pid file only), delete the rig's network namespaces and veths,
# remove the state dir.  Safe to run twice or after a partial setup.
#   netfs/teardown.sh [--keep-state]
set -uo pipefail
log() { printf 'netfs-teardown: %s\n' "$*" >&2; }

KEEP=0
[ "${1:-}" = --keep-state ] && KEEP=1
STATE=${RWDIR_NETFS_DIR:-${TMPDIR:-/tmp}/rwdir-netfs}
[ -d "$STATE" ] || { log "no state dir; nothing to do"; exit 0; }
STATE=$(cd "$STATE" && pwd -P)

# 1. mounts (lazy unmount if a process still sits in one)
for mp in "$STATE"/mnt/*; do
  [ -d "$mp" ] || continue
  if mountpoint -q "$mp" 2>/dev/null || ! stat -t "$mp" >/dev/null 2>&1; then
    fusermount3 -u "$mp" 2>/dev/null || fusermount3 -u -z "$mp" 2>/dev/null ||
      umount -l "$mp" 2>/dev/null || log "could not unmount $mp"
  fi
done
# the sshfs processes exit on unmount; give them a moment
sleep 0.2

# 2. sshd (only the one whose pid file we wrote)
pidf=$STATE/ssh/sshd.pid
if [ -s "$pidf" ]; then
  pid=$(cat "$pidf")
  if kill -0 "$pid" 2>/dev/null && grep -q sshd "/proc/$pid/cmdline" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
fi

# 3. network namespaces made by setup.sh --netns (fixed names: one
#    --netns rig per machine), only if this state dir's rig ever made them
if [ -f "$STATE"/netns_made ]; then
  for ns in rwdir-netfs-a rwdir-netfs-b rwdir-netfs-c; do
    ip netns list 2>/dev/null | grep -qw "^$ns" && ip netns del "$ns"
  done
  for v in rnfa0 rnfb0 rnfc0; do
    ip link show "$v" >/dev/null 2>&1 && { ip link del "$v" 2>/dev/null || true; }
  done
fi

# 4. state
if [ "$KEEP" = 0 ]; then
  still=$(grep -c " $STATE/" /proc/self/mounts || true)
  if [ "$still" != 0 ]; then
    log "mounts still present under $STATE; leaving it in place"
    exit 1
  fi
  rm -rf --one-file-system "$STATE"
fi
log "done"
