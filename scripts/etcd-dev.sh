#!/usr/bin/env bash
# A local etcd cluster for development and manual tests of Kaon's etcd
# engine (internal/kv/etcdkv). Go tests start their own with
# integration/etcdtest, with the same flags.
#
#   scripts/etcd-dev.sh start DIR [N]   N members (default 3) of Debian's
#                                       etcd-server on loopback, installed
#                                       with apt if missing; waits until healthy
#   scripts/etcd-dev.sh status DIR      each member: pid, health
#   scripts/etcd-dev.sh stop DIR        stops the members started in DIR
#   scripts/etcd-dev.sh purge DIR       stop, then remove DIR
#
# Member i keeps its data in DIR/mI, its log in DIR/mI.log and its pid in
# DIR/mI.pid; DIR/endpoints holds the client URLs, comma-separated. Ports:
# the first free run of 2N from ETCD_DEV_PORT (default 23790): member i
# serves clients on base+2i and peers on base+2i+1; a restart in the same
# DIR reuses them (DIR/base, DIR/size). The limits are raised
# over etcd's defaults (128 operations, 1.5 MiB per request) to match the
# tests: --max-txn-ops 4096 --max-request-bytes 8388608. ETCD_DEV_FLAGS
# adds flags to every member (e.g. "--quota-backend-bytes 8589934592").
set -euo pipefail

usage() { echo "usage: $0 start|stop|status|purge DIR [N]" >&2; exit 2; }
(($# >= 2)) || usage
cmd=$1 dir=$2 n=${3:-3}
MAX_TXN_OPS=4096
MAX_REQUEST_BYTES=$((8 << 20))
START_TIMEOUT=60 # seconds for the members to elect a leader
STOP_TIMEOUT=20  # seconds before SIGTERM becomes SIGKILL

install_etcd() {
	command -v etcd >/dev/null && command -v etcdctl >/dev/null && return
	local sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "installing Debian's etcd-server and etcd-client" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq etcd-server etcd-client >/dev/null
}

# port_free PORT: no TCP socket on this host uses PORT, listening or not
# (a connection's local port blocks a bind too).
port_free() { ! ss -Htan "sport = :$1" 2>/dev/null | grep -q .; }

# ours PIDFILE: the pid in PIDFILE if it is still an etcd serving this DIR
# (a reused pid of another process is never signalled).
ours() {
	local pid
	pid=$(cat "$1" 2>/dev/null) || return 1
	[ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "--data-dir $(realpath -m "$dir")/m" || return 1
	echo "$pid"
}

healthy() { curl -fsS --max-time 2 "$1/health" 2>/dev/null | grep -q '"health":"true"'; }

# free_base FROM: the first base >= FROM whose 2N ports nobody listens on.
free_base() {
	local base=$1 tries=0 i ok
	while :; do
		ok=1
		for ((i = 0; i < 2 * n; i++)); do port_free $((base + i)) || { ok=0; break; }; done
		((ok)) && break
		base=$((base + 2 * n)) tries=$((tries + 1))
		((tries < 50)) || { echo "no $((2 * n)) free ports from $1" >&2; exit 1; }
	done
	echo "$base"
}

# launch BASE: starts the N members on BASE's ports and waits until they
# are healthy. Returns 2 when a member could not bind its port (another
# process took it since free_base looked), 1 on any other failure.
launch() {
	local base=$1 initial="" eps="" i
	for ((i = 0; i < n; i++)); do
		initial+="${initial:+,}m$i=http://127.0.0.1:$((base + 2 * i + 1))"
		eps+="${eps:+,}http://127.0.0.1:$((base + 2 * i))"
	done
	local token="kaon-dev-$$-$(date +%s)"
	for ((i = 0; i < n; i++)); do
		local c="http://127.0.0.1:$((base + 2 * i))" p="http://127.0.0.1:$((base + 2 * i + 1))"
		# Environment variables ETCD_* would override the flags.
		env $(env | sed -n 's/^\(ETCD[A-Z_]*\)=.*/-u \1/p') \
			setsid etcd --name "m$i" --data-dir "$dir/m$i" \
			--listen-client-urls "$c" --advertise-client-urls "$c" \
			--listen-peer-urls "$p" --initial-advertise-peer-urls "$p" \
			--initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token "$token" \
			--max-txn-ops "$MAX_TXN_OPS" --max-request-bytes "$MAX_REQUEST_BYTES" \
			--logger zap --log-outputs stderr --log-level warn ${ETCD_DEV_FLAGS:-} \
			</dev/null >>"$dir/m$i.log" 2>&1 &
		echo $! >"$dir/m$i.pid"
	done
	echo "$eps" >"$dir/endpoints"
	local deadline=$((SECONDS + START_TIMEOUT))
	for ((i = 0; i < n; i++)); do
		until healthy "http://127.0.0.1:$((base + 2 * i))"; do
			# Our own child: its pid cannot be reused before we reap it, and
			# its command line is still this shell's until it execs etcd.
			if ! kill -0 "$(cat "$dir/m$i.pid")" 2>/dev/null || [[ $(ps -o stat= -p "$(cat "$dir/m$i.pid")") == Z* ]]; then
				stop
				grep "address already in use" "$dir/m$i.log" | tail -n 1 >&2 && return 2
				echo "member m$i exited; its log:" >&2; tail -n 20 "$dir/m$i.log" >&2; return 1
			fi
			if ((SECONDS > deadline)); then
				echo "member m$i not healthy after ${START_TIMEOUT}s; its log:" >&2; tail -n 20 "$dir/m$i.log" >&2; stop; return 1
			fi
			sleep 0.1
		done
	done
}

start() {
	install_etcd
	mkdir -p "$dir"
	dir=$(realpath "$dir")
	for f in "$dir"/m*.pid; do
		[ -e "$f" ] || continue
		if ours "$f" >/dev/null; then echo "$dir: members already running (stop first)" >&2; exit 1; fi
	done
	local base i rc attempt
	if [ -e "$dir/base" ]; then
		# Restart: the members' data records their peer URLs.
		base=$(cat "$dir/base") n=$(cat "$dir/size")
		for ((i = 0; i < 2 * n; i++)); do
			port_free $((base + i)) || { echo "port $((base + i)) of $dir's cluster is taken" >&2; exit 1; }
		done
		launch "$base" || exit 1
	else
		base=$(free_base "${ETCD_DEV_PORT:-23790}")
		for attempt in 1 2 3 4 5; do
			rc=0
			launch "$base" || rc=$?
			((rc == 0)) && break
			((rc == 2 && attempt < 5)) || { [ $rc = 2 ] && echo "ports taken by other processes 5 times; giving up" >&2; exit 1; }
			# A new cluster that lost a port race: start over on other ports.
			echo "a port of $base..$((base + 2 * n - 1)) was taken meanwhile; trying other ports" >&2
			for ((i = 0; i < n; i++)); do rm -rf "$dir/m$i" "$dir/m$i.log"; done
			base=$(free_base $((base + 2 * n)))
		done
		echo "$base" >"$dir/base"
		echo "$n" >"$dir/size"
	fi
	cat "$dir/endpoints"
}

stop() {
	local f pid deadline
	for f in "$dir"/m*.pid; do
		[ -e "$f" ] || continue
		if pid=$(ours "$f"); then
			kill -TERM "$pid" 2>/dev/null || true
			deadline=$((SECONDS + STOP_TIMEOUT))
			while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
			if kill -0 "$pid" 2>/dev/null; then
				echo "$(basename "$f" .pid) (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s: SIGKILL" >&2
				kill -KILL "$pid" 2>/dev/null || true
			fi
		fi
		rm -f "$f"
	done
}

status() {
	local f m pid ep i=0 rc=0
	[ -e "$dir/endpoints" ] || { echo "$dir: no cluster"; return 1; }
	IFS=, read -ra eps <"$dir/endpoints"
	for ep in "${eps[@]}"; do
		m=m$i f="$dir/m$i.pid"
		if pid=$(ours "$f"); then
			if healthy "$ep"; then echo "$m pid $pid $ep healthy"; else echo "$m pid $pid $ep NOT healthy"; rc=1; fi
		else
			echo "$m $ep stopped"; rc=1
		fi
		i=$((i + 1))
	done
	return $rc
}

case $cmd in
start) start ;;
stop) stop ;;
status) status ;;
purge) stop; rm -rf "$dir" ;;
*) usage ;;
esac
