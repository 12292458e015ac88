#!/usr/bin/env bash
# Imports a directory as a one-layer image into the test cluster's
# containerd (namespace k8s.io), the way up.sh imports its test image: the
# cluster has no registry, so tests that make an image of their own (the
# egress proxy's, FROM scratch with xmode's static binary; the egress
# probe's) bring it in with this. Pods then run it with
# imagePullPolicy: Never.
#
#	hack/kube/image.sh REF ROOTFS [CONFIG_JSON]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ "$(id -u)" = 0 ] || die "run as root: it writes to the cluster's containerd"
[ $# -ge 2 ] || die "usage: $0 REF ROOTFS [CONFIG_JSON]"
ref=$1 root=$2 cfg=${3:-"{}"}
[ -d "$root" ] || die "$root is not a directory"
[ -S "$KUBE_RUN/containerd.sock" ] || die "the cluster's containerd is not running: hack/kube/up.sh starts it"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
image_tar "$ref" "$root" "$cfg" "$out"
ctr --address "$KUBE_RUN/containerd.sock" -n k8s.io images import "$out" >/dev/null
