#!/usr/bin/env bash
# rwdir's distributed-filesystem rig (issue #17): a one-node CephFS or a one-brick
# GlusterFS on this machine, mounted through FUSE by several clients, each client a
# "host" of tests/netfs.rs. Brought in from the team's starting point (shared/dfs/:
# ceph/setup.sh, gluster/setup.sh, netns.sh), changed so that it cannot collide with
# the sshfs rig (tests/netfs/, 10.213.0.x) nor with those scripts (10.77.0.x, port
# 24007), and with a third client host C, a server-side view ("export") and crash
# victims.
#
#   eval "$(tests/dfs/setup.sh ceph|gluster)"    # install if needed, start, mount
#   tests/dfs/teardown.sh                         # unmount, stop, remove everything
#
# Network: a bridge (root namespace, $SUBNET.1/24) where the daemons listen; hosts B and
# C are network namespaces on veths plugged into it ($SUBNET.2, $SUBNET.3). Cutting host
# C's root-side veth partitions C and nothing else. Clients (each its own FUSE process,
# own caches, own session with the server):
#   a   host A, root netns, default options (what users have)
#   b   host B, netns B, default options
#   c   host C, netns C, default options (the partition test cuts its link)
#   e   the "export": a root-netns client used as the server's view (tests create
#       their directories through it and read the lock's state and heartbeat mtimes
#       there). CephFS: a plain ceph-fuse client (coherent within milliseconds).
#       GlusterFS: a client with the kernel's entry/attribute/negative caches off
#       (--*-timeout=0) and md-cache's timeout 0, so it does not answer from a cache;
#       the brick itself is never written (writing a brick corrupts a volume).
# Crash victims (tests/dfs/client.sh up NAME NETNS) are mounted by the tests that kill them.
#
# Idempotent: tears down first, then builds a fresh filesystem (seconds). Progress goes
# to stderr; stdout carries only shell assignments (NETFS_* as tests/netfs.rs reads
# them, plus NETFS_KIND, NETFS_DFS_CLIENT_SH, NETFS_SESSION_TIMEOUT_SECS).
#
# Environment knobs: RWDIR_DFS_DIR (state dir, default $TMPDIR/rwdir-dfs or
# /tmp/rwdir-dfs), RWDIR_DFS_SUBNET (first three octets, default 10.214.0),
# RWDIR_DFS_PREFIX (names of namespaces and bridge, default rwdir-dfs; at most 9
# characters), RWDIR_DFS_CEPH_PORTS (mon v2 and v1 ports, default "3300 6789"),
# RWDIR_DFS_GLUSTER_PORT (glusterd, default 24007, bound to $SUBNET.1
# only; glusterd starts its bricks so that they fetch their volfile from port 24007,
# so another port works only for the clients: one GlusterFS rig per machine), RWDIR_DFS_GLUSTER_BASE_PORT (bricks,
# default 49710), RWDIR_DFS_GL_MOUNT_OPTS (extra options for clients a, b, c: e.g.
# "--entry-timeout=0 --attribute-timeout=0 --negative-timeout=0"; default none: default
# caching), RWDIR_DFS_GL_VOLSET (volume options as pairs, default none).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/dfs/common.sh
. "$HERE/common.sh"

KIND=${1:-}
case "$KIND" in ceph|gluster) ;; *) die "usage: setup.sh ceph|gluster" ;; esac
[ "$(id -u)" = 0 ] || die "must run as root (FUSE mounts, daemons, namespaces)"
# stdout carries only the assignments; everything else goes to stderr (and the
# daemons must not inherit stdout: `$(setup.sh)` would wait for them)
main() {

# ---------------------------------------------------------------- packages
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v fusermount3 >/dev/null 2>&1 || command -v fusermount >/dev/null 2>&1 || need+=(fuse3)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ "$KIND" = ceph ]; then
  for c in ceph-mon:ceph-mon ceph-osd:ceph-osd ceph-mds:ceph-mds ceph-fuse:ceph-fuse ceph:ceph-common; do
    command -v "${c%%:*}" >/dev/null 2>&1 || need+=("${c#*:}")
  done
else
  command -v glusterd >/dev/null 2>&1 || need+=(glusterfs-server)
  command -v glusterfs >/dev/null 2>&1 || need+=(glusterfs-client)
fi
if [ "${#need[@]}" -gt 0 ]; then
  log "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-o DPkg::Lock::Timeout=300 -o Acquire::Retries=3)
  apt-get "${apt_opts[@]}" update -qq >&2
  apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${need[@]}" >&2
fi
[ -c /dev/fuse ] || die "/dev/fuse missing: FUSE is required"

bash "$HERE/teardown.sh" >/dev/null 2>&1 || true

# ---------------------------------------------------------------- network
mkdir -p "$STATE"/mnt "$STATE"/log
echo "$KIND" > "$STATE"/kind
ip link show "$BR" >/dev/null 2>&1 || ip link add "$BR" type bridge
ip addr replace "$SERVER"/24 dev "$BR"
ip link set "$BR" up
mk_ns() {  # ns veth ip
  local ns=$1 veth=$2 addr=$3
  ip netns list 2>/dev/null | grep -qw "^$ns" || ip netns add "$ns"
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip netns exec "$ns" ip addr add "$addr"/24 dev eth0
  fi
  ip link set "$veth" master "$BR" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip link set eth0 up
}
mk_ns "$NS_B" "$VETH_B" "$SUBNET.2"
mk_ns "$NS_C" "$VETH_C" "$SUBNET.3"

# ---------------------------------------------------------------- servers
t0=$(date +%s.%N)
if [ "$KIND" = ceph ]; then
  R=$STATE/ceph; mkdir -p "$R"/mon-a "$R"/osd-0 "$R"/mds-a
  FSID=$(cat /proc/sys/kernel/random/uuid)
  MON="[v2:$SERVER:$CEPH_V2,v1:$SERVER:$CEPH_V1]"
  cat > "$CEPH_CONF" <<CONF
[global]
fsid = $FSID
mon host = $MON
public network = $SUBNET.0/24
public addr = $SERVER
auth cluster required = none
auth service required = none
auth client required = none
run dir = $R
admin socket = $R/\$name.asok
pid file = $R/\$name.pid
log file = $STATE/log/\$name.log
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
osd crush chooseleaf type = 0
mon warn on pool no redundancy = false
[mon]
mon data = $R/mon-\$id
[osd]
osd data = $R/osd-\$id
osd objectstore = memstore
memstore device bytes = 1073741824
osd op num shards = 1
osd op num threads per shard = 2
[mds]
mds data = $R/mds-\$id
mds cache memory limit = 268435456
CONF
  monmaptool --create --fsid "$FSID" --addv a "$MON" "$R"/monmap >/dev/null
  ceph-mon --mkfs -i a --monmap "$R"/monmap
  ceph-mon -i a
  OSD_UUID=$(cat /proc/sys/kernel/random/uuid)
  ID=$(ceph osd new "$OSD_UUID")
  ceph-osd -i "$ID" --mkfs --osd-uuid "$OSD_UUID" >/dev/null 2>&1
  ceph-osd -i "$ID"
  ceph osd pool create cephfs_meta 8 >/dev/null 2>&1
  ceph osd pool create cephfs_data 8 >/dev/null 2>&1
  ceph fs new cephfs cephfs_meta cephfs_data >/dev/null 2>&1
  ceph-mds -i a
  for _ in $(seq 240); do ceph mds stat 2>/dev/null | grep -q 'up:active' && break; sleep 0.25; done
  ceph mds stat 2>/dev/null | grep -q 'up:active' || die "the MDS did not become active; see $STATE/log"
  SESSION_TIMEOUT=$(ceph fs get cephfs -f json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["mdsmap"]["session_timeout"])')
else
  R=$STATE/gluster; mkdir -p "$R"/lib "$R"/run "$STATE"/brick0
  cat > "$R"/glusterd.vol <<VOL
volume management
    type mgmt/glusterd
    option working-directory $R/lib
    option run-directory $R/run
    option glusterd-sockfile $R/glusterd.socket
    option transport-type socket
    option transport.socket.bind-address $SERVER
    option transport.socket.listen-port $GL_PORT
    option base-port $GL_BASE_PORT
    option max-port $((GL_BASE_PORT + 40))
    option transport.socket.read-fail-log off
    option ping-timeout 0
    option event-threads 1
end-volume
VOL
  glusterd -f "$R"/glusterd.vol -p "$R"/glusterd.pid -l "$STATE"/log/glusterd.log
  for _ in $(seq 300); do gl volume list >/dev/null 2>&1 && break; sleep 0.1; done
  gl volume create gv0 "$SERVER:$STATE/brick0" force >/dev/null
  # shellcheck disable=SC2086
  set -- ${RWDIR_DFS_GL_VOLSET:-}
  while [ $# -ge 2 ]; do gl volume set gv0 "$1" "$2" >/dev/null; shift 2; done
  gl volume start gv0 >/dev/null
  for _ in $(seq 600); do gl volume status gv0 --xml 2>/dev/null | grep -q '<status>1</status>' && break; sleep 0.1; done
  gl volume status gv0 --xml 2>/dev/null | grep -q '<status>1</status>' || die "the brick did not start; see $STATE/log"
  SESSION_TIMEOUT=0
fi
echo "$SESSION_TIMEOUT" > "$STATE"/session_timeout
log "$KIND servers up in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"

# ---------------------------------------------------------------- clients
bash "$HERE/client.sh" up a ""
bash "$HERE/client.sh" up b "$NS_B"
bash "$HERE/client.sh" up c "$NS_C"
bash "$HERE/client.sh" up e ""

# smoke check: a name created through A is seen through B, and an exclusive create of
# it through B fails
probe=.dfs-setup-probe-$$-$RANDOM
echo probe > "$STATE/mnt/a/$probe"
[ "$(cat "$STATE/mnt/b/$probe" 2>/dev/null)" = probe ] || die "mount B does not see a file made through mount A"
if (set -C; : > "$STATE/mnt/b/$probe") 2>/dev/null; then die "exclusive create through B succeeded on an existing file"; fi
rm -f "$STATE/mnt/a/$probe"

}
main >&2

# ---------------------------------------------------------------- report
q() { printf '%q' "$1"; }
echo "NETFS_KIND=$KIND"
echo "NETFS_STATE=$(q "$STATE")"
echo "NETFS_EXPORT=$(q "$STATE/mnt/e")"
echo "NETFS_A=$(q "$STATE/mnt/a")"
echo "NETFS_B=$(q "$STATE/mnt/b")"
echo "NETFS_C=$(q "$STATE/mnt/c")"
echo "NETFS_NETNS_B=$NS_B"
echo "NETFS_NETNS_C=$NS_C"
echo "NETFS_VETH_B=$VETH_B"
echo "NETFS_VETH_C=$VETH_C"
echo "NETFS_SESSION_TIMEOUT_SECS=$SESSION_TIMEOUT"
echo "NETFS_DFS_CLIENT_SH=$(q "$HERE/client.sh")"
echo "export NETFS_KIND NETFS_STATE NETFS_EXPORT NETFS_A NETFS_B NETFS_C NETFS_NETNS_B NETFS_NETNS_C NETFS_VETH_B NETFS_VETH_C NETFS_SESSION_TIMEOUT_SECS NETFS_DFS_CLIENT_SH"
log "ready: $KIND, A=$STATE/mnt/a B=$STATE/mnt/b C=$STATE/mnt/c export=$STATE/mnt/e"
