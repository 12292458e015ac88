package egress

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the proxy process for TestProcess: the same Serve,
// the same signals as `xmode __egress`.
func TestMain(m *testing.M) {
	if dir := os.Getenv("XMODE_EGRESS_TEST_SERVE"); dir != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		reload, stopReload := ReloadSignal()
		err := Serve(ctx, ServeOptions{Dir: dir, Reload: reload, Poll: time.Hour, Stderr: os.Stderr})
		stopReload()
		stop()
		var ce *ConfigError
		switch {
		case errors.As(err, &ce):
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(2)
		case err != nil:
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// servedDir is a configuration directory with one policy, sbx_a, that
// allows allowed.test (a plain HTTP test host on 127.0.0.1).
func servedDir(t *testing.T) (string, Policy) {
	t.Helper()
	dir := t.TempDir()
	if err := WriteConfig(dir, Config{ResolveOnly: true}); err != nil {
		t.Fatal(err)
	}
	p, err := Merge("sbx_a", ModeAllow, Source{Name: "--allow", Allow: []string{"allowed.test", "127.0.0.1/32"},
		Resolve: []string{"allowed.test=127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Listen, p.DNS = "127.0.0.1:0", "127.0.0.1:0"
	if _, err := WritePolicy(dir, p); err != nil {
		t.Fatal(err)
	}
	return dir, p
}

// waitState waits until the proxy serves the policy whose hash is want
// (or, want "", until it serves any).
func waitState(t *testing.T, dir, sandbox, want string) State {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := ReadState(dir, sandbox)
		if err == nil && (want == "" || s.Policy == want) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy does not serve %s's policy %s: %+v %v", sandbox, want, s, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServeFollowsItsDirectory(t *testing.T) {
	up := newUpstream(t, "127.0.0.1", nil)
	dir, p := servedDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ServeOptions{Dir: dir, Poll: 20 * time.Millisecond}) }()
	st := waitState(t, dir, "sbx_a", "")
	if st.Error != "" || st.DNS == "" || st.CACert != filepath.Join(dir, "ca", "sbx_a", CACertFile) {
		t.Fatalf("state %+v", st)
	}
	u := "http://allowed.test:" + strconv.Itoa(up.port) + "/"
	c := proxyClient(t, st.Proxy)
	if code, _, err := get(c, u); err != nil || code != 200 {
		t.Fatalf("through the served proxy: %d %v", code, err)
	}

	// A changed file: served from the next scan, on the same listener.
	d, _ := ParseRule("allowed.test", "sandbox network --deny", true)
	p.Deny = []Rule{d}
	hash, err := WritePolicy(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	if st2 := waitState(t, dir, "sbx_a", hash); st2.Proxy != st.Proxy {
		t.Fatalf("the listener moved: %s → %s", st.Proxy, st2.Proxy)
	}
	if code, _, _ := get(c, u); code != 403 {
		t.Fatalf("after the deny rule: %d", code)
	}

	// A file that no longer reads: everything refused, and the state says why.
	bad := []byte(`{"version":1,"sandbox":"sbx_a","mode":"allow","listen":"127.0.0.1:0","allow":[{"rule":"*"}]}`)
	os.WriteFile(filepath.Join(dir, PoliciesDir, "sbx_a.json"), bad, 0o600)
	st3 := waitState(t, dir, "sbx_a", PolicyHash(bad))
	if !strings.Contains(st3.Error, "matches everything") {
		t.Fatalf("state of a bad policy: %+v", st3)
	}
	code, body, _ := get(c, u)
	if code != 403 || !strings.Contains(body, "mode none") {
		t.Fatalf("under a bad policy: %d %q", code, body)
	}

	// A removed file: its listeners close.
	os.Remove(filepath.Join(dir, PoliciesDir, "sbx_a.json"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, StateDir, "sbx_a.json")); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the state of a removed policy stays")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if conn, err := net.DialTimeout("tcp", st.Proxy, time.Second); err == nil {
		conn.Close()
		t.Fatal("a removed sandbox's proxy still listens")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if len(records(t, LogPath(dir, "sbx_a"))) < 3 {
		t.Fatal("the served sandbox's decisions are not in its log")
	}
}

func TestServeRefusesABadConfiguration(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct {
		name string
		edit func(dir string, p *Policy)
		says string
	}{
		{"unknown field in egress.json", func(dir string, _ *Policy) {
			os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"resolve_only":true,"blok":[]}`), 0o600)
		}, "unknown field"},
		{"missing extra CA", func(dir string, _ *Policy) {
			WriteConfig(dir, Config{ExtraCAFile: filepath.Join(dir, "nope.pem")})
		}, "extra CA file"},
		{"bad rule", func(dir string, _ *Policy) {
			os.WriteFile(filepath.Join(dir, PoliciesDir, "sbx_a.json"),
				[]byte(`{"version":1,"sandbox":"sbx_a","mode":"allow","listen":"127.0.0.1:0","allow":[{"rule":"a..b","source":"--allow"}]}`), 0o600)
		}, `rule "a..b" (from --allow): an empty label`},
		{"file named for another sandbox", func(dir string, _ *Policy) {
			b, _ := os.ReadFile(filepath.Join(dir, PoliciesDir, "sbx_a.json"))
			os.WriteFile(filepath.Join(dir, PoliciesDir, "sbx_b.json"), b, 0o600)
		}, `names sandbox "sbx_a"`},
		{"secret not set", func(dir string, p *Policy) {
			c, _ := ParseCredential("api.example.com=x-api-key:XMODE_EGRESS_TEST_UNSET", "--credential")
			c.Placeholder = NewPlaceholder()
			p.Credentials = []Credential{c}
			WritePolicy(dir, *p)
		}, "XMODE_EGRESS_TEST_UNSET is empty or unset"},
		{"address in use", func(dir string, p *Policy) {
			p.Listen = busy.Addr().String()
			WritePolicy(dir, *p)
		}, "address already in use"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, p := servedDir(t)
			c.edit(dir, &p)
			err := Serve(context.Background(), ServeOptions{Dir: dir})
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("Serve: %v; want a ConfigError saying %q", err, c.says)
			}
		})
	}
}

// The proxy as a process: it reloads on SIGUSR1 (its scans are an hour
// apart here), ends cleanly on SIGTERM, and exits 2 on a bad configuration.
func TestProcess(t *testing.T) {
	up := newUpstream(t, "127.0.0.1", nil)
	dir, p := servedDir(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "XMODE_EGRESS_TEST_SERVE="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	st := waitState(t, dir, "sbx_a", "")
	c := proxyClient(t, st.Proxy)
	u := "http://allowed.test:" + strconv.Itoa(up.port) + "/"
	if code, _, err := get(c, u); err != nil || code != 200 {
		t.Fatalf("through the process: %d %v", code, err)
	}
	d, _ := ParseRule("allowed.test", "sandbox network --deny", true)
	p.Deny = []Rule{d}
	hash, _ := WritePolicy(dir, p)
	time.Sleep(50 * time.Millisecond)
	if s, _ := ReadState(dir, "sbx_a"); s.Policy == hash {
		t.Fatal("the process reloaded without the signal: the test cannot tell the signal did it")
	}
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitState(t, dir, "sbx_a", hash)
	if code, _, _ := get(c, u); code != 403 {
		t.Fatalf("after the reload: %d", code)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, stderr.String())
	}

	os.WriteFile(filepath.Join(dir, ConfigFile), []byte("{"), 0o600)
	bad := exec.Command(os.Args[0], "-test.run=^$")
	bad.Env = append(os.Environ(), "XMODE_EGRESS_TEST_SERVE="+dir)
	out, err := bad.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), ConfigFile) {
		t.Fatalf("a bad egress.json: %v %s", err, out)
	}
}

// With KeepGoing, a policy that cannot be served at start refuses its own
// sandbox everything and says why in its state, while the others are
// served: one stale file does not keep a shared proxy down.
func TestServeKeepGoing(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	up := newUpstream(t, "127.0.0.1", nil)
	dir, _ := servedDir(t)
	stale, err := Merge("sbx_b", ModeAllow, Source{Name: "--allow", Allow: []string{"allowed.test"}})
	if err != nil {
		t.Fatal(err)
	}
	stale.Listen = busy.Addr().String()
	b, err := EncodePolicy(stale)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := WritePolicy(dir, stale)
	if err != nil || hash != PolicyHash(b) {
		t.Fatalf("WritePolicy's hash %s, EncodePolicy's %s (%v)", hash, PolicyHash(b), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ServeOptions{Dir: dir, Poll: 20 * time.Millisecond, KeepGoing: true}) }()
	if st := waitState(t, dir, "sbx_b", hash); !strings.Contains(st.Error, "address already in use") || st.Proxy != "" {
		t.Fatalf("state of the policy that cannot be served: %+v", st)
	}
	st := waitState(t, dir, "sbx_a", "")
	if code, _, err := get(proxyClient(t, st.Proxy), "http://allowed.test:"+strconv.Itoa(up.port)+"/"); err != nil || code != 200 {
		t.Fatalf("the other sandbox beside a stale policy: %d %v", code, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// A new process removes the state files a previous one left: they claimed
// listeners that are gone.
func TestServeForgetsAPreviousProcessState(t *testing.T) {
	dir, _ := servedDir(t)
	os.MkdirAll(filepath.Join(dir, StateDir), 0o700)
	stale := `{"sandbox":"sbx_gone","proxy":"127.0.0.1:1","policy":"abc"}`
	os.WriteFile(filepath.Join(dir, StateDir, "sbx_gone.json"), []byte(stale), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ServeOptions{Dir: dir, Poll: 20 * time.Millisecond}) }()
	waitState(t, dir, "sbx_a", "")
	if _, err := os.Stat(filepath.Join(dir, StateDir, "sbx_gone.json")); !os.IsNotExist(err) {
		t.Errorf("a previous process's state file stays: %v", err)
	}
	cancel()
	<-done
}
