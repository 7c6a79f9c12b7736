# peers.sh: sourced by bench/mount/bench.sh and io500.sh. Sets up the file
# systems named in $FS (kaon cfsd mfs weed ceph ext4) under a new work
# directory $W: D[fs] is the directory measured, D2[fs] the same directory
# through a second mount (kaon, mfs, weed, ceph), FSL the names set up in
# order. Everything it starts (PIDs, mounts, the network namespace, a
# ceph-dev.sh cluster it made, $W) is undone at exit. Needs $repo, $FS;
# KAON, WEED, CEPH_DIR as bench.sh describes.
W=$(mktemp -d /var/tmp/kaon-mount-bench.XXXXXX)
mkdir -p "$W/m"
KAON=${KAON:-$W/kaon}
[ -x "$KAON" ] || go -C "$repo" build -o "$KAON" ./cmd/kaon
has() { [[ " $FS " == *" $1 "* ]]; }

log() { echo "bench/mount [$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)]: $*" >&2; }
PIDS=() MNTS=() NS="" CEPH_MADE="" CEPH_MNTS=() CFSD=""
cleanup() {
	set +e
	for mp in "${CEPH_MNTS[@]}"; do "$repo/scripts/ceph-dev.sh" umount "$CEPH_DIR" "$mp" >/dev/null 2>&1; done
	[ -n "$CEPH_MADE" ] && "$repo/scripts/ceph-dev.sh" purge "$CEPH_DIR" >/dev/null 2>&1
	[ -n "$CFSD" ] && "$KAON" cfsd umount "$CFSD" # the daemon saves its state and exits
	for mp in "${MNTS[@]}"; do
		mountpoint -q "$mp" && { fusermount3 -u "$mp" 2>/dev/null || umount "$mp" 2>/dev/null || umount -l "$mp"; }
	done
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null
	done
	[ -n "$NS" ] && ip netns del "$NS"
	# the daemons' logs outlive the run (the runs that failed are read there)
	[ -n "${OUT:-}" ] && mkdir -p "$OUT/logs" && (cd "$W" && find . -maxdepth 2 -name '*.log' -size -20M -exec cp --parents {} "$OUT/logs/" \;)
	rm -rf --one-file-system "$W"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP # so that cleanup runs
# bg LOG CMD...: start CMD in the background, its PID kept for cleanup.
bg() { local l=$1; shift; "$@" >"$l" 2>&1 & PIDS+=($!); }
waitmnt() { # MOUNTPOINT PID WHAT
	for _ in $(seq 600); do
		mountpoint -q "$1" && return 0
		kill -0 "$2" 2>/dev/null || { log "$3 exited before mounting $1"; return 1; }
		sleep 0.1
	done
	log "$3: $1 not mounted within 60s"; return 1
}
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---- the file systems: D[fs] the directory measured, D2[fs] the same
# directory through a second mount (for visibility) ----------------------
declare -A D D2
mkdir -p "$W/ext4"
D[ext4]=$W/ext4
if has kaon; then
	mkdir -p "$W/kaon-data" "$W/m/kaon1" "$W/m/kaon2"
	bg "$W/kaon-up.log" "$KAON" up --data "$W/kaon-data" --http 127.0.0.1:0 --xrootd ""
	up=${PIDS[-1]}
	for _ in $(seq 600); do grep -qs "\"pid\": *$up" "$W/kaon-data/endpoints.json" && break; sleep 0.1; done
	KURL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$W/kaon-data/endpoints.json")
	KAON_URL=$KURL "$KAON" mkdir /b
	for i in 1 2; do
		MNTS+=("$W/m/kaon$i")
		bg "$W/kaon-mount$i.log" "$KAON" mount -f --url "$KURL" --subtree /b --cache "$W/kaon-cache$i" "$W/m/kaon$i"
		waitmnt "$W/m/kaon$i" "${PIDS[-1]}" "kaon mount"
	done
	D[kaon]=$W/m/kaon1 D2[kaon]=$W/m/kaon2
fi
if has cfsd; then
	mkdir -p "$W/cfsd-backend" "$W/m/cfsd"
	MNTS+=("$W/m/cfsd") CFSD=$W/m/cfsd
	"$KAON" cfsd mount --backend "$W/cfsd-backend" --log "$W/cfsd.log" "$W/m/cfsd"
	D[cfsd]=$W/m/cfsd
fi
if has mfs; then
	NS=kaonbench-mfs-$$ IP=10.211.$((RANDOM % 250)).1
	ip netns add "$NS"
	ip -n "$NS" link set lo up
	ip -n "$NS" addr add "$IP/32" dev lo
	INNS=(nsenter --net="/run/netns/$NS") # nsenter execs the daemon: its PID is the daemon's
	M=$W/mfs
	mkdir -p "$M/master" "$M/cs" "$M/chunks" "$W/m/mfs1" "$W/m/mfs2"
	chown mfs:mfs "$M/chunks" "$M/master" "$M/cs" 2>/dev/null || true
	cp /var/lib/mfs/metadata.mfs.empty "$M/master/metadata.mfs"
	echo "* / rw,alldirs,maproot=0" >"$M/exports.cfg"
	: >"$M/topology.cfg"
	echo "$M/chunks" >"$M/hdd.cfg"
	cat >"$M/master.cfg" <<-EOF
		WORKING_USER = root
		WORKING_GROUP = root
		SYSLOG_IDENT = kaonbench-mfsmaster
		DATA_PATH = $M/master
		EXPORTS_FILENAME = $M/exports.cfg
		TOPOLOGY_FILENAME = $M/topology.cfg
		MATOML_LISTEN_HOST = $IP
		MATOCS_LISTEN_HOST = $IP
		MATOCL_LISTEN_HOST = $IP
	EOF
	cat >"$M/cs.cfg" <<-EOF
		WORKING_USER = root
		WORKING_GROUP = root
		SYSLOG_IDENT = kaonbench-mfschunkserver
		DATA_PATH = $M/cs
		HDD_CONF_FILENAME = $M/hdd.cfg
		HDD_LEAVE_SPACE_DEFAULT = 1GiB
		BIND_HOST = $IP
		MASTER_HOST = $IP
		CSSERV_LISTEN_HOST = $IP
	EOF
	bg "$M/master.log" "${INNS[@]}" mfsmaster -f -c "$M/master.cfg"
	for _ in $(seq 600); do grep -qs 'initialized properly' "$M/master.log" && break; sleep 0.1; done
	bg "$M/cs.log" "${INNS[@]}" mfschunkserver -f -c "$M/cs.cfg"
	for _ in $(seq 600); do grep -qs 'connected to Master' "$M/cs.log" && break; sleep 0.1; done
	for i in 1 2; do
		MNTS+=("$W/m/mfs$i")
		bg "$M/mount$i.log" "${INNS[@]}" mfsmount -f -H "$IP" "$W/m/mfs$i"
		waitmnt "$W/m/mfs$i" "${PIDS[-1]}" mfsmount
	done
	# writes fail ("No chunk servers") until the chunkserver has scanned
	# its folder and reported its space to the master
	for _ in $(seq 600); do grep -qs 'scanning folder.*complete' "$M/cs.log" && break; sleep 0.1; done
	for _ in $(seq 60); do
		timeout 10 dd if=/dev/zero of="$W/m/mfs1/probe" bs=64k count=1 conv=fsync 2>/dev/null && break
		sleep 1
	done
	rm -f "$W/m/mfs1/probe"
	mkdir -p "$W/m/mfs1/b"
	D[mfs]=$W/m/mfs1/b D2[mfs]=$W/m/mfs2/b
fi
if has weed; then
	WEED=${WEED:-$("$repo/bench/mount/weed-build.sh")}
	S=$W/weed
	mkdir -p "$S/data" "$W/m/weed1" "$W/m/weed2"
	mp=$(freeport) mg=$(freeport) vp=$(freeport) vg=$(freeport) fp=$(freeport) fg=$(freeport)
	bg "$S/server.log" "$WEED" server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$S/data" \
		-master.port="$mp" -master.port.grpc="$mg" -master.volumeSizeLimitMB=1024 \
		-volume.port="$vp" -volume.port.grpc="$vg" -volume.max=30 \
		-filer -filer.port="$fp" -filer.port.grpc="$fg"
	for _ in $(seq 600); do curl -sf "http://127.0.0.1:$fp/" >/dev/null && break; sleep 0.1; done
	for i in 1 2; do
		MNTS+=("$W/m/weed$i")
		bg "$S/mount$i.log" "$WEED" mount -filer="127.0.0.1:$fp.$fg" -dir="$W/m/weed$i" -filer.path=/ -cacheDir="$S/cache$i"
		waitmnt "$W/m/weed$i" "${PIDS[-1]}" "weed mount"
	done
	mkdir -p "$W/m/weed1/b"
	D[weed]=$W/m/weed1/b D2[weed]=$W/m/weed2/b
fi
if has ceph; then
	if [ -z "${CEPH_DIR:-}" ]; then
		CEPH_DIR=$W/ceph CEPH_MADE=1
		"$repo/scripts/ceph-dev.sh" start "$CEPH_DIR" >&2
	fi
	for i in 1 2; do
		CEPH_MNTS+=("$W/m/ceph$i")
		"$repo/scripts/ceph-dev.sh" mount "$CEPH_DIR" "$W/m/ceph$i" >&2
	done
	mkdir -p "$W/m/ceph1/mount-bench-$$"
	D[ceph]=$W/m/ceph1/mount-bench-$$ D2[ceph]=$W/m/ceph2/mount-bench-$$
	trap 'rm -rf "${D[ceph]}"; cleanup' EXIT
fi
FSL=()
for f in kaon cfsd mfs weed ceph ext4; do [ -n "${D[$f]:-}" ] && FSL+=("$f"); done
log "file systems: ${FSL[*]}; work dir $W"
