package sandbox

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/xmode/xmode/internal/hostenv"
	"github.com/xmode/xmode/store"
)

// Host steps inherit what the session's environment policy lets through,
// as real steps printing `env` show: everything but secret-looking names
// for the command line by default (XMODE_HOST_ENV=all), only the core
// variables for a session an MCP client made, what a create asks for when
// it names a policy; include lets a secret name through, exclude wins over
// it. A variable the step is given by name (--env NAME, an agent's key)
// reaches it whatever the policy. The policy is recorded on the session.
func TestHostEnvPolicy(t *testing.T) {
	t.Setenv("XMODE_T_PLAIN", "plain")
	t.Setenv("XMODE_T_API_TOKEN", "tok")
	t.Setenv("XMODE_T_DB_PASSWORD", "pw")
	t.Setenv("LC_XMODE_T", "locale")
	f := newFixture(t)
	ctx := context.Background()
	env := func(svc *Service, o CreateOptions, eo ExecOptions) (*store.Session, map[string]string) {
		t.Helper()
		o.Repo = f.dir
		sess, err := svc.Create(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		eo.Argv, eo.LiveStdout = []string{"env"}, &out
		if res, err := svc.Exec(ctx, sess, eo); err != nil || res.ExitCode != 0 {
			t.Fatalf("env: %v %+v", err, res)
		}
		got := map[string]string{}
		for _, line := range strings.Split(out.String(), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				got[k] = v
			}
		}
		return sess, got
	}
	type want struct {
		policy string
		has    []string
		lacks  []string
	}
	check := func(what string, svc *Service, sess *store.Session, got map[string]string, w want) {
		t.Helper()
		if stored, err := svc.Store.Get(ctx, sess.ID); err != nil || stored.HostEnv != w.policy {
			t.Errorf("%s: the session records %+v (%v), want %q", what, stored, err, w.policy)
		}
		for _, k := range w.has {
			if _, ok := got[k]; !ok {
				t.Errorf("%s: the step lacks %s", what, k)
			}
		}
		for _, k := range w.lacks {
			if v, ok := got[k]; ok {
				t.Errorf("%s: the step got %s=%s", what, k, v)
			}
		}
	}

	cli := newService(t, nil)
	sess, got := env(cli, CreateOptions{}, ExecOptions{})
	check("the command line's default", cli, sess, got, want{"all",
		[]string{"XMODE_T_PLAIN", "LC_XMODE_T", "PATH", "HOME", "XMODE_EXEC_TAG"},
		[]string{"XMODE_T_API_TOKEN", "XMODE_T_DB_PASSWORD"}})

	sess, got = env(cli, CreateOptions{Origin: store.OriginMCP}, ExecOptions{Env: []string{"XMODE_T_API_TOKEN"}, LookupEnv: func(k string) (string, bool) { return "by-name", true }})
	check("an MCP client's session", cli, sess, got, want{"core",
		[]string{"LC_XMODE_T", "PATH", "HOME", "XMODE_T_API_TOKEN"},
		[]string{"XMODE_T_PLAIN", "XMODE_T_DB_PASSWORD"}})
	if got["XMODE_T_API_TOKEN"] != "by-name" {
		t.Errorf("a variable given by name: %q", got["XMODE_T_API_TOKEN"])
	}

	sess, got = env(cli, CreateOptions{EnvPolicy: &hostenv.Policy{Inherit: hostenv.None, Include: []string{"xmode_t_*"}, Exclude: []string{"*PASSWORD"}}},
		ExecOptions{SecretEnv: []string{"AGENT_API_KEY=k"}})
	check("none, including XMODE_T_*", cli, sess, got, want{"none include=xmode_t_* exclude=*PASSWORD",
		[]string{"XMODE_T_PLAIN", "XMODE_T_API_TOKEN", "AGENT_API_KEY"},
		[]string{"XMODE_T_DB_PASSWORD", "PATH", "HOME", "LC_XMODE_T"}})

	explicit := newService(t, map[string]string{"XMODE_HOST_ENV": "all", "XMODE_HOST_ENV_EXCLUDE": "LC_*"})
	sess, got = env(explicit, CreateOptions{Origin: store.OriginMCP}, ExecOptions{})
	check("XMODE_HOST_ENV=all set explicitly, for MCP too", explicit, sess, got, want{"all exclude=LC_*",
		[]string{"XMODE_T_PLAIN", "PATH"},
		[]string{"LC_XMODE_T", "XMODE_T_API_TOKEN"}})
}
