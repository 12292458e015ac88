package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// TestDockerEgressCLI: today's CLI makes a sandbox with an egress policy
// from configuration alone (XMODE_SANDBOX_NETWORK=allow, XMODE_SANDBOX_ALLOW,
// XMODE_SANDBOX_RESOLVE): the allowed host answers, the others are refused
// and recorded; `sandbox stop` keeps the network log in the run's evidence;
// `xmode reap` removes the proxy once no sandbox uses it. The xmode run is
// a static build of this tree (the one the proxy's image is made from).
func TestDockerEgressCLI(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	if !strings.HasPrefix(dockertest.Host(), "unix://") {
		testenv.Skip(t, "bind mode needs the daemon on this machine, and it is at %s", dockertest.Host())
	}
	bin := dockertest.XmodeBinary(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	var upstreamName, allowedIP, deniedIP string
	xm := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(cleanEnv(), "XMODE_STORAGE_ROOT="+root, "XMODE_USER=tester", "HOME="+dir,
			"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker",
			"XMODE_SANDBOX_IMAGE="+dockertest.ProbeImage(t), "XMODE_SANDBOX_NETWORK=allow",
			"XMODE_SANDBOX_EGRESS_BINARY="+bin, "XMODE_SANDBOX_EGRESS_NETWORK="+upstreamName,
			"XMODE_SANDBOX_ALLOW=allowed.test:80 "+allowedIP, "XMODE_SANDBOX_RESOLVE=allowed.test="+allowedIP+",denied.test="+deniedIP)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	// The upstream network is labelled with the storage root's instance
	// (for its cleanup), which the store makes on the first command.
	upstreamName, allowedIP, deniedIP = "bridge", "192.0.2.1", "192.0.2.1"
	if code, _, stderr := xm("sandbox", "list"); code != 0 {
		t.Fatalf("sandbox list: %s", stderr)
	}
	inst, err := os.ReadFile(filepath.Join(root, "xmode.instance"))
	if err != nil {
		t.Fatal(err)
	}
	instance := strings.TrimSpace(string(inst))
	t.Cleanup(func() { dockertest.CleanupInstance(t, cli, instance) })
	up := dockertest.NewUpstream(t, cli, instance)
	upstreamName = up.Name
	allowedIP, deniedIP = up.Host(t, "allowed.test").String(), up.Host(t, "denied.test").String()

	code, out, stderr := xm("sandbox", "create", "--repo", repo, "-q")
	if code != 0 {
		t.Fatalf("sandbox create: exit %d\n%s", code, stderr)
	}
	id := strings.TrimSpace(out)
	if code, out, stderr = xm("sandbox", "exec", id, "--", "egressprobe", "get", "http://allowed.test/"); code != 0 || !strings.Contains(out, "hello from allowed.test") {
		t.Fatalf("the allowed host: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ = xm("sandbox", "exec", id, "--", "egressprobe", "get", "http://denied.test/"); code == 0 || !strings.Contains(out, "STATUS 403") {
		t.Errorf("the denied host: exit %d\n%s", code, out)
	}
	if code, out, _ = xm("sandbox", "exec", id, "--", "egressprobe", "get", "-noproxy", "-timeout", "3s", "http://"+deniedIP+"/"); code == 0 {
		t.Errorf("the denied host's address, straight: exit %d\n%s", code, out)
	}
	if n := len(up.Requests(t, "denied.test")); n != 0 {
		t.Errorf("denied.test was reached %d times", n)
	}
	if code, out, _ = xm("doctor"); !strings.Contains(out, "docker network policy") {
		t.Errorf("doctor: exit %d\n%s", code, out)
	}
	if code, _, stderr = xm("sandbox", "stop", id); code != 0 {
		t.Fatalf("sandbox stop: %s", stderr)
	}
	logs, _ := filepath.Glob(filepath.Join(root, "runs", "*", "network", id+".jsonl"))
	if len(logs) != 1 {
		t.Fatalf("the network log was not kept in the run's evidence: %v", logs)
	}
	s, err := egress.SummarizeFile(logs[0], time.Time{}, time.Time{})
	if err != nil || s.Denied == 0 || len(s.Hosts) == 0 || s.Hosts[0].Host != "allowed.test" {
		t.Errorf("the kept log: %+v %v", s, err)
	}
	ctx := context.Background()
	if ns, _ := cli.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "xmode.session="+id))}); len(ns) != 0 {
		t.Errorf("the sandbox's network is left: %+v", ns)
	}
	if code, _, stderr = xm("reap"); code != 0 {
		t.Fatalf("reap: %s", stderr)
	}
	cs, _ := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "xmode.instance="+instance), filters.Arg("label", "xmode.role=egress-proxy"))})
	if len(cs) != 0 {
		t.Errorf("the idle proxy outlived `xmode reap`: %+v", cs[0].Names)
	}
}

// cleanEnv is this process's environment without xmode's settings.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "XMODE_") || strings.HasPrefix(k, "CODEX_") || k == "DOCKER_HOST" {
			continue
		}
		out = append(out, kv)
	}
	return out
}
