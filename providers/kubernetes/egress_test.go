package kubernetes

import (
	"os"
	"time"
	"strings"
	"testing"
)

func TestEgressSmoke(t *testing.T) {
	e := newEgressEnv(t, nil)
	t.Log(e.controlRun("egressprobe", "get", "-noproxy", "http://"+e.allowed.String()+"/"))
	t.Log(e.hits(t, "allowed"))
	sb := e.provision(t, e.policy(t, e.allowOnly()))
	if os.Getenv("XMODE_DEBUG_SLEEP") != "" { time.Sleep(90 * time.Second) }
	if out := e.ok(t, sb, "egressprobe get http://allowed.test/"); !strings.Contains(out, "hello from allowed.test") {
		t.Fatalf("plain HTTP through the proxy: %s", out)
	}
}
