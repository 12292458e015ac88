package kubetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/internal/testenv"
)

// The test cluster's kube-router restores the filter table through
// hack/kube/kube-router-path/iptables-restore, which rewrites kube-router's
// chains only. Fed what kube-router feeds it — the whole table as saved a
// moment ago, edited — in a network namespace of its own, it leaves a
// docker chain as it is now (not as the stale save had it), replaces a
// kube chain's rules in kube-router's order (-A, then -I at the top),
// and deletes the kube chain kube-router dropped.
func TestKubeRouterRestoreKeepsOthersChains(t *testing.T) {
	shim := requireShim(t)
	stale := `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER-LIKE - [0:0] - [0:0]
:KUBE-ROUTER-FORWARD - [0:0] - [0:0]
:KUBE-POD-FW-NEW - [0:0]
-A FORWARD -j KUBE-ROUTER-FORWARD
-A DOCKER-LIKE -s 10.0.0.1/32 -j ACCEPT
-A KUBE-ROUTER-FORWARD -d 10.1.0.2/32 -j KUBE-POD-FW-NEW
-A KUBE-POD-FW-NEW -j DROP
-I KUBE-POD-FW-NEW 1 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
`
	script := `set -e
iptables -w -N DOCKER-LIKE
iptables -w -A DOCKER-LIKE -s 10.0.0.2/32 -j ACCEPT
iptables -w -N KUBE-ROUTER-FORWARD
iptables -w -N KUBE-POD-FW-OLD
iptables -w -A KUBE-ROUTER-FORWARD -d 10.1.0.1/32 -j KUBE-POD-FW-OLD
iptables -w -A FORWARD -j KUBE-ROUTER-FORWARD
PATH="$SHIM:$PATH" iptables-restore --wait -T filter <<'EOF'
` + stale + `EOF
iptables-save -t filter
`
	got := inNetns(t, shim, script)
	for _, want := range []string{
		"-A DOCKER-LIKE -s 10.0.0.2/32 -j ACCEPT", // as it is now
		"-A KUBE-ROUTER-FORWARD -d 10.1.0.2/32 -j KUBE-POD-FW-NEW",
		"-A KUBE-POD-FW-NEW -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A KUBE-POD-FW-NEW -j DROP",
		"-A FORWARD -j KUBE-ROUTER-FORWARD\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("after the restore the table lacks %q:\n%s", want, got)
		}
	}
	for _, gone := range []string{"10.0.0.1/32", "KUBE-POD-FW-OLD", "10.1.0.1/32"} {
		if strings.Contains(got, gone) {
			t.Errorf("after the restore the table still has %q:\n%s", gone, got)
		}
	}
	if n := strings.Count(got, "-A FORWARD -j KUBE-ROUTER-FORWARD"); n != 1 {
		t.Errorf("FORWARD jumps to kube-router's chain %d times, want once:\n%s", n, got)
	}
}

// kube-router keeps its jump first in FORWARD by inserting it again at the
// top and deleting the old one by number; the docker daemon inserting a
// rule meanwhile shifts the numbers. Through the test cluster's iptables,
// that delete removes the old jump, not the docker rule now at its number.
func TestKubeRouterMoveKeepsOthersRules(t *testing.T) {
	shim := requireShim(t)
	got := inNetns(t, shim, `set -e
iptables -w -N KUBE-ROUTER-FORWARD
iptables -w -N DOCKER-USER
iptables -w -A FORWARD -m comment --comment "kube-router netpol - X" -j KUBE-ROUTER-FORWARD
iptables -w -I FORWARD 1 -i br-a -o br-a -j ACCEPT
iptables -w -I FORWARD 1 -j DOCKER-USER
iptables -w -I FORWARD 1 -m comment --comment "kube-router netpol - X" -j KUBE-ROUTER-FORWARD
iptables -w -I FORWARD 2 -i br-b -o br-b -j ACCEPT
PATH="$SHIM:$PATH" iptables --wait -t filter -D FORWARD 4
PATH="$SHIM:$PATH" iptables --wait -t filter -D FORWARD -i br-b -o br-b -j ACCEPT
iptables -S FORWARD
`)
	want := "-A FORWARD -m comment --comment \"kube-router netpol - X\" -j KUBE-ROUTER-FORWARD\n" +
		"-A FORWARD -j DOCKER-USER\n" +
		"-A FORWARD -i br-a -o br-a -j ACCEPT"
	if !strings.Contains(got, want) || strings.Count(got, "KUBE-ROUTER-FORWARD") != 1 {
		t.Errorf("FORWARD after the move:\n%s\nwant:\n%s", got, want)
	}
}

// requireShim is the directory hack/kube puts first on kube-router's PATH,
// with what a test of it needs: root, a network namespace, iptables, nft.
func requireShim(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root for a network namespace and iptables")
	}
	for _, tool := range []string{"unshare", "iptables", "iptables-save", "iptables-restore", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "%s is not installed", tool)
		}
	}
	shim, err := filepath.Abs("../../hack/kube/kube-router-path")
	if err != nil {
		t.Fatal(err)
	}
	return shim
}

// inNetns runs script with bash in a network namespace of its own (its own
// filter table), SHIM naming the shim's directory, and returns its output.
func inNetns(t *testing.T, shim, script string) string {
	t.Helper()
	cmd := exec.Command("unshare", "-n", "bash", "-c", script)
	cmd.Env = append(os.Environ(), "SHIM="+shim)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return string(out)
}
