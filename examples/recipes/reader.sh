#!/bin/sh
# reader.sh: read DIR/data while holding rwdir's read lock on DIR, so a restore never
# changes it under our feet. Here the "reading" prints a checksum line (cksum: CRC,
# size, path) for every file; put your own command in its place.
#
# usage: reader.sh [-t SECS] DIR
#
#   -t SECS  give up if the lock is not obtained within SECS seconds (default 60). Other
#            readers never make us wait; a restore that holds or waits for the lock does
#            (writers go first).
#
# Exit status: 0 done; 75 not obtained in time (a restore is running: try again
# later); otherwise the status of the reading command, or rwdir's error status.
# Beware: a reading command that itself exits 75 looks like "busy" to the caller.
set -eu

timeout=60
while getopts t: opt; do
    case $opt in
    t) timeout=$OPTARG ;;
    *) echo "usage: reader.sh [-t SECS] DIR" >&2; exit 64 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "usage: reader.sh [-t SECS] DIR" >&2; exit 64; }
dir=$1

status=0
rwdir read --timeout "$timeout" "$dir" -- sh -c '
    cd "$1" && find . -type f -exec cksum {} + | LC_ALL=C sort -k 3
' reader.sh "$dir/data" || status=$?

if [ "$status" -eq 75 ]; then
    echo "reader.sh: $dir is being restored (no read lock within $timeout s); try again later" >&2
fi
exit "$status"
