#!/usr/bin/env bash
# Starts a single-node Kubernetes cluster on this machine for xmode's tests
# and for trying the kubernetes engine (docs/kubernetes.md, "A cluster on
# this machine"). Prints, on stdout, the variables the tests read, as
# `export` lines (eval them); logs go to stderr and to $KUBE_LOGS.
#
# Everything is the cluster's own: a containerd beside dockerd's (own
# config, root, state, socket, runc root), a bridge with a private /24 whose
# .1 is the node IP and the pods' gateway, etcd and the control plane on
# 127.0.0.1, the kubelet on the bridge address, kube-router's firewall
# controller (NetworkPolicy), the agent-sandbox controller out of cluster.
# Pods have no default route and nothing is routed in or out of the bridge;
# the only host service a pod reaches is the apiserver, at its ClusterIP
# or at the bridge address, port 6443.
#
# On a running cluster it does nothing but print the variables. Anything
# else (a cluster half up, or the leftovers of one whose processes were
# killed) is torn down by down.sh first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ "$(id -u)" = 0 ] || die "run as root: the cluster needs a bridge, iptables rules, mounts and cgroups"

cache=$("$here/build.sh")
bin=$cache/bin
kubectl() { "$bin/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
sock=$KUBE_RUN/containerd.sock
components=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-router agent-sandbox-controller)

print_env() {
	cat "$KUBE_STATE/env"
}

# alive NAME: the process recorded for NAME runs, and is what was started.
alive() {
	local pid
	pid=$(cat "$KUBE_RUN/$1.pid" 2>/dev/null) || return 1
	[ -n "$pid" ] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q -- "$1"
}

running() {
	local c
	[ -f "$KUBE_STATE/env" ] || return 1
	for c in "${components[@]}"; do alive "$c" || return 1; done
	kubectl get --raw /readyz >/dev/null 2>&1
}

if running; then
	log "already running (hack/kube/down.sh stops it)"
	print_env
	exit 0
fi

missing=()
for c in containerd:containerd ctr:containerd runc:runc iptables:iptables ipset:ipset openssl:openssl ip:iproute2 flock:util-linux; do
	command -v "${c%%:*}" >/dev/null || missing+=("${c#*:}")
done
etcd_bin=${HACK_KUBE_ETCD:-$(command -v etcd || true)}
[ -x "$etcd_bin" ] || missing+=(etcd-server)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
[ -x /bin/busybox ] || missing+=(busybox-static)
[ ${#missing[@]} = 0 ] || die "missing: apt-get install ${missing[*]}"

"$here/down.sh" --quiet
start=$(date +%s)
mkdir -p "$KUBE_STATE" "$KUBE_RUN" "$KUBE_LOGS" "$KUBE_STATE/pki"
chmod 0700 "$KUBE_STATE" "$KUBE_STATE/pki"
# Remember which of the kubelet's fixed paths were absent (the topmost
# absent directory of each), so down.sh removes only what the kubelet made.
for p in "${KUBE_KUBELET_STRAYS[@]}"; do
	[ -e "$p" ] && continue
	while [ ! -e "$(dirname "$p")" ]; do p=$(dirname "$p"); done
	echo "$p"
done | sort -u >"$KUBE_STATE/kubelet-strays"

# run NAME CMD...: start a daemon detached, its output in a log file, its
# PID recorded; with a clean environment (etcd reads ETCD_* as flags).
run() {
	local name=$1
	shift
	setsid env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@" \
		>"$KUBE_LOGS/$name.log" 2>&1 </dev/null &
	echo $! >"$KUBE_RUN/$name.pid"
}

# wait_for WHAT SECONDS CMD...: poll CMD until it succeeds.
wait_for() {
	local what=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	die "$what not ready after ${secs}s; logs in $KUBE_LOGS"
}

# --- certificates: one CA, a certificate per component (EC P-256) --------
pki=$KUBE_STATE/pki
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
	-subj /CN=xmode-kube-ca -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
# cert NAME CN O EXTKEYUSAGE [SANS]
cert() {
	local ext="extendedKeyUsage=$4"
	[ -z "${5:-}" ] || ext+=$'\n'"subjectAltName=$5"
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-subj "/CN=$2${3:+/O=$3}" -keyout "$pki/$1.key" 2>/dev/null |
		openssl x509 -req -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 3650 \
			-extfile <(echo "$ext") -out "$pki/$1.crt" 2>/dev/null
}
cert apiserver kube-apiserver "" serverAuth \
	"IP:127.0.0.1,IP:$KUBE_NODE_IP,IP:$KUBE_SVC_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters clientAuth
cert kubelet-server "system:node:$KUBE_NODE" "" serverAuth "IP:$KUBE_NODE_IP,DNS:$KUBE_NODE"
cert kubelet "system:node:$KUBE_NODE" system:nodes clientAuth
cert admin xmode-kube-admin system:masters clientAuth
cert controller-manager system:kube-controller-manager "" clientAuth
cert scheduler system:kube-scheduler "" clientAuth
# kube-router and the agent-sandbox controller are test-only add-ons of
# this cluster: they get admin rights rather than a role of their own.
cert kube-router xmode-kube-router system:masters clientAuth
cert agent-sandbox xmode-agent-sandbox-controller system:masters clientAuth
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
# kubeconfig NAME: a kubeconfig for NAME's certificate.
kubeconfig() {
	cat >"$pki/$1.kubeconfig" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: xmode
		  cluster:
		    server: https://127.0.0.1:$KUBE_APISERVER_PORT
		    certificate-authority: $pki/ca.crt
		users:
		- name: $1
		  user:
		    client-certificate: $pki/$1.crt
		    client-key: $pki/$1.key
		contexts:
		- name: xmode
		  context: {cluster: xmode, user: $1}
		current-context: xmode
	EOF
}
for k in admin controller-manager scheduler kubelet kube-router agent-sandbox; do kubeconfig "$k"; done
chmod 0600 "$pki"/*

# --- network: the bridge, the CNI config, the rules ----------------------
ip link add "$KUBE_BRIDGE" type bridge
ip addr add "$KUBE_NODE_IP/24" dev "$KUBE_BRIDGE"
ip link set "$KUBE_BRIDGE" up
# Lets the apiserver's address translation below reach 127.0.0.1 from this
# bridge only; the INPUT rules admit nothing else that arrives on it.
sysctl -qw "net.ipv4.conf.$KUBE_BRIDGE.route_localnet=1"
if [ ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
	modprobe br_netfilter 2>/dev/null || log "warning: no br_netfilter: NetworkPolicy between pods is not enforced"
fi
mkdir -p "$KUBE_STATE/cni/net.d" "$KUBE_STATE/cni/ipam"
cat >"$KUBE_STATE/cni/net.d/10-xmode.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "xmode-kube",
  "plugins": [{
    "type": "bridge",
    "bridge": "$KUBE_BRIDGE",
    "isGateway": true,
    "isDefaultGateway": false,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "$KUBE_POD_CIDR", "rangeStart": "$KUBE_NET.2", "gateway": "$KUBE_NODE_IP"}]],
      "routes": [{"dst": "$KUBE_SVC_CIDR"}],
      "dataDir": "$KUBE_STATE/cni/ipam"
    }
  }]
}
EOF
# Pod<->pod on the bridge passes (filter: docker's FORWARD policy is DROP and
# bridge-nf-call-iptables is on; kube-router's policy chains go ahead of
# this). Guards in mangle, which runs before filter and so before
# kube-router's chains (which accept what a policy allows): nothing is
# forwarded in or out of the bridge, and from the bridge the host accepts
# only the apiserver (after translation) and replies.
iptables -w -N "$KUBE_CHAIN-FWD"
iptables -w -A "$KUBE_CHAIN-FWD" -i "$KUBE_BRIDGE" -o "$KUBE_BRIDGE" -j ACCEPT
# Frames between two containers on one docker bridge pass as docker itself
# lets them (its default, inter-container communication on): with
# bridge-nf-call-iptables on they cross FORWARD, and a rule of docker's lost
# to a concurrent rewrite of the table would cut them off. Only bridged
# frames: what is routed between networks meets docker's isolation rules.
iptables -w -A "$KUBE_CHAIN-FWD" ! -i "$KUBE_BRIDGE" -m physdev --physdev-is-bridged -j ACCEPT
iptables -w -I FORWARD 1 -j "$KUBE_CHAIN-FWD"
iptables -w -t mangle -N "$KUBE_CHAIN-FWD"
iptables -w -t mangle -A "$KUBE_CHAIN-FWD" -i "$KUBE_BRIDGE" ! -o "$KUBE_BRIDGE" -j DROP
iptables -w -t mangle -A "$KUBE_CHAIN-FWD" ! -i "$KUBE_BRIDGE" -o "$KUBE_BRIDGE" -j DROP
iptables -w -t mangle -I FORWARD 1 -j "$KUBE_CHAIN-FWD"
iptables -w -t mangle -N "$KUBE_CHAIN-IN"
iptables -w -t mangle -A "$KUBE_CHAIN-IN" -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
iptables -w -t mangle -A "$KUBE_CHAIN-IN" -p tcp -d 127.0.0.1 --dport "$KUBE_APISERVER_PORT" -m conntrack --ctstate DNAT -j RETURN
iptables -w -t mangle -A "$KUBE_CHAIN-IN" -j DROP
iptables -w -t mangle -I INPUT 1 -i "$KUBE_BRIDGE" -j "$KUBE_CHAIN-IN"
# nat: the apiserver's ClusterIP and the bridge address lead to the
# apiserver on 127.0.0.1 (there is no kube-proxy; this is its one service).
iptables -w -t nat -N "$KUBE_CHAIN"
iptables -w -t nat -A "$KUBE_CHAIN" -p tcp -d "$KUBE_SVC_IP" --dport 443 -j DNAT --to-destination "127.0.0.1:$KUBE_APISERVER_PORT"
iptables -w -t nat -A "$KUBE_CHAIN" -p tcp -d "$KUBE_NODE_IP" --dport "$KUBE_APISERVER_PORT" -j DNAT --to-destination "127.0.0.1:$KUBE_APISERVER_PORT"
iptables -w -t nat -I PREROUTING 1 -i "$KUBE_BRIDGE" -j "$KUBE_CHAIN"

# --- containerd: a second one, all its paths its own ---------------------
mkdir -p "$KUBE_STATE/containerd" "$KUBE_RUN/containerd" "$KUBE_RUN/runc" "$KUBE_STATE/opt"
cat >"$KUBE_STATE/containerd.toml" <<EOF
version = 2
root = "$KUBE_STATE/containerd"
state = "$KUBE_RUN/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$KUBE_STATE/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$KUBE_PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_unprivileged_ports = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$KUBE_RUN/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$KUBE_STATE/cni/net.d"
EOF
run containerd containerd --config "$KUBE_STATE/containerd.toml"

# --- etcd and the control plane, on 127.0.0.1 ----------------------------
run etcd "$etcd_bin" --name xmode --data-dir "$KUBE_STATE/etcd" \
	--listen-client-urls "http://127.0.0.1:$KUBE_ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$KUBE_ETCD_PORT" \
	--listen-peer-urls "http://127.0.0.1:$KUBE_ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$KUBE_ETCD_PEER_PORT" \
	--initial-cluster "xmode=http://127.0.0.1:$KUBE_ETCD_PEER_PORT"
run kube-apiserver "$bin/kube-apiserver" \
	--bind-address=127.0.0.1 --secure-port="$KUBE_APISERVER_PORT" --advertise-address="$KUBE_NODE_IP" \
	--etcd-servers="http://127.0.0.1:$KUBE_ETCD_PORT" \
	--service-cluster-ip-range="$KUBE_SVC_CIDR" \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
	--client-ca-file="$pki/ca.crt" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
	--kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
	--kubelet-certificate-authority="$pki/ca.crt" --kubelet-preferred-address-types=InternalIP \
	--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
	--allow-privileged=false --profiling=false
wait_for "the apiserver" 180 kubectl get --raw /readyz
for c in controller-manager scheduler; do
	run "kube-$c" "$bin/kube-$c" --kubeconfig="$pki/$c.kubeconfig" \
		--authentication-kubeconfig="$pki/$c.kubeconfig" --authorization-kubeconfig="$pki/$c.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false \
		$([ "$c" = controller-manager ] && echo --use-service-account-credentials=true \
			--service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
			--allocate-node-cidrs=true --cluster-cidr="$KUBE_POD_CIDR" --node-cidr-mask-size=24)
done

# --- images: the pause program and busybox, in docker-save archives ------
img=$(mktemp -d)
mkdir -p "$img/pause"
cp "$bin/pause" "$img/pause/pause"
image_tar "$KUBE_PAUSE_IMAGE" "$img/pause" '{"Entrypoint":["/pause"]}' "$img/pause.tar"
# The test image: static busybox with a link per applet, the host's git
# and the libraries it links (the engine conformance suite runs git in the
# sandbox), /tmp, and users root, nobody and the sandbox user 65532.
r=$img/busybox
mkdir -p "$r"/{bin,etc,proc,sys,dev,root,home,usr/bin,var,workspace} && install -d -m 1777 "$r/tmp"
cp /bin/busybox "$r/bin/busybox"
for a in $(/bin/busybox --list); do
	[ "$a" = busybox ] || ln -s busybox "$r/bin/$a"
done
if git=$(command -v git); then
	git=$(readlink -f "$git")
	cp "$git" "$r/usr/bin/git"
	for lib in $(ldd "$git" | grep -o '/[^ ]*'); do
		mkdir -p "$r$(dirname "$lib")" && cp -L "$lib" "$r$lib"
	done
fi
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\nsandbox:x:65532:65532:sandbox:/tmp:/bin/sh\n' >"$r/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\nsandbox:x:65532:\n' >"$r/etc/group"
image_tar "$KUBE_TEST_IMAGE" "$r" '{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":["sh"]}' "$img/busybox.tar"
wait_for containerd 30 ctr --address "$sock" version
for t in pause busybox; do
	ctr --address "$sock" -n k8s.io images import "$img/$t.tar" >/dev/null
done
rm -rf "$img"

# --- the kubelet, serving on the bridge address --------------------------
mkdir -p "$KUBE_STATE/kubelet"
cat >"$KUBE_STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# this machine is cgroup v1 without systemd
failCgroupV1: false
cgroupDriver: cgroupfs
# root here lacks CAP_SYS_RESOURCE (see containerd's restrict_oom_score_adj)
oomScoreAdj: 0
address: $KUBE_NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-server.crt
tlsPrivateKeyFile: $pki/kubelet-server.key
containerRuntimeEndpoint: unix://$sock
clusterDomain: cluster.local
# no DNS: pods get an empty resolv.conf, so no name leads off the host
resolvConf: ""
podLogsDir: $KUBE_STATE/pod-logs
volumePluginDir: $KUBE_STATE/volume-plugins
# a bound per pod; the node is shared with other work
podPidsLimit: 4096
# the disk is shared: never evict for it, never collect the imported images
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
failSwapOn: false
# the rules up.sh adds guard the host; the kubelet's own chains would
# outlive it on a shared machine
makeIPTablesUtilChains: false
EOF
run kubelet "$bin/kubelet" --config="$KUBE_STATE/kubelet.yaml" --kubeconfig="$pki/kubelet.kubeconfig" \
	--root-dir="$KUBE_STATE/kubelet" --node-ip="$KUBE_NODE_IP" --hostname-override="$KUBE_NODE"

node_ready() { kubectl get node "$KUBE_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True; }
wait_for "node $KUBE_NODE" 120 node_ready

# --- add-ons, out of cluster, once the node exists -----------------------
# kube-router's firewall controller only: it enforces NetworkPolicy with
# iptables and ipsets (a test-only component; see build.sh). Its chains
# appear once it has synced. Its iptables-restore rewrites its own chains
# only, so its syncs never undo the docker daemon's edits of the filter
# table (kube-router-path/iptables-restore says how).
run kube-router env PATH="$here/kube-router-path:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "$bin/kube-router" --kubeconfig="$pki/kube-router.kubeconfig" --hostname-override="$KUBE_NODE" \
	--run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
	--service-cluster-ip-range="$KUBE_SVC_CIDR" --metrics-port=0 --health-port=0
wait_for "kube-router's firewall" 60 iptables -w -n -L KUBE-ROUTER-FORWARD
# The controller wants its CRDs served before it starts.
kubectl apply --server-side -f "$cache/crds/" >/dev/null
kubectl wait --for condition=established --timeout=60s -f "$cache/crds/" >"$KUBE_LOGS/crds.log" 2>&1 ||
	die "agent-sandbox's CRDs are not served: $(tail -3 "$KUBE_LOGS/crds.log")"
run agent-sandbox-controller "$bin/agent-sandbox-controller" --kubeconfig="$pki/agent-sandbox.kubeconfig" \
	--extensions=true --leader-elect=false --metrics-bind-address=0 --health-probe-bind-address=0
wait_for "the default service account" 120 kubectl -n default get serviceaccount default
sleep 1
for c in "${components[@]}"; do
	alive "$c" || die "$c stopped: $(tail -3 "$KUBE_LOGS/$c.log")"
done

cat >"$KUBE_STATE/env" <<EOF
export XMODE_TEST_KUBECONFIG=$KUBECONFIG_ADMIN
export XMODE_TEST_KUBE_IMAGE=$KUBE_TEST_IMAGE
export XMODE_TEST_KUBE_AGENT_SANDBOX=1
export XMODE_TEST_KUBE_NETPOL=1
EOF
log "up in $(($(date +%s) - start)) s: kubectl --kubeconfig $KUBECONFIG_ADMIN get nodes"
print_env
