# Shared by tests/dfs/*.sh: names, paths and ports, all overridable (see setup.sh).
# shellcheck shell=bash
log() { printf 'dfs: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
STATE=${RWDIR_DFS_DIR:-${TMPDIR:-/tmp}/rwdir-dfs}
mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd -P)
SUBNET=${RWDIR_DFS_SUBNET:-10.214.0}
SERVER=$SUBNET.1
PREFIX=${RWDIR_DFS_PREFIX:-rwdir-dfs}
BR=$PREFIX-br
NS_B=$PREFIX-b
NS_C=$PREFIX-c
# root-side veth ends (interface names: at most 15 characters)
VETH_B=${PREFIX}b0
VETH_C=${PREFIX}c0
read -r CEPH_V2 CEPH_V1 <<<"${RWDIR_DFS_CEPH_PORTS:-3300 6789}"
GL_PORT=${RWDIR_DFS_GLUSTER_PORT:-24007}
GL_BASE_PORT=${RWDIR_DFS_GLUSTER_BASE_PORT:-49710}
export CEPH_CONF=$STATE/ceph.conf
gl() {
  gluster --mode=script --glusterd-sock="$STATE/gluster/glusterd.socket" \
    --log-file="$STATE/log/cli.log" "$@"
}
