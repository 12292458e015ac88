#!/usr/bin/env bash
# Stops the cluster hack/kube/up.sh started and removes every trace of it:
# pods (through CRI, so CNI releases their addresses and veths) before
# containerd stops, the shims and containers of this containerd only, the
# mounts under the cluster's directories, its bridge, iptables chains,
# kube-router's chains and ipsets, the kubepods cgroups, and the kubelet's
# fixed paths that were absent before up.sh. The build cache stays.
#
# Safe to run at any time, as often as wanted: on a stopped cluster it
# does nothing; after a cluster whose processes were killed it cleans up.
# Nothing outside the cluster's own directories, bridge, chains and
# cgroups is touched. With --check it then looks for any trace left and
# exits 1 naming it (CI runs it so).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ "$(id -u)" = 0 ] || die "run as root"
quiet=false check=false
for a in "$@"; do
	case "$a" in
	--quiet) quiet=true ;;
	--check) check=true ;;
	*) die "down.sh: unknown argument $a (--quiet, --check)" ;;
	esac
done
say() { $quiet || log "$@"; }
sock=$KUBE_RUN/containerd.sock

# ours PID: the process is one of the cluster's: a program of the build
# cache, or containerd, a shim of it or etcd naming the cluster's paths.
# (A recycled PID, or anything else that mentions the paths, is left alone.)
ours() {
	local exe
	exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
	case "$exe" in
	"$KUBE_CACHE"/*/bin/*) return 0 ;;
	*/containerd | */containerd-shim* | */etcd*)
		tr '\0' '\n' 2>/dev/null <"/proc/$1/cmdline" | grep -q -e "^$KUBE_STATE/" -e "^$KUBE_RUN/" -e "^--data-dir=$KUBE_STATE/"
		return
		;;
	esac
	return 1
}

# stop NAME...: TERM the recorded processes, then KILL what is left after
# ten seconds.
stop() {
	local name pid any pids=()
	for name in "$@"; do
		pid=$(cat "$KUBE_RUN/$name.pid" 2>/dev/null) || continue
		rm -f "$KUBE_RUN/$name.pid"
		if [ -n "$pid" ] && ours "$pid"; then
			kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
		fi
	done
	[ ${#pids[@]} = 0 ] && return
	for _ in $(seq 1 50); do
		any=false
		for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && any=true; done
		$any || return 0
		sleep 0.2
	done
	kill -KILL "${pids[@]}" 2>/dev/null
}

# What may still run: the add-ons and the kubelet first (so nothing
# recreates pods), then the control plane.
stop agent-sandbox-controller kube-router kubelet
stop kube-scheduler kube-controller-manager kube-apiserver etcd

# Pods through CRI while containerd still runs: CNI gives back their
# addresses and removes their veths.
crictl=$(ls -d "$KUBE_CACHE"/*/bin/crictl 2>/dev/null | head -1)
if [ -S "$sock" ] && [ -n "$crictl" ]; then
	cri=("$crictl" --runtime-endpoint "unix://$sock" --timeout 20s)
	pods=$("${cri[@]}" pods -q 2>/dev/null)
	if [ -n "$pods" ]; then
		say "removing $(echo "$pods" | wc -l) pod(s) through CRI"
		# shellcheck disable=SC2086
		"${cri[@]}" stopp $pods >/dev/null 2>&1
		# shellcheck disable=SC2086
		"${cri[@]}" rmp -f $pods >/dev/null 2>&1
	fi
fi
stop containerd

# Whatever outlived that, found by the cluster's paths in its command line
# (processes whose PID files were lost): shims of this containerd (they
# name its socket), daemons started from the build cache.
for p in /proc/[0-9]*; do
	pid=${p#/proc/}
	[ "$pid" = $$ ] && continue
	if ours "$pid"; then
		say "killing leftover $(tr '\0' ' ' 2>/dev/null <"$p/cmdline" | cut -c1-80)"
		kill -KILL "$pid" 2>/dev/null
	fi
done
# Containers' processes: every process in the kubepods cgroups is a pod's.
for ctl in /sys/fs/cgroup/*/kubepods; do
	[ -d "$ctl" ] || continue
	for _ in 1 2 3 4 5; do
		procs=$(find "$ctl" -name cgroup.procs -exec cat {} + 2>/dev/null)
		[ -z "$procs" ] && break
		# shellcheck disable=SC2086
		kill -KILL $procs 2>/dev/null
		sleep 0.2
	done
done
# runc's state of this containerd's containers.
if [ -d "$KUBE_RUN/runc" ]; then
	for id in $(runc --root "$KUBE_RUN/runc" list -q 2>/dev/null); do
		runc --root "$KUBE_RUN/runc" delete -f "$id" >/dev/null 2>&1
	done
fi

# Mounts under the cluster's directories (overlay roots, shm, network
# namespaces, the kubelet's volumes), deepest first.
for dir in "$KUBE_STATE" "$KUBE_RUN"; do
	awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r | while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
	done
done

# The network: veths left on the bridge, the bridge, our chains, and
# kube-router's chains and ipsets (its --cleanup-config panics here).
if ip link show "$KUBE_BRIDGE" >/dev/null 2>&1; then
	for v in $(ip -o link show master "$KUBE_BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
		ip link del "$v" 2>/dev/null
	done
	ip link del "$KUBE_BRIDGE"
	say "removed bridge $KUBE_BRIDGE"
fi
# delete_chains TABLE PATTERN: remove the jumps to chains matching PATTERN
# from every chain (by number, last first: rules carry quoted comments),
# then flush and delete those chains.
delete_chains() {
	local t=$1 pat=$2 chain line n nums k
	for chain in $(iptables -w -t "$t" -S | awk '$1 == "-P" || $1 == "-N" { print $2 }'); do
		n=0 nums=()
		while read -r line; do
			[ "${line%% *}" = -A ] || continue
			n=$((n + 1))
			echo "$line" | grep -qE -- "-j ($pat)( |$)" && nums=("$n" "${nums[@]}")
		done < <(iptables -w -t "$t" -S "$chain")
		for k in "${nums[@]}"; do iptables -w -t "$t" -D "$chain" "$k"; done
	done
	for chain in $(iptables -w -t "$t" -S | awk '$1 == "-N" { print $2 }' | grep -E -- "^($pat)$"); do
		iptables -w -t "$t" -F "$chain"
	done
	for chain in $(iptables -w -t "$t" -S | awk '$1 == "-N" { print $2 }' | grep -E -- "^($pat)$"); do
		iptables -w -t "$t" -X "$chain"
	done
}
kr_chains='KUBE-ROUTER-[A-Z-]+|KUBE-POD-FW-[A-Z0-9]+|KUBE-NWPLCY-[A-Z0-9]+'
for t in filter nat mangle; do
	delete_chains "$t" "$KUBE_CHAIN(-[A-Z]+)?|$kr_chains"
done
if command -v ipset >/dev/null; then
	for s in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-SRC-|KUBE-DST-|kube-router-)'); do
		ipset destroy "$s" 2>/dev/null
	done
fi

# The kubepods cgroups, deepest first (each is empty by now).
for ctl in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
	[ -d "$ctl" ] && find "$ctl" -depth -type d -exec rmdir {} + 2>/dev/null
done

# The kubelet's fixed paths, only those up.sh found absent.
if [ -f "$KUBE_STATE/kubelet-strays" ]; then
	while read -r p; do
		# a recorded path must be one of those or a directory above one,
		# three levels deep at least (/var/lib/kubelet, not /var/lib)
		for s in "${KUBE_KUBELET_STRAYS[@]}"; do
			case "$s/" in "$p"/*) [ "$(echo "$p" | tr -cd / | wc -c)" -ge 3 ] && rm -rf --one-file-system "$p" ;; esac
		done
	done <"$KUBE_STATE/kubelet-strays"
fi

# The cluster's directories (the build cache stays). --one-file-system
# leaves alone a mount that would not come off.
rm -rf --one-file-system "$KUBE_STATE" "$KUBE_RUN"
say "down"
$check || exit 0

left=()
for p in /proc/[0-9]*; do ours "${p#/proc/}" && left+=("process ${p#/proc/}: $(tr '\0' ' ' 2>/dev/null <"$p/cmdline" | cut -c1-80)"); done
ip link show "$KUBE_BRIDGE" >/dev/null 2>&1 && left+=("bridge $KUBE_BRIDGE")
for t in filter nat mangle; do
	for c in $(iptables -w -t "$t" -S | awk '$1 == "-N" { print $2 }' | grep -E "^($KUBE_CHAIN(-[A-Z]+)?|$kr_chains)$"); do
		left+=("iptables chain $t/$c")
	done
done
for s in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-SRC-|KUBE-DST-|kube-router-)'); do left+=("ipset $s"); done
while read -r m; do left+=("mount $m"); done < <(awk -v s="$KUBE_STATE/" -v r="$KUBE_RUN/" 'index($2, s) == 1 || index($2, r) == 1 { print $2 }' /proc/self/mounts)
for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do [ -d "$c" ] && left+=("cgroup $c"); done
for d in "$KUBE_STATE" "$KUBE_RUN"; do [ -e "$d" ] && left+=("directory $d"); done
if [ ${#left[@]} -gt 0 ]; then
	printf 'kube: left behind: %s\n' "${left[@]}" >&2
	exit 1
fi
say "nothing left behind"
exit 0
