#!/usr/bin/env bash
# Copied unchanged (but for this line) from the team's reference rig (shared/netfs/host.sh).
# Run a command as a separate "host" of the rig:
#   own hostname (UTS namespace), own PID namespace with its own /proc, own
#   mount namespace (a copy: the rig's sshfs mounts stay visible), and
#   optionally its own network namespace (one made by setup.sh --netns) and
#   its own boot id (a file bind-mounted over /proc/sys/kernel/random/boot_id,
#   which is otherwise the SAME for every "host" on this kernel).
#
#   netfs/host.sh NAME [--net NETNS] [--boot-id UUID|random] -- COMMAND [ARGS...]
#
# Inside: hostname = NAME, NETFS_HOST = NAME, PID 1 is a small sh that runs
# COMMAND as its child and exits with COMMAND's status.  When PID 1 exits
# every process left in that PID namespace is killed by the kernel.
# unshare(1) ignores SIGTERM/SIGINT; `kill -KILL <pid of host.sh>` kills
# PID 1 too (--kill-child) and with it the whole "host": a host crash.
# A process's pid as seen from outside: the first field of the NSpid line in
# /proc/PID/status (the last field is its pid inside the host).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
NAME=$1; shift
NET=""; BOOT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --net) NET=$2; shift 2 ;;
    --boot-id) BOOT=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "host.sh: no COMMAND" >&2; exit 2; }
[ "$BOOT" = random ] && BOOT=$(cat /proc/sys/kernel/random/uuid)

pre=()
[ -n "$NET" ] && pre=(nsenter --net=/run/netns/"$NET")

export NETFS_HOST=$NAME NETFS_FAKE_BOOT_ID=$BOOT
exec "${pre[@]}" unshare --uts --pid --fork --kill-child --mount --propagation private --mount-proc -- \
  /bin/sh -c '
    hostname "$NETFS_HOST"
    if [ -n "$NETFS_FAKE_BOOT_ID" ]; then
      f=$(mktemp); echo "$NETFS_FAKE_BOOT_ID" > "$f"
      mount --bind "$f" /proc/sys/kernel/random/boot_id
      rm -f "$f"
    fi
    unset NETFS_FAKE_BOOT_ID
    "$@"
  ' host-init "$@"
