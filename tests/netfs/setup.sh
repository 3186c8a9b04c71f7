#!/usr/bin/env bash
# Adapted from the team's reference rig (what it measured: docs/protocol.md §10) for
# rwdir's own netfs tests (tests/netfs.rs, run by tests/netfs/run.sh from .ci/run).
# Changes: a third host C (netns + veth + default-caching mount NETFS_C) whose link the
# partition test cuts without disturbing hosts A and B, which other tests use at the
# same time.
#
# rwdir multi-host test rig: one private sshd on loopback exporting one
# directory, mounted several times with sshfs (each mount = one FUSE client
# with its own caches = one "host").
#
#   eval "$(netfs/setup.sh)"            # install if needed, start, mount
#   eval "$(netfs/setup.sh --netns)"    # same, but hosts A and B reach the
#                                       # server over their own veth + netns
#   netfs/teardown.sh                   # unmount, stop sshd, remove state
#
# Idempotent: a second run reuses the running sshd and the live mounts,
# remounts dead ones, and prints the same variables again.  Progress goes to
# stderr; stdout carries only shell assignments:
#
#   NETFS_STATE     state dir (keys, config, logs, mount points)
#   NETFS_EXPORT    the exported directory, as the server sees it
#   NETFS_A         mount A, sshfs default caching       (host A)
#   NETFS_B         mount B, sshfs default caching       (host B)
#   NETFS_A_NOCACHE mount A', sshfs -o cache=no          (host A, no dir cache)
#   NETFS_B_NOCACHE mount B', sshfs -o cache=no          (host B, no dir cache)
#   NETFS_PORT, NETFS_SSHD_PID, NETFS_SSH_CONFIG, NETFS_SSH_HOST
#   NETFS_NETNS_A, NETFS_NETNS_B, NETFS_VETH_A, NETFS_VETH_B  (--netns only)
#   NETFS_C, NETFS_NETNS_C, NETFS_VETH_C  (--netns only: host C's default-caching
#                   mount, reached over its own veth; cut it to partition host C)
#
# Environment knobs: RWDIR_NETFS_DIR (state dir; default $TMPDIR/rwdir-netfs
# or /tmp/rwdir-netfs), RWDIR_NETFS_PORT (default 42222),
# RWDIR_NETFS_SUBNET (first three octets for --netns, default 10.213.0),
# RWDIR_NETFS_OPTS (extra sshfs -o options for every mount, e.g. reconnect).
set -euo pipefail

log() { printf 'netfs-setup: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

NETNS=0
for arg in "$@"; do
  case "$arg" in
    --netns) NETNS=1 ;;
    -h|--help) sed -n '2,35p' "$0" >&2; exit 0 ;;
    *) die "unknown argument: $arg" ;;
  esac
done

[ "$(id -u)" = 0 ] || die "must run as root (FUSE mounts, sshd, namespaces)"

STATE=${RWDIR_NETFS_DIR:-${TMPDIR:-/tmp}/rwdir-netfs}
PORT=${RWDIR_NETFS_PORT:-42222}
SUBNET=${RWDIR_NETFS_SUBNET:-10.213.0}
XOPTS=${RWDIR_NETFS_OPTS:-}
SSHD=/usr/sbin/sshd
HOSTALIAS=rwdir-netfs
NS_A=rwdir-netfs-a
NS_B=rwdir-netfs-b
NS_C=rwdir-netfs-c
VETH_A=rnfa0          # root-side ends (the "switch port" of each host)
VETH_B=rnfb0
VETH_C=rnfc0

# ---------------------------------------------------------------- packages
need_pkgs=()
[ -x "$SSHD" ] || need_pkgs+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need_pkgs+=(openssh-client)
command -v ssh-keygen >/dev/null 2>&1 || need_pkgs+=(openssh-client)
command -v sshfs >/dev/null 2>&1 || need_pkgs+=(sshfs)
command -v fusermount3 >/dev/null 2>&1 || need_pkgs+=(fuse3)
{ command -v ip && command -v ss; } >/dev/null 2>&1 || need_pkgs+=(iproute2)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  log "installing: ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-o DPkg::Lock::Timeout=300 -o Acquire::Retries=3)
  apt-get "${apt_opts[@]}" update -qq >&2
  apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends \
    "${need_pkgs[@]}" >&2
fi
[ -c /dev/fuse ] || die "/dev/fuse missing: FUSE is required"

# ---------------------------------------------------------------- state dir
mkdir -p "$STATE"/ssh "$STATE"/export "$STATE"/mnt
chmod 700 "$STATE" "$STATE"/ssh
chmod 755 "$STATE"/export
STATE=$(cd "$STATE" && pwd -P)
S=$STATE/ssh

[ -f "$S"/host_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -C rwdir-netfs-host -f "$S"/host_ed25519
[ -f "$S"/id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -C rwdir-netfs-client -f "$S"/id_ed25519
cp "$S"/id_ed25519.pub "$S"/authorized_keys
chmod 600 "$S"/authorized_keys

# ---------------------------------------------------------------- netns
if [ "$NETNS" = 1 ]; then
  mk_ns() {  # ns veth root_ip ns_ip
    local ns=$1 veth=$2 rip=$3 nip=$4
    ip netns list 2>/dev/null | grep -qw "^$ns" || ip netns add "$ns"
    if ! ip link show "$veth" >/dev/null 2>&1; then
      ip link add "$veth" type veth peer name eth0 netns "$ns"
      ip addr add "$rip"/30 dev "$veth"
      ip netns exec "$ns" ip addr add "$nip"/30 dev eth0
    fi
    ip link set "$veth" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip link set eth0 up
  }
  mk_ns "$NS_A" "$VETH_A" "$SUBNET.1" "$SUBNET.2"
  mk_ns "$NS_B" "$VETH_B" "$SUBNET.5" "$SUBNET.6"
  mk_ns "$NS_C" "$VETH_C" "$SUBNET.9" "$SUBNET.10"
  : > "$STATE"/netns_made      # teardown.sh removes them only then
fi

# ---------------------------------------------------------------- sshd
sshd_alive() {
  [ -f "$S"/sshd.pid ] && kill -0 "$(cat "$S"/sshd.pid)" 2>/dev/null &&
    grep -q sshd "/proc/$(cat "$S"/sshd.pid)/cmdline" 2>/dev/null
}
port_free() { ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

# the port: the running rig's, else the wanted one or the next free one
if sshd_alive; then
  PORT=$(cat "$S"/port 2>/dev/null || awk '/^Port /{print $2}' "$S"/sshd_config)
else
  for _ in $(seq 50); do port_free "$PORT" && break; PORT=$((PORT + 1)); done
  port_free "$PORT" || die "no free TCP port near ${RWDIR_NETFS_PORT:-42222}"
fi

want_listen="127.0.0.1"
[ "$NETNS" = 1 ] && want_listen="127.0.0.1 $SUBNET.1 $SUBNET.5 $SUBNET.9"
{
  echo "# generated by netfs/setup.sh"
  echo "Port $PORT"
  for a in $want_listen; do echo "ListenAddress $a"; done
  cat <<EOF
HostKey $S/host_ed25519
PidFile $S/sshd.pid
AuthorizedKeysFile $S/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
X11Forwarding no
AllowTcpForwarding no
MaxStartups 100:30:200
MaxSessions 100
LogLevel ERROR
Subsystem sftp internal-sftp
EOF
} > "$S"/sshd_config.new

if sshd_alive && ! cmp -s "$S"/sshd_config.new "$S"/sshd_config; then
  log "sshd config changed: restarting sshd"
  kill "$(cat "$S"/sshd.pid)"
  for _ in $(seq 50); do sshd_alive || break; sleep 0.1; done
fi
mv "$S"/sshd_config.new "$S"/sshd_config
if ! sshd_alive; then
  mkdir -p /run/sshd            # privilege-separation dir sshd insists on
  "$SSHD" -t -f "$S"/sshd_config || die "sshd config test failed"
  "$SSHD" -f "$S"/sshd_config -E "$S"/sshd.log
  for _ in $(seq 100); do [ -s "$S"/sshd.pid ] && break; sleep 0.05; done
  sshd_alive || die "sshd did not start; see $S/sshd.log"
  echo "$PORT" > "$S"/port
  log "sshd started (pid $(cat "$S"/sshd.pid), port $PORT)"
fi

# client side: one ssh_config, host keys pinned
{
  printf '[127.0.0.1]:%s ' "$PORT"; cut -d' ' -f1,2 "$S"/host_ed25519.pub
  for ip in "$SUBNET.1" "$SUBNET.5" "$SUBNET.9"; do
    printf '[%s]:%s ' "$ip" "$PORT"; cut -d' ' -f1,2 "$S"/host_ed25519.pub
  done
} > "$S"/known_hosts
ssh_host_block() {  # alias address
  cat <<EOF
Host $1
  HostName $2
  Port $PORT
  User root
  IdentityFile $S/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $S/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  ServerAliveInterval 5
  ServerAliveCountMax 3
  LogLevel ERROR
EOF
}
{
  ssh_host_block "$HOSTALIAS" 127.0.0.1
  ssh_host_block "$HOSTALIAS-a" "$SUBNET.1"
  ssh_host_block "$HOSTALIAS-b" "$SUBNET.5"
  ssh_host_block "$HOSTALIAS-c" "$SUBNET.9"
} > "$S"/ssh_config

# wait until sshd answers (it may still be binding)
for i in $(seq 50); do
  if ssh -F "$S"/ssh_config "$HOSTALIAS" true 2>/dev/null; then break; fi
  [ "$i" = 50 ] && die "cannot ssh to the rig's sshd; see $S/sshd.log"
  sleep 0.1
done

# ---------------------------------------------------------------- mounts
# name  ssh-alias  netns  extra sshfs options
mount_one() {
  local name=$1 alias=$2 ns=$3 opts=$4 mp=$STATE/mnt/$1
  [ -n "$XOPTS" ] && opts=${opts:+$opts,}$XOPTS
  mkdir -p "$mp" 2>/dev/null || true
  if mountpoint -q "$mp" 2>/dev/null; then
    if stat -t "$mp"/. >/dev/null 2>&1 && [ -f "$STATE"/mnt/."$name".opts ] &&
       [ "$(cat "$STATE"/mnt/."$name".opts)" = "$alias $ns $opts $PORT" ]; then
      return 0                                   # live and as wanted
    fi
    log "remounting $name"
    fusermount3 -u -z "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
  elif ! stat -t "$mp" >/dev/null 2>&1; then     # dead FUSE endpoint
    fusermount3 -u -z "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
  fi
  mkdir -p "$mp"
  log "mounting $name${opts:+ (-o $opts)}${ns:+ from netns $ns}"
  local cmd=(sshfs -F "$S"/ssh_config "$alias:$STATE/export" "$mp"
             -o "fsname=netfs-$name,subtype=sshfs${opts:+,$opts}")
  if [ -n "$ns" ]; then
    # nsenter --net keeps our mount namespace (ip netns exec would not)
    nsenter --net=/run/netns/"$ns" "${cmd[@]}"
  else
    "${cmd[@]}"
  fi
  echo "$alias $ns $opts $PORT" > "$STATE"/mnt/."$name".opts
  mountpoint -q "$mp" || die "mount $name failed"
}

if [ "$NETNS" = 1 ]; then
  mount_one a "$HOSTALIAS-a" "$NS_A" ""
  mount_one b "$HOSTALIAS-b" "$NS_B" ""
  mount_one a_nocache "$HOSTALIAS-a" "$NS_A" "cache=no"
  mount_one b_nocache "$HOSTALIAS-b" "$NS_B" "cache=no"
  mount_one c "$HOSTALIAS-c" "$NS_C" ""
else
  mount_one a "$HOSTALIAS" "" ""
  mount_one b "$HOSTALIAS" "" ""
  mount_one a_nocache "$HOSTALIAS" "" "cache=no"
  mount_one b_nocache "$HOSTALIAS" "" "cache=no"
fi
echo "$NETNS" > "$STATE"/netns_mode

# smoke check: a name created through A is seen through B (fresh name, so
# no cache can answer), and an exclusive create of it through B fails
probe=.netfs-setup-probe-$$-$RANDOM
echo probe > "$STATE/mnt/a/$probe"
[ "$(cat "$STATE/mnt/b/$probe" 2>/dev/null)" = probe ] || die "mount B does not see a file made through mount A"
if (set -C; : > "$STATE/mnt/b_nocache/$probe") 2>/dev/null; then die "exclusive create through B succeeded on an existing file"; fi
rm -f "$STATE/mnt/a/$probe"

# ---------------------------------------------------------------- report
q() { printf '%q' "$1"; }
echo "NETFS_STATE=$(q "$STATE")"
echo "NETFS_EXPORT=$(q "$STATE/export")"
echo "NETFS_A=$(q "$STATE/mnt/a")"
echo "NETFS_B=$(q "$STATE/mnt/b")"
echo "NETFS_A_NOCACHE=$(q "$STATE/mnt/a_nocache")"
echo "NETFS_B_NOCACHE=$(q "$STATE/mnt/b_nocache")"
echo "NETFS_PORT=$PORT"
echo "NETFS_SSHD_PID=$(cat "$S"/sshd.pid)"
echo "NETFS_SSH_CONFIG=$(q "$S/ssh_config")"
echo "NETFS_SSH_HOST=$HOSTALIAS"
if [ "$NETNS" = 1 ]; then
  echo "NETFS_NETNS_A=$NS_A"
  echo "NETFS_NETNS_B=$NS_B"
  echo "NETFS_VETH_A=$VETH_A"
  echo "NETFS_VETH_B=$VETH_B"
  echo "NETFS_C=$(q "$STATE/mnt/c")"
  echo "NETFS_NETNS_C=$NS_C"
  echo "NETFS_VETH_C=$VETH_C"
fi
echo "export NETFS_STATE NETFS_EXPORT NETFS_A NETFS_B NETFS_A_NOCACHE NETFS_B_NOCACHE NETFS_PORT NETFS_SSHD_PID NETFS_SSH_CONFIG NETFS_SSH_HOST"
[ "$NETNS" = 1 ] && echo "export NETFS_NETNS_A NETFS_NETNS_B NETFS_VETH_A NETFS_VETH_B NETFS_C NETFS_NETNS_C NETFS_VETH_C"
log "ready: A=$STATE/mnt/a B=$STATE/mnt/b (netns=$NETNS)"
