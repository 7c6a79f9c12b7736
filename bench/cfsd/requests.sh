#!/usr/bin/env bash
# Count the FUSE requests `kaon cfsd` receives per workload of
# bench/cfsd/bench.sh: where the round trips go, per file.
#
#   sudo bench/cfsd/requests.sh                 # go/src/net (~450 entries)
#   SRC=$(go env GOROOT)/src/go MD_FILES=500 MOUNT_OPTS=--acl=false bench/cfsd/requests.sh
#
# The daemon runs with --debug (one log line per request); the script
# counts the opcodes each workload adds. "Cold" here is a fresh mount of
# the same backend (the kernel's dentry, inode, attribute and ACL caches
# of the mount are empty; the backend's page cache is not dropped, so the
# script disturbs nobody else's caches): bench.sh's drop_caches rounds send
# the same requests. Counts, not times: the debug log slows the daemon.
# Needs root (mount).
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-/tmp/kaon-cfsd-requests}
KAON=${KAON:-$WORK/kaon}
SRC=${SRC:-$(go env GOROOT)/src/net}
MD_FILES=${MD_FILES:-1000}
MOUNT_OPTS=${MOUNT_OPTS:-}

mkdir -p "$WORK"
[ -x "$KAON" ] || go build -o "$KAON" ./cmd/kaon
B=$WORK/backend M=$WORK/mnt LOG=$WORK/cfsd.log
fusermount3 -uz "$M" 2>/dev/null || true
rm -rf "$B" "$LOG"
mkdir -p "$B" "$M"
TAR=$WORK/src.tar
tar -C "$(dirname "$SRC")" -cf "$TAR" "$(basename "$SRC")"
N=$(tar -tf "$TAR" | wc -l)
D=$(basename "$SRC")

mount_() { "$KAON" cfsd mount --backend "$B" $MOUNT_OPTS --debug --log "$LOG" "$M"; }
umount_() { "$KAON" cfsd umount "$M"; }
remount() { umount_; mount_; }
mount_
trap 'umount_ 2>/dev/null || fusermount3 -uz "$M"' EXIT

# run NAME PER CMD...: run CMD, print the requests it caused, per PER entries
run() {
  local name=$1 per=$2 a b
  shift 2
  a=$(wc -l <"$LOG")
  "$@" >/dev/null 2>&1
  sleep 0.5 # asynchronous RELEASE/FORGET
  b=$(wc -l <"$LOG")
  sed -n "$((a + 1)),${b}p" "$LOG" | grep -o 'rx [0-9]*: [A-Z_]*' | awk '{print $3}' | sort | uniq -c | sort -rn |
    awk -v name="$name" -v per="$per" '{t += $1; s = s sprintf(" %s %.2f", $2, $1 / per)} END {printf "%-16s %6.2f per entry:%s\n", name, t / per, s}'
}
mdtest() { # create|stat|remove
  python3 - "$M/md" "$MD_FILES" "$1" <<'PY'
import os, sys
d, n, op = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for i in range(n):
    p = os.path.join(d, "f%07d" % i)
    if op == "create": os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
    elif op == "stat": os.stat(p)
    else: os.unlink(p)
PY
}

echo "kaon cfsd FUSE requests per entry; $N entries of $SRC, $MD_FILES mdtest files; options: ${MOUNT_OPTS:-(default)}; $(uname -r)"
run "untar" "$N" tar -C "$M" -xf "$TAR"
remount
run "ls -lR cold" "$N" ls -lR "$M/$D"
run "ls -lR warm" "$N" ls -lR "$M/$D"
remount
run "find -ls cold" "$N" find "$M/$D" -ls
run "find -ls warm" "$N" find "$M/$D" -ls
run "rm -rf" "$N" rm -rf "$M/$D"
mkdir "$M/md"
run "mdtest create" "$MD_FILES" mdtest create
run "mdtest stat" "$MD_FILES" mdtest stat
remount
run "mdtest stat cold" "$MD_FILES" mdtest stat
run "mdtest remove" "$MD_FILES" mdtest remove
rmdir "$M/md"
