package sandbox

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/egress"
	_ "github.com/xmode/xmode/providers/docker" // the docker engine
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// A credential through the whole service, on the docker engine: the
// upstream gets the secret; the sandbox's steps, their evidence, the
// change request and everything the teardown leaves under the storage
// root have the placeholder at most. The policy comes from the front
// ends' sources (CreateOptions.Egress) and XMODE_SANDBOX_* configuration.
func TestEgressCredentialNeverEntersTheSandbox(t *testing.T) {
	cli := dockertest.Require(t)
	f := newFixture(t)
	svc := newService(t, map[string]string{
		"XMODE_SANDBOX_ENGINE": "docker", "XMODE_RUNNER_MODE": "cloud_worker",
		"XMODE_SANDBOX_IMAGE":         dockertest.ProbeImage(t),
		"XMODE_SANDBOX_NETWORK":       "allow",
		"XMODE_SANDBOX_EGRESS_BINARY": dockertest.XmodeBinary(t),
		"XMODE_SANDBOX_EGRESS_CA":     dockertest.TestPKI(t).CAFile,
	})
	ctx := context.Background()
	instance, err := svc.Store.InstanceID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.CleanupInstance(t, cli, instance) })
	up := dockertest.NewUpstream(t, cli, instance)
	allowed := up.Host(t, "allowed.test")
	svc.Cfg.EgressNetwork = up.Name
	svc.Cfg.SandboxResolve = "allowed.test=" + allowed.String()
	const secret = "sk-test-94c1e0a7d3b25f68a1c9e4d7b0f2"
	svc.Getenv = func(k string) string { return map[string]string{"XMODE_TEST_EGRESS_SECRET": secret}[k] }

	sess, err := svc.Create(ctx, CreateOptions{Repo: f.dir, Egress: []egress.Source{
		{Name: "--credential", Credentials: []string{"allowed.test=x-api-key:XMODE_TEST_EGRESS_SECRET"}},
		{Name: "--allow", Allow: []string{allowed.String()}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if sess.Network != "allow" {
		t.Errorf("the session's network: %q", sess.Network)
	}
	run := func(script string) string {
		t.Helper()
		var out strings.Builder
		res, err := svc.Exec(ctx, sess, ExecOptions{Argv: []string{"sh", "-c", script}, LiveStdout: &out, LiveStderr: io.Discard})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("sh -c %q: %+v %v\n%s", script, res, err, out.String())
		}
		return out.String()
	}
	run("env")
	run(`egressprobe get -H "X-Api-Key: $XMODE_TEST_EGRESS_SECRET" https://allowed.test/echo`)
	run(`echo "$XMODE_TEST_EGRESS_SECRET" > key.txt; cat /proc/self/environ | tr '\0' '\n' | grep XMODE_TEST`)
	hits := up.Requests(t, "allowed.test")
	if len(hits) != 1 || hits[0].Headers["X-Api-Key"] != secret {
		t.Fatalf("the upstream's requests: %+v", hits)
	}
	cr := &changes.Service{Store: svc.Store, Guard: svc.Guard, MaxBytes: svc.Cfg.CRMaxBytes, User: svc.Cfg.User}
	pkg, err := cr.Create(ctx, sess, changes.CreateOptions{Title: "key"})
	if err != nil {
		t.Fatal(err)
	}
	patch, err := cr.ReadFile(pkg, "change.patch")
	if err != nil || !strings.Contains(string(patch), "xmode-placeholder-") {
		t.Fatalf("the change request's patch has the placeholder the step wrote: %v\n%s", err, patch)
	}
	if _, err := svc.Stop(ctx, sess, false); err != nil {
		t.Fatal(err)
	}
	root := svc.Cfg.StorageRoot
	kept, _ := svc.Guard.NetworkLog(sess.RunID, sess.ID)
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("the network log was not kept: %v", err)
	}
	var placeholders int
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), secret) {
			t.Errorf("the secret is in %s", p)
		}
		if strings.Contains(string(b), "xmode-placeholder-") {
			placeholders++
		}
		return nil
	})
	if placeholders < 3 { // the steps' output, the patch, the proxy's policy copy is gone
		t.Errorf("the placeholder was found in %d files: the search could not have found the secret either", placeholders)
	}
}
