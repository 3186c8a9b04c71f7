#!/usr/bin/env bash
# Runs a command on the multi-host netfs rig and tears the rig down afterwards, whatever
# happens (trap):
#
#   tests/netfs/run.sh cargo test --test netfs -- --ignored --nocapture
#
# Sets the rig up with `setup.sh --netns` (installs openssh-server, openssh-client,
# sshfs and fuse3 with apt-get if missing; a private sshd on 127.0.0.1 and on three
# veths; sshfs mounts A, B (default caching), A_NOCACHE, B_NOCACHE (cache=no) and C
# (host C, own netns, for the partition test); docs/protocol.md §10 says what was
# measured on it), exports the NETFS_* variables plus
# NETFS_HOST_SH (the host.sh that makes a "host" with its own hostname, pid, mount and
# network namespaces and boot id), and runs COMMAND. Must run as root.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
export RWDIR_NETFS_DIR=${RWDIR_NETFS_DIR:-${TMPDIR:-/tmp}/rwdir-netfs-tests}
teardown() { bash "$HERE/teardown.sh" || true; }
trap teardown EXIT
trap 'exit 130' INT TERM
t0=$(date +%s.%N)
vars=$(bash "$HERE/setup.sh" --netns)   # not inside eval: a failed setup must stop here
eval "$vars"
echo "netfs rig ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s" >&2
export NETFS_HOST_SH="$HERE/host.sh"
"$@"
