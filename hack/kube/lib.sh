# Shared settings of hack/kube's scripts (sourced, not run). Every name and
# address the cluster uses is here, so that up.sh and down.sh agree on what
# is theirs. Each may be overridden from the environment.

# The build cache: one directory per stamp, never half written.
KUBE_CACHE=${HACK_KUBE_CACHE:-/var/cache/xmode-kube}
# Persistent state (etcd, containerd's root, the kubelet, certificates,
# kubeconfigs, logs) and run-time state (sockets, PIDs, containerd's state,
# runc's root). down.sh removes both.
KUBE_STATE=${HACK_KUBE_STATE:-/var/lib/xmode-kube}
KUBE_RUN=${HACK_KUBE_RUN:-/run/xmode-kube}
KUBE_LOGS=$KUBE_STATE/logs

# The cluster's own bridge and private /24: its .1 is the node IP and the
# pods' gateway. Services get the /24 after it; only the apiserver's
# ClusterIP (its .1) answers there, redirected to the apiserver (no
# kube-proxy runs).
KUBE_BRIDGE=${HACK_KUBE_BRIDGE:-xkube0}
KUBE_NET=${HACK_KUBE_NET:-10.227.27}
KUBE_SVC_NET=${HACK_KUBE_SVC_NET:-10.227.28}
KUBE_NODE_IP=$KUBE_NET.1
KUBE_POD_CIDR=$KUBE_NET.0/24
KUBE_SVC_CIDR=$KUBE_SVC_NET.0/24
KUBE_SVC_IP=$KUBE_SVC_NET.1
KUBE_NODE=${HACK_KUBE_NODE:-xmode-node}

# Loopback ports.
KUBE_APISERVER_PORT=6443
KUBE_ETCD_PORT=12379
KUBE_ETCD_PEER_PORT=12380

# The iptables chain of our own (filter and nat tables).
KUBE_CHAIN=XMODE-KUBE

# Images, imported into containerd's k8s.io namespace (no registry: the
# .invalid domain can never resolve, so a pull of them fails at once).
KUBE_PAUSE_IMAGE=xmode.invalid/pause:1
KUBE_TEST_IMAGE=xmode.invalid/busybox:1

KUBECONFIG_ADMIN=$KUBE_STATE/pki/admin.kubeconfig

# The kubelet creates these whatever its root directory is; down.sh removes
# them only when up.sh found them absent.
KUBE_KUBELET_STRAYS=(/var/lib/kubelet/device-plugins /var/log/containers /var/lib/cni/results)

# image_tar REF ROOTFS CONFIG_JSON OUT: a one-layer image archive as
# `docker save` writes it.
image_tar() {
	local ref=$1 root=$2 cfg=$3 out=$4 d layer diff cfgsum
	d=$(mktemp -d)
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$d/layer.tar" .
	diff=$(sha256sum "$d/layer.tar" | cut -d' ' -f1)
	mkdir "$d/$diff" && mv "$d/layer.tar" "$d/$diff/layer.tar"
	printf '{"architecture":"amd64","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$cfg" "$diff" >"$d/config.json"
	cfgsum=$(sha256sum "$d/config.json" | cut -d' ' -f1)
	mv "$d/config.json" "$d/$cfgsum.json"
	printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfgsum" "$ref" "$diff" >"$d/manifest.json"
	tar -C "$d" -cf "$out" manifest.json "$cfgsum.json" "$diff"
	rm -rf "$d"
}

log() { echo "kube: $*" >&2; }
die() {
	echo "kube: $*" >&2
	exit 1
}

# down.sh removes the state directories whole: refuse any that is not
# plainly the cluster's own.
for d in "$KUBE_STATE" "$KUBE_RUN"; do
	case "$d" in
	/*/*kube*) ;;
	*) die "$d: the cluster's directories must be absolute and named for it (…/*kube*): check HACK_KUBE_STATE and HACK_KUBE_RUN" ;;
	esac
done
