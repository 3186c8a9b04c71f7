#!/usr/bin/env bash
# Runs a command on the distributed-filesystem rig and tears the rig down afterwards,
# whatever happens (trap):
#
#   tests/dfs/run.sh ceph|gluster cargo test --test netfs -- --ignored --nocapture
#
# Sets the rig up with `setup.sh KIND` (installs ceph-mon, ceph-osd, ceph-mds,
# ceph-fuse, or glusterfs-server and glusterfs-client, with apt-get if missing; a
# one-node CephFS or one-brick GlusterFS on a bridge of its own, $RWDIR_DFS_SUBNET.1,
# default 10.214.0.1; FUSE clients A (root netns), B and C (netns each) with default
# caching, and E, the server's view), exports the NETFS_* variables tests/netfs.rs reads
# plus NETFS_HOST_SH (tests/netfs/host.sh: a "host" with its own hostname, pid, mount
# namespace and boot id), and runs COMMAND. Must run as root. docs/notes/dfs-rig.md says
# what was measured on it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 2 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
KIND=$1; shift
export RWDIR_DFS_DIR=${RWDIR_DFS_DIR:-${TMPDIR:-/tmp}/rwdir-dfs-tests}
teardown() { bash "$HERE/teardown.sh" || true; }
trap teardown EXIT
trap 'exit 130' INT TERM
t0=$(date +%s.%N)
vars=$(bash "$HERE/setup.sh" "$KIND")   # not inside eval: a failed setup must stop here
eval "$vars"
echo "dfs rig ($KIND) ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s" >&2
export NETFS_HOST_SH="$HERE/../netfs/host.sh"
"$@"
