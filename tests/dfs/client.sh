#!/usr/bin/env bash
# One FUSE client of the rig set up by tests/dfs/setup.sh (its kind is in the state dir):
#
#   client.sh up NAME [NETNS]   mount client NAME at $STATE/mnt/NAME, its FUSE process
#                               in network namespace NETNS (default: the root one);
#                               prints the mount point
#   client.sh pid NAME          the pid of client NAME's FUSE process
#   client.sh kill NAME         SIGKILL client NAME's FUSE process (a crashed client:
#                               its mount is left dead, its session on the server open)
#   client.sh evict NAME        CephFS: evict client NAME's MDS session(s), what an
#                               operator does for a dead client (`ceph tell mds.a client
#                               evict id=N`); prints the ids evicted
#   client.sh down NAME         unmount client NAME (lazily if busy or dead)
#
# Client `e` (the "export") gets no kernel or md-cache caching on GlusterFS; the others
# get $RWDIR_DFS_GL_MOUNT_OPTS (default: none, the default caching).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/dfs/common.sh
. "$HERE/common.sh"
OP=${1:-}; NAME=${2:-}
[ -n "$OP" ] && [ -n "$NAME" ] || die "usage: client.sh up|pid|kill|evict|down NAME [NETNS]"
KIND=$(cat "$STATE"/kind 2>/dev/null) || die "no rig in $STATE (run setup.sh)"
MP=$STATE/mnt/$NAME
PIDF=$STATE/mnt/.$NAME.pid

pid_of() {
  local p
  p=$(cat "$PIDF" 2>/dev/null) || return 1
  kill -0 "$p" 2>/dev/null || return 1
  echo "$p"
}

unmount() {
  if findmnt -n "$MP" >/dev/null 2>&1 || ! stat -t "$MP" >/dev/null 2>&1; then
    fusermount3 -u "$MP" 2>/dev/null || fusermount -u "$MP" 2>/dev/null ||
      umount -l "$MP" 2>/dev/null || true
  fi
}

case "$OP" in
up)
  NS=${3:-}
  pre=()
  [ -n "$NS" ] && pre=(nsenter --net=/run/netns/"$NS")
  unmount
  mkdir -p "$MP"
  if [ "$KIND" = ceph ]; then
    # ceph-fuse daemonizes; its pid file is $run_dir/client.NAME.pid (ceph.conf)
    "${pre[@]}" ceph-fuse --id "$NAME" "$MP" >/dev/null 2>&1 || die "ceph-fuse $NAME failed"
    cp "$STATE/ceph/client.$NAME.pid" "$PIDF"
  else
    opts=(${RWDIR_DFS_GL_MOUNT_OPTS:-})
    if [ "$NAME" = e ]; then
      opts=(--entry-timeout=0 --attribute-timeout=0 --negative-timeout=0
            --xlator-option=gv0-md-cache.md-cache-timeout=0)
    fi
    "${pre[@]}" glusterfs --process-name fuse --volfile-server="$SERVER" \
      --volfile-server-port="$GL_PORT" --volfile-id=gv0 "${opts[@]}" \
      -p "$PIDF" -l "$STATE/log/client-$NAME.log" "$MP"
  fi
  for _ in $(seq 100); do findmnt -n "$MP" >/dev/null 2>&1 && stat -f "$MP" >/dev/null 2>&1 && break; sleep 0.1; done
  findmnt -n "$MP" >/dev/null 2>&1 || die "client $NAME: not mounted at $MP"
  log "client $NAME mounted at $MP${NS:+ from netns $NS} (pid $(pid_of || echo ?))"
  echo "$MP" ;;
pid)
  pid_of || die "client $NAME: no FUSE process" ;;
kill)
  p=$(pid_of) || die "client $NAME: no FUSE process"
  kill -KILL "$p"
  while kill -0 "$p" 2>/dev/null; do sleep 0.01; done
  echo "$p" ;;
evict)
  [ "$KIND" = ceph ] || die "evict: only CephFS has sessions to evict"
  ids=$(ceph tell mds.a session ls 2>/dev/null | python3 -c '
import json, sys
name = sys.argv[1]
print(" ".join(str(s["id"]) for s in json.load(sys.stdin)
               if s.get("client_metadata", {}).get("entity_id") == name))' "$NAME")
  for id in $ids; do ceph tell mds.a client evict id="$id" >/dev/null 2>&1; done
  echo "$ids" ;;
down)
  p=$(pid_of) || p=""
  unmount
  if [ -n "$p" ]; then
    for _ in $(seq 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p"
  fi
  rm -f "$PIDF"
  true ;;
*) die "unknown operation: $OP" ;;
esac
