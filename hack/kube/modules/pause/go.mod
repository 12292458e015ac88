// The pod sandbox ("pause") image's only program. No registry is reachable
// here, so hack/kube/build.sh builds it and hack/kube/up.sh imports it.
module xmode.invalid/hack/kube/pause

go 1.26.0
