#!/usr/bin/env bash
# Builds, or reuses from the cache, what hack/kube/up.sh runs: the
# Kubernetes binaries, kube-router, the agent-sandbox controller and its
# CRDs, crictl and the pause program, all from the Go module proxy at the
# versions modules/*/go.mod pin. Prints the cache directory on stdout.
#
# The cache directory is named by a stamp (Kubernetes version, Go version, a
# hash of this script and the modules), so a change to any of them builds
# afresh and a reused machine skips the build. A build goes to a temporary
# directory that is renamed into place only when complete: an interrupted
# build never leaves a half cache.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
export PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || die "go is not on PATH"
# readonly: a build never edits the pinned modules (the stamp hashes them)
export CGO_ENABLED=0 GOFLAGS=-mod=readonly

k8s_version=$(cd "$here/modules/kubernetes" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
go_version=$(go env GOVERSION)
hash=$(cd "$here" && cat build.sh modules/*/go.mod modules/*/go.sum modules/pause/*.go | sha256sum | cut -c1-12)
stamp=k8s-$k8s_version-$go_version-$hash
out=$KUBE_CACHE/$stamp

mkdir -p "$KUBE_CACHE"
exec 9>"$KUBE_CACHE/.lock"
flock 9 # one build at a time; a second waits and then reuses the first's
if [ -f "$out/STAMP" ]; then
	log "reusing $out"
	echo "$out"
	exit 0
fi
# Leftovers of builds that were killed (the lock says none is running).
rm -rf "$KUBE_CACHE"/.tmp-*
tmp=$(mktemp -d "$KUBE_CACHE/.tmp-$stamp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin" "$tmp/crds"
start=$(date +%s)
strip=(-trimpath -ldflags "-s -w")

# The five Kubernetes binaries, with the version stamped as upstream's
# hack/lib/version.sh does (else they report v0.0.0).
minor=${k8s_version#v1.}
minor=${minor%%.*}
kv=()
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
	kv+=("-X $pkg.gitVersion=$k8s_version" "-X $pkg.gitMajor=1" "-X $pkg.gitMinor=$minor"
		"-X $pkg.gitTreeState=clean" "-X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)")
done
log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl $k8s_version (cold: ~10 min on 2 cores)"
(cd "$here/modules/kubernetes" && go build -trimpath -ldflags "-s -w ${kv[*]}" -o "$tmp/bin/" \
	k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl)
log "kubernetes built in $(($(date +%s) - start)) s"

# kube-router v2.1.0 serves one purpose: its firewall controller enforces
# NetworkPolicy in the tests. Security flaws are reported for this
# version; it runs only on this test cluster, never in a product path.
log "building kube-router (firewall controller), agent-sandbox-controller, crictl, pause"
(cd "$here/modules/kube-router" && go build "${strip[@]}" -o "$tmp/bin/" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router)
(cd "$here/modules/agent-sandbox" && go build "${strip[@]}" -o "$tmp/bin/" sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller)
(cd "$here/modules/cri-tools" && go build "${strip[@]}" -o "$tmp/bin/" sigs.k8s.io/cri-tools/cmd/crictl)
(cd "$here/modules/pause" && go build "${strip[@]}" -o "$tmp/bin/pause" .)
# agent-sandbox's CRDs ship in its module.
crds=$(cd "$here/modules/agent-sandbox" && go list -m -f '{{.Dir}}' sigs.k8s.io/agent-sandbox)/k8s/crds
cp "$crds"/*.yaml "$tmp/crds/"
chmod -R u+w,go-w "$tmp"

{
	echo "stamp $stamp"
	echo "kubernetes $k8s_version"
	echo "go $go_version"
	(cd "$here/modules/kube-router" && go list -m -f '{{.Path}} {{.Version}}' github.com/cloudnativelabs/kube-router/v2)
	(cd "$here/modules/agent-sandbox" && go list -m -f '{{.Path}} {{.Version}}' sigs.k8s.io/agent-sandbox)
	(cd "$here/modules/cri-tools" && go list -m -f '{{.Path}} {{.Version}}' sigs.k8s.io/cri-tools)
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(($(date +%s) - start)) s"
} >"$tmp/STAMP"
chmod 0755 "$tmp"
mv -T "$tmp" "$out"
trap - EXIT
log "built $out in $(($(date +%s) - start)) s"
echo "$out"
