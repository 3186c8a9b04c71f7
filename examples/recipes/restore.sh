#!/bin/sh
# restore.sh: replace DIR/data with a backup while holding rwdir's write lock on DIR.
#
# usage: restore.sh [-t SECS] BACKUP DIR
#
#   BACKUP   a directory, or a tar archive (.tar, .tar.gz, .tgz, .tar.bz2, .tar.xz, ...)
#            whose members are relative to the data directory, as backup.cron makes them
#   DIR      the locked directory; the data lives in DIR/data (the lock in DIR/.rwdir)
#   -t SECS  give up if the lock is not obtained within SECS seconds (default 600):
#            readers finish what they are reading first, new readers wait for us
#
# How the copy is done, inside the lock:
#   BACKUP is a directory:  rsync -a --delete BACKUP/ DIR/data/   when rsync is installed,
#                           else: empty DIR/data, then cp -pR BACKUP/. DIR/data/
#                           (cp keeps modes and times, not hard links, ACLs or xattrs)
#   BACKUP is a file:       empty DIR/data, then tar -xpf BACKUP -C DIR/data
#                           (GNU tar and bsdtar detect the compression by themselves)
#   RESTORE_WITH=rsync|cp   forces the method for a directory.
#   rsync skips files whose size and mtime match (add --checksum if that is not enough).
#
# The copy goes into DIR/data, never into DIR itself: `rsync --delete` into DIR would
# delete DIR/.rwdir, the lock files, including ours (rwdir then reports the lock lost,
# exit 74).
#
# Exit status: 0 restored; 75 the lock was not obtained in time (nothing was changed,
# try again later); 64 usage; anything else: the copy or rwdir failed (DIR/data may be
# half restored: run the restore again).
set -eu

usage() {
    echo "usage: restore.sh [-t SECS] BACKUP DIR" >&2
    exit 64
}

timeout=600
while getopts t: opt; do
    case $opt in
    t) timeout=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || usage
backup=$1
dir=$2

if [ -d "$backup" ]; then
    how=${RESTORE_WITH:-}
    if [ -z "$how" ]; then
        if command -v rsync >/dev/null 2>&1; then how=rsync; else how=cp; fi
    fi
    case $how in
    rsync | cp) ;;
    *) echo "restore.sh: RESTORE_WITH must be rsync or cp, not '$how'" >&2; exit 64 ;;
    esac
elif [ -f "$backup" ]; then
    how=tar
else
    echo "restore.sh: no backup at '$backup'" >&2
    exit 66
fi
if [ ! -d "$dir" ]; then
    echo "restore.sh: '$dir' is not a directory" >&2
    exit 66
fi

# Everything below `--` runs while we hold the write lock: no reader sees DIR/data
# until the copy is complete. RWDIR_TOKEN is this grant's fencing token.
status=0
rwdir write --timeout "$timeout" "$dir" -- sh -c '
    set -eu
    how=$1 src=$2 dst=$3
    echo "restore.sh: write lock on $RWDIR_DIR (token $RWDIR_TOKEN): restoring $src with $how" >&2
    mkdir -p "$dst"
    empty() { find "$1" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +; }
    case $how in
    rsync) rsync -a --delete -- "$src/" "$dst/" ;;
    cp) empty "$dst"; cp -pR -- "$src/." "$dst/" ;;
    tar) empty "$dst"; tar -xpf "$src" -C "$dst" ;;
    esac
' restore.sh "$how" "$backup" "$dir/data" || status=$?

case $status in
0) echo "restore.sh: restored $dir/data from $backup" >&2 ;;
75) echo "restore.sh: $dir is busy (readers did not finish within $timeout s); nothing was changed" >&2 ;;
*) echo "restore.sh: restore failed (exit $status); $dir/data may be incomplete: run it again" >&2 ;;
esac
exit "$status"
