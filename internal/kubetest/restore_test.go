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
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root for a network namespace and iptables")
	}
	for _, tool := range []string{"unshare", "iptables", "iptables-save", "iptables-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "%s is not installed", tool)
		}
	}
	shim, err := filepath.Abs("../../hack/kube/kube-router-path")
	if err != nil {
		t.Fatal(err)
	}
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
	cmd := exec.Command("unshare", "-n", "bash", "-c", script)
	cmd.Env = append(os.Environ(), "SHIM="+shim)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := string(out)
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
