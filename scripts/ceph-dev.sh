#!/usr/bin/env bash
# ceph-dev.sh: a throw-away single-host Ceph cluster for Kaon's tests and
# benchmarks (docs/CEPH.md). One MON, one MGR, three OSDs, one MDS, cephx on,
# everything (config, keys, data, logs, pid files, sockets) under DIR, bound
# to 127.0.0.1. It touches only daemons it started, found by their pid files.
#
#   ceph-dev.sh install              install the Debian packages it needs (start does too)
#   ceph-dev.sh start DIR            create (or restart) the cluster, wait until ready
#   ceph-dev.sh status DIR           ceph -s and which daemons are alive
#   ceph-dev.sh wait DIR             wait until all OSDs are up, the MDS active, all PGs active+clean
#   ceph-dev.sh stop DIR             unmount its mounts, stop its daemons, wait for them to exit
#   ceph-dev.sh purge DIR            kill its daemons, remove DIR
#   ceph-dev.sh mount DIR MOUNTPOINT     ceph-fuse mount of the CephFS (as client.kaon)
#   ceph-dev.sh umount DIR MOUNTPOINT    unmount it and wait for ceph-fuse to exit
#   ceph-dev.sh kill-osd DIR ID      kill -9 one OSD, wait until the cluster marks it down
#   ceph-dev.sh start-osd DIR ID     start it again, wait until ready
#   ceph-dev.sh freeze DIR           SIGSTOP every OSD: the cluster stops answering (I/O waits)
#   ceph-dev.sh thaw DIR             SIGCONT them, wait until ready
#
# Knobs (environment):
#   CEPH_DEV_OSD=bluestore|memstore  object store (bluestore on sparse files by default)
#   CEPH_DEV_OSD_SIZE_GB=10          size of each OSD (sparse file, or RAM for memstore)
#   CEPH_DEV_TIMEOUT=180             deadline in seconds for each wait
#   CEPH_DEV_CLIENT=kaon             client id used by mount (kaon or admin)
#   CEPH_DEV_VERBOSE=1               log every change seen while waiting (else every 10s)
set -euo pipefail
unset CEPH_ARGS CEPH_CONF # only our own configuration counts
umask 077                 # keyrings hold secrets

PKGS=(ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse ceph-common python3-rados attr fuse3)
FS_NAME=kaonfs
META_POOL=kaonfs_metadata
DATA_POOL=kaonfs_data
EC_POOL=kaonfs_ec
EC_PROFILE=kaon-ec21
RADOS_POOL=kaon-rados
CLIENT=kaon
NOSD=3
MARKER_TEXT="ceph-dev cluster"
OSD_STORE=${CEPH_DEV_OSD:-bluestore}
OSD_SIZE_GB=${CEPH_DEV_OSD_SIZE_GB:-10}
TIMEOUT=${CEPH_DEV_TIMEOUT:-180}
T0=$SECONDS

log() { echo "ceph-dev [$((SECONDS - T0))s]: $*" >&2; }
die() {
	echo "ceph-dev: error: $*" >&2
	exit 1
}
usage() {
	sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
	exit 2
}

# ---- packages --------------------------------------------------------------

ensure_packages() {
	local missing=() p
	for p in "${PKGS[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	log "installing ${missing[*]}"
	local sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	log "packages installed"
}

# ---- paths and helpers -----------------------------------------------------

set_dir() {
	[ -n "${1:-}" ] || usage
	DIR=$(realpath -m -s -- "$1")
	# The path goes into ceph.conf and unix socket names: keep it plain and short.
	[[ $DIR =~ ^[A-Za-z0-9_./+-]+$ ]] || die "$DIR: use a directory path of letters, digits and ._+-/ only"
	((${#DIR} <= 80)) || die "$DIR: path longer than 80 characters (admin socket names would not fit)"
	CONF=$DIR/ceph.conf
	MARKER=$DIR/.ceph-dev
	RUN=$DIR/run
	LOGS=$DIR/log
	DATA=$DIR/data
	MOUNTS=$DIR/mounts
}

is_ours() { [ -f "$MARKER" ] && [ "$(head -n1 "$MARKER")" = "$MARKER_TEXT" ]; }
require_ours() { is_ours || die "$DIR: not a ceph-dev cluster directory (no $MARKER)"; }
require_complete() {
	require_ours
	[ -f "$DIR/env" ] || die "$DIR: cluster creation did not finish; run: $0 purge $DIR"
}

# ceph CLI as client.admin, bounded so a dead MON cannot hang us.
cephc() { timeout 90 ceph -c "$CONF" --connect-timeout 30 "$@"; }

# The pid in PIDFILE if that process is alive and is one of ours: its command
# line names this cluster's ceph.conf (pids get reused).
live_pid() {
	local pidfile=$1 pid
	[ -f "$pidfile" ] || return 1
	pid=$(head -n1 "$pidfile" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$CONF" || return 1
	# A zombie has exited already.
	[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
	echo "$pid"
}

# Run a command with its output going to LOGFILE; on failure show its tail.
run_logged() {
	local logfile=$1
	shift
	if ! "$@" </dev/null >>"$logfile" 2>&1; then
		echo "ceph-dev: error: failed: $*" >&2
		tail -n 20 "$logfile" >&2
		return 1
	fi
}

# wait_until DESCRIPTION COMMAND...: poll until COMMAND succeeds or the
# deadline passes; COMMAND may set LAST to say what it saw.
LAST=""
wait_until() {
	local what=$1 deadline=$((SECONDS + TIMEOUT)) next=$((SECONDS + 10)) seen=""
	shift
	LAST=""
	until "$@"; do
		if ((SECONDS >= deadline)); then
			die "timed out after ${TIMEOUT}s waiting for: $what${LAST:+ (last seen: $LAST)}"
		fi
		if [ -n "${CEPH_DEV_VERBOSE:-}" ] && [ "$LAST" != "$seen" ] || ((SECONDS >= next)); then
			log "waiting for $what: $LAST"
			seen=$LAST
			next=$((SECONDS + 10))
		fi
		sleep 1
	done
}

free_port() {
	local p tries=0
	while ((tries++ < 200)); do
		p=$((20000 + RANDOM % 12000))
		if ! ss -Htln "sport = :$p" 2>/dev/null | grep -q .; then
			echo "$p"
			return 0
		fi
	done
	die "no free TCP port found for the MON"
}

# ---- configuration ---------------------------------------------------------

write_conf() {
	local fsid=$1 port=$2 store_conf
	if [ "$OSD_STORE" = memstore ]; then
		store_conf="osd_objectstore = memstore
memstore_device_bytes = $((OSD_SIZE_GB * 1024 * 1024 * 1024))"
	else
		store_conf="osd_objectstore = bluestore
bluestore_block_create = true
bluestore_block_size = $((OSD_SIZE_GB * 1024 * 1024 * 1024))"
	fi
	cat >"$CONF" <<EOF
# Written by scripts/ceph-dev.sh (docs/CEPH.md explains each setting).
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:$port]
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
ms_bind_msgr1 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
run_dir = $RUN
crash_dir = $DIR/crash
mon_data = $DATA/mon.\$id
mgr_data = $DATA/mgr.\$id
osd_data = $DATA/osd.\$id
mds_data = $DATA/mds.\$id
mon_cluster_log_file = $LOGS/cluster.log
# One host: replicas and EC chunks go to distinct OSDs, not hosts.
osd_crush_chooseleaf_type = 0
osd_pool_default_size = 3
osd_pool_default_min_size = 2
osd_pool_default_pg_autoscale_mode = off
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
mon_allow_pool_delete = true
# The host disk is shared; do not warn (or stop the MON) over its free space.
mon_data_avail_warn = 2
mon_data_avail_crit = 1
mgr_initial_modules = iostat
# The MON batches map changes once a second by default; setup makes a dozen.
paxos_propose_interval = 0.1
osd_memory_target = 939524096
osd_recovery_sleep_hdd = 0
osd_recovery_sleep_hybrid = 0
$store_conf

[mon]
log_file = $LOGS/\$name.log
pid_file = $RUN/\$name.pid
[mgr]
log_file = $LOGS/\$name.log
pid_file = $RUN/\$name.pid
# Loading a module costs start time even when it stays off: load only the
# always-on ones and iostat.
mgr_disabled_modules = alerts,cephadm,dashboard,diskprediction_local,influx,insights,k8sevents,localpool,mirroring,nfs,osd_perf_query,osd_support,prometheus,restful,rook,selftest,snap_schedule,stats,telegraf,test_orchestrator,zabbix
[osd]
log_file = $LOGS/\$name.log
pid_file = $RUN/\$name.pid
[mds]
log_file = $LOGS/\$name.log
pid_file = $RUN/\$name.pid
[client]
keyring = $DIR/\$name.keyring
log_file = $LOGS/\$name.log
EOF
}

write_env() {
	local fsid port
	fsid=$(awk '$1 == "fsid" {print $3}' "$CONF")
	port=$(sed -n 's/^mon_host = \[v2:127\.0\.0\.1:\([0-9]*\)\]$/\1/p' "$CONF")
	cat >"$DIR/env.tmp" <<EOF
export CEPH_DEV_DIR=$DIR
export CEPH_CONF=$CONF
export CEPH_FSID=$fsid
export CEPH_MON_HOST=v2:127.0.0.1:$port
export CEPH_ADMIN_KEYRING=$DIR/client.admin.keyring
export CEPH_CLIENT=$CLIENT
export CEPH_CLIENT_KEYRING=$DIR/client.$CLIENT.keyring
export CEPH_FS=$FS_NAME
export CEPH_FS_METADATA_POOL=$META_POOL
export CEPH_FS_DATA_POOL=$DATA_POOL
export CEPH_FS_EC_POOL=$EC_POOL
export CEPH_RADOS_POOL=$RADOS_POOL
export CEPH_OSD_STORE=$(awk '$1 == "osd_objectstore" {print $3}' "$CONF")
EOF
	mv "$DIR/env.tmp" "$DIR/env"
}

# ---- daemons ---------------------------------------------------------------

# start_daemon TYPE ID: start ceph-TYPE -i ID unless it is alive; the daemon
# forks once initialised and writes its pid file.
start_daemon() {
	local type=$1 id=$2
	if live_pid "$RUN/$type.$id.pid" >/dev/null; then
		return 0
	fi
	run_logged "$LOGS/$type.$id.stderr" "ceph-$type" -c "$CONF" -i "$id" ||
		die "starting $type.$id failed (see $LOGS/$type.$id.log)"
}

osd_ids() {
	local d
	for d in "$DATA"/osd.*; do
		[ -d "$d" ] && echo "${d##*/osd.}"
	done
}

# Run the ceph commands on stdin in one CLI process (each process costs about
# half a second); the CLI exits 0 even when a command fails, so look at what
# it says.
ceph_batch() {
	local out
	if ! out=$(cephc 2>&1) || grep -q '^Error' <<<"$out"; then
		die "ceph command failed: $out"
	fi
}

# new_key NAME FILE CAPS...: a keyring with a fresh key for NAME; the key
# never appears on a command line.
new_key() {
	local name=$1 file=$2
	shift 2
	ceph-authtool --create-keyring "$file" --gen-key -n "$name" "$@" >/dev/null
}

create_osd() {
	local id=$1
	run_logged "$LOGS/osd.$id.stderr" ceph-osd -c "$CONF" -i "$id" --mkfs --osd-uuid "$(cat "$DATA/osd.$id/uuid")" ||
		die "mkfs of osd.$id failed (see $LOGS/osd.$id.log)"
	start_daemon osd "$id"
}

create_cluster() {
	local fsid port id p pids=() batch
	[ -e "$DIR" ] && [ -n "$(ls -A "$DIR")" ] && die "$DIR exists and is not empty"
	if [ "$OSD_STORE" != bluestore ] && [ "$OSD_STORE" != memstore ]; then
		die "CEPH_DEV_OSD=$OSD_STORE: use bluestore or memstore"
	fi
	mkdir -p "$DIR"
	if [ "$OSD_STORE" = bluestore ] && [ "$(stat -f -c %T "$DIR")" = tmpfs ]; then
		die "$DIR is on tmpfs, where bluestore cannot open its file with O_DIRECT; use another directory or CEPH_DEV_OSD=memstore"
	fi
	echo "$MARKER_TEXT" >"$MARKER" # first, so purge can clean up a failed start
	mkdir -p "$RUN" "$LOGS" "$DATA" "$MOUNTS" "$DIR/crash"
	fsid=$(cat /proc/sys/kernel/random/uuid)
	port=$(free_port)
	write_conf "$fsid" "$port"
	log "creating cluster $fsid in $DIR (MON on 127.0.0.1:$port, $NOSD $OSD_STORE OSDs)"

	# Every key is made here and handed to the MON at mkfs, which imports
	# them with their caps: no "ceph auth" round trips later.
	mkdir -p "$DATA/mgr.x" "$DATA/mds.a"
	new_key mon. "$DIR/mon.keyring" --cap mon 'allow *'
	new_key client.admin "$DIR/client.admin.keyring" \
		--cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *'
	new_key "client.$CLIENT" "$DIR/client.$CLIENT.keyring" \
		--cap mon 'allow r' --cap mgr 'allow r' --cap mds "allow rwp fsname=$FS_NAME" \
		--cap osd "allow rw tag cephfs data=$FS_NAME, allow rwx pool=$RADOS_POOL"
	new_key mgr.x "$DATA/mgr.x/keyring" --cap mon 'allow profile mgr' --cap osd 'allow *' --cap mds 'allow *'
	new_key mds.a "$DATA/mds.a/keyring" \
		--cap mon 'allow profile mds' --cap osd 'allow rwx' --cap mds 'allow' --cap mgr 'allow profile mds'
	for ((id = 0; id < NOSD; id++)); do
		mkdir -p "$DATA/osd.$id"
		cat /proc/sys/kernel/random/uuid >"$DATA/osd.$id/uuid"
		new_key "osd.$id" "$DATA/osd.$id/keyring" --cap mon 'allow profile osd' --cap mgr 'allow profile osd' --cap osd 'allow *'
	done
	for p in "$DIR/client.admin.keyring" "$DIR/client.$CLIENT.keyring" "$DATA"/*/keyring; do
		ceph-authtool "$DIR/mon.keyring" --import-keyring "$p" >/dev/null
	done
	monmaptool --create --addv a "[v2:127.0.0.1:$port]" --fsid "$fsid" "$DIR/monmap" >/dev/null
	run_logged "$LOGS/mon.a.stderr" ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/mon.keyring" ||
		die "mkfs of mon.a failed"
	rm -f "$DIR/mon.keyring" "$DIR/monmap" # the MON keeps its own copy
	start_daemon mon a
	wait_until "MON quorum" mon_up
	log "MON up"
	start_daemon mgr x
	start_daemon mds a # standby until the filesystem exists

	batch=""
	for ((id = 0; id < NOSD; id++)); do
		batch+="osd new $(cat "$DATA/osd.$id/uuid") $id"$'\n'
	done
	# k=2,m=1 defaults to min_size 3, so one OSD down would stop all I/O on
	# the EC pool; min_size 2 keeps it usable for failure tests.
	ceph_batch <<EOF
${batch}osd pool create $META_POOL 8 8 replicated
osd pool create $DATA_POOL 16 16 replicated
osd erasure-code-profile set $EC_PROFILE k=2 m=1 crush-failure-domain=osd
osd pool create $EC_POOL 16 16 erasure $EC_PROFILE
osd pool set $EC_POOL allow_ec_overwrites true
osd pool set $EC_POOL min_size 2
fs new $FS_NAME $META_POOL $DATA_POOL
fs add_data_pool $FS_NAME $EC_POOL
osd pool create $RADOS_POOL 16 16 replicated
osd pool application enable $RADOS_POOL rados
EOF
	log "OSD ids, pools, filesystem $FS_NAME created"

	for ((id = 0; id < NOSD; id++)); do
		create_osd "$id" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		wait "$p" || die "creating the OSDs failed"
	done
	log "OSDs created and started"
}

restart_cluster() {
	local id
	log "restarting the daemons in $DIR"
	start_daemon mon a
	wait_until "MON quorum" mon_up
	# Each daemon returns once initialised (seconds for an OSD): in parallel.
	local pids=() p
	start_daemon mgr x &
	pids+=($!)
	for id in $(osd_ids); do
		start_daemon osd "$id" &
		pids+=($!)
	done
	start_daemon mds a &
	pids+=($!)
	for p in "${pids[@]}"; do
		wait "$p" || die "starting the daemons failed"
	done
}

# ---- readiness -------------------------------------------------------------

mon_up() { LAST=$(cephc --connect-timeout 5 mon stat 2>&1) && [[ $LAST == *"quorum 0 a"* ]]; }

# One readiness probe through librados (one process instead of several ceph
# CLI runs). Stages: osds (all up and in), mds (the filesystem has an active
# MDS), pgs (every PG the OSD map defines is active+clean with a complete
# acting set, in stats newer than the last time any of its OSDs came up:
# the MGR's stats lag behind, e.g. just after an OSD restart they may still
# say active+clean from before it went down).
READY_PY='
import json, sys, rados
conf, stage, nosd, fsname = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
r = rados.Rados(conffile=conf, name="client.admin")
for k, v in (("client_mount_timeout", "15"), ("rados_mon_op_timeout", "15")):
    r.conf_set(k, v)
try:
    r.connect()
except rados.Error as e:
    sys.exit("cannot reach the MON: %s" % e)
def cmd(f, **c):
    try:
        ret, out, err = f(json.dumps(dict(c, format="json")), b"", timeout=15)
    except rados.Error as e:
        ret, err = 1, str(e)
    if ret:
        sys.exit("%s: %s" % (c["prefix"], err))
    return json.loads(out)
osdmap = cmd(r.mon_command, prefix="osd dump")
up = {o["osd"]: o["up_from"] for o in osdmap["osds"] if o["up"] and o["in"]}
if len(osdmap["osds"]) != nosd or len(up) != nosd:
    sys.exit("%d of %d OSDs up and in" % (len(up), nosd))
if stage == "osds":
    sys.exit(0)
fs = [f for f in cmd(r.mon_command, prefix="fs dump")["filesystems"] if f["mdsmap"]["fs_name"] == fsname]
states = [i["state"] for f in fs for i in f["mdsmap"]["info"].values()]
if "up:active" not in states:
    sys.exit("MDS of %s: %s" % (fsname, ", ".join(states) or "none"))
if stage == "mds":
    sys.exit(0)
size = {p["pool"]: p["size"] for p in osdmap["pools"]}
want = sum(p["pg_num"] for p in osdmap["pools"])
pgs = cmd(r.mgr_command, prefix="pg dump", dumpcontents=["pgs"])
pgs = pgs.get("pg_stats", pgs.get("pg_map", {}).get("pg_stats", []))
good, other = 0, {}
for p in pgs:
    acting = [a for a in p["acting"] if a in up]  # EC holes are 2147483647
    fresh = all(p["mapping_epoch"] >= up[a] for a in acting)
    pool = int(p["pgid"].split(".")[0])
    if p["state"] == "active+clean" and fresh and len(acting) == size.get(pool):
        good += 1
    else:
        st = p["state"] if fresh else "stale stats"
        other[st] = other.get(st, 0) + 1
msg = "%d of %d PGs active+clean" % (good, want)
if other:
    msg += " (" + ", ".join("%d %s" % (n, s) for s, n in sorted(other.items())) + ")"
print(msg)
sys.exit(0 if good == want and len(pgs) == want else 1)
'

ready() { LAST=$(timeout 60 /usr/bin/python3 -c "$READY_PY" "$CONF" "$1" "$NOSD" "$FS_NAME" 2>&1); }

wait_ready() {
	wait_until "MON quorum" mon_up
	wait_until "all $NOSD OSDs up and in" ready osds
	log "OSDs up"
	wait_until "an active MDS for $FS_NAME" ready mds
	log "MDS active"
	wait_until "all PGs active+clean" ready pgs
	log "ready: $LAST"
}

# ---- commands --------------------------------------------------------------

cmd_start() {
	ensure_packages
	if is_ours && [ -f "$DIR/env" ]; then
		restart_cluster
	elif is_ours; then
		die "$DIR: an earlier start did not finish; run: $0 purge $DIR"
	else
		create_cluster
	fi
	wait_ready
	write_env
	cat "$DIR/env"
}

cmd_status() {
	require_ours
	local f pid name
	cephc -s || true
	echo "daemons:"
	for f in "$RUN"/*.pid; do
		[ -e "$f" ] || continue
		name=${f##*/}
		name=${name%.pid}
		if [[ $name == fuse-* ]] && [ -f "$MOUNTS/${name#fuse-}" ]; then
			name="ceph-fuse on $(cat "$MOUNTS/${name#fuse-}")"
		fi
		if pid=$(live_pid "$f"); then
			echo "  $name running (pid $pid)"
		else
			echo "  $name not running"
		fi
	done
}

# stop_pids SIGNAL SECONDS PIDFILE...: signal the live ones, wait for them
# to exit, SIGKILL what is left at the deadline and wait 10 s more.
stop_pids() {
	local sig=$1 secs=$2 f pid live=() still deadline killed=""
	shift 2
	for f in "$@"; do
		pid=$(live_pid "$f") || continue
		kill -CONT "$pid" 2>/dev/null || true # a frozen daemon gets the signal only once it runs
		kill "-$sig" "$pid" 2>/dev/null || true
		live+=("$f")
	done
	deadline=$((SECONDS + secs))
	while ((${#live[@]})); do
		still=()
		for f in "${live[@]}"; do
			live_pid "$f" >/dev/null && still+=("$f")
		done
		live=("${still[@]+"${still[@]}"}")
		((${#live[@]})) || break
		if ((SECONDS >= deadline)); then
			[ -z "$killed" ] || die "still running 10s after SIGKILL: ${live[*]}"
			for f in "${live[@]}"; do
				pid=$(live_pid "$f") || continue
				log "${f##*/} did not exit within ${secs}s of SIG$sig; sending SIGKILL"
				kill -KILL "$pid" 2>/dev/null || true
			done
			killed=1
			deadline=$((SECONDS + 10))
		fi
		sleep 0.2
	done
}

# stop_all SIGNAL: unmount this cluster's ceph-fuse mounts, then stop the
# daemons, the MON last (the others report to it as they go).
stop_all() {
	local f others=()
	for f in "$MOUNTS"/*; do
		[ -e "$f" ] || continue
		do_umount "$(cat "$f")"
	done
	if [ "$1" = TERM ] && live_pid "$RUN/mds.a.pid" >/dev/null; then
		# The MGR (its volumes module) holds CephFS sessions. Left in the
		# MDS's session table they make the next start wait in up:reconnect
		# for mds_reconnect_timeout (45 s) unless the new MGR happens to be
		# active first: stop the MGR, then evict what is left.
		stop_pids TERM 30 "$RUN/mgr.x.pid"
		timeout 20 ceph -c "$CONF" --connect-timeout 10 tell mds.a client evict >/dev/null 2>&1 ||
			log "could not evict the MDS's client sessions; the next start may wait up to 45 s for them"
	fi
	for f in "$RUN"/mds.*.pid "$RUN"/osd.*.pid "$RUN"/mgr.*.pid; do
		[ -e "$f" ] && others+=("$f")
	done
	stop_pids "$1" 30 "${others[@]+"${others[@]}"}"
	stop_pids "$1" 30 "$RUN"/mon.a.pid
}

cmd_stop() {
	require_ours
	stop_all TERM
	log "stopped"
}

cmd_purge() {
	# rm -rf runs only on what the marker vouches for; an absent DIR is
	# already purged.
	if [ ! -e "$DIR" ]; then
		return 0
	fi
	require_ours
	case "$DIR" in / | /root | /home | /tmp | /var | /usr | /etc) die "refusing to remove $DIR" ;; esac
	stop_all KILL # the data goes too: no need to shut down cleanly
	rm -rf --one-file-system -- "$DIR"
	log "removed $DIR"
}

mount_key() { printf '%s' "$1" | md5sum | cut -c1-12; }
is_mounted() { awk -v mp="$1" '$2 == mp {f = 1} END {exit !f}' /proc/self/mounts; }

cmd_mount() {
	require_complete
	[ -n "${1:-}" ] || usage
	local mp key client=${CEPH_DEV_CLIENT:-$CLIENT}
	mp=$(realpath -m -s -- "$1")
	[[ $mp =~ ^[A-Za-z0-9_./+-]+$ ]] || die "$mp: use a mount point path of letters, digits and ._+-/ only"
	is_mounted "$mp" && die "$mp is already a mount point"
	key=$(mount_key "$mp")
	mkdir -p "$mp"
	echo "$mp" >"$MOUNTS/$key"
	run_logged "$LOGS/fuse-$key.stderr" ceph-fuse -c "$CONF" --id "$client" --client_fs="$FS_NAME" \
		--pid_file="$RUN/fuse-$key.pid" --log_file="$LOGS/fuse-$key.log" "$mp" ||
		die "ceph-fuse on $mp failed (see $LOGS/fuse-$key.log)"
	wait_until "ceph-fuse mount on $mp" is_mounted "$mp"
	log "CephFS $FS_NAME mounted on $mp as client.$client"
}

do_umount() {
	local mp=$1 key pidfile
	key=$(mount_key "$mp")
	pidfile=$RUN/fuse-$key.pid
	if is_mounted "$mp"; then
		fusermount3 -u "$mp" 2>/dev/null || umount "$mp" 2>/dev/null || umount -l "$mp" ||
			die "cannot unmount $mp"
	fi
	stop_pids TERM 30 "$pidfile"
	rm -f "$pidfile" "$MOUNTS/$key"
}

cmd_umount() {
	require_ours
	[ -n "${1:-}" ] || usage
	do_umount "$(realpath -m -s -- "$1")"
	log "unmounted $1"
}

osd_arg() {
	[[ ${1:-} =~ ^[0-9]+$ ]] || usage
	[ -d "$DATA/osd.$1" ] || die "$DIR has no osd.$1"
}

osd_down() {
	local dump
	dump=$(cephc osd dump 2>&1) || {
		LAST=$dump
		return 1
	}
	LAST=$(awk -v osd="osd.$1" '$1 == osd {print $1, $2, $3}' <<<"$dump")
	[[ $LAST == "osd.$1 down "* ]]
}

cmd_kill_osd() {
	require_complete
	osd_arg "${1:-}"
	local pid
	pid=$(live_pid "$RUN/osd.$1.pid") || die "osd.$1 is not running"
	kill -KILL "$pid"
	wait_until "osd.$1 (pid $pid) marked down" osd_down "$1"
	log "osd.$1 killed and marked down"
}

cmd_start_osd() {
	require_complete
	osd_arg "${1:-}"
	start_daemon osd "$1"
	wait_ready
}

# freeze/thaw: every OSD stopped (not killed): nothing is marked down, and
# every client operation waits, as with a cluster that hangs.
osd_signal() {
	local sig=$1 id pid
	for id in $(osd_ids); do
		pid=$(live_pid "$RUN/osd.$id.pid") || die "osd.$id is not running"
		kill "-$sig" "$pid"
	done
}

cmd_freeze() {
	require_complete
	osd_signal STOP
	log "all OSDs frozen"
}

cmd_thaw() {
	require_complete
	osd_signal CONT
	log "all OSDs thawed"
	wait_ready
}

main() {
	local cmd=${1:-}
	if [ "$cmd" = install ]; then
		ensure_packages
		return
	fi
	[ $# -ge 2 ] || usage
	set_dir "$2"
	shift 2
	case "$cmd" in
	start) cmd_start ;;
	status) cmd_status ;;
	wait)
		require_complete
		wait_ready
		;;
	stop) cmd_stop ;;
	purge) cmd_purge ;;
	mount) cmd_mount "$@" ;;
	umount) cmd_umount "$@" ;;
	kill-osd) cmd_kill_osd "$@" ;;
	start-osd) cmd_start_osd "$@" ;;
	freeze) cmd_freeze ;;
	thaw) cmd_thaw ;;
	*) usage ;;
	esac
}

main "$@"
