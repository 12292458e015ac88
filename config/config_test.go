package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xmode/xmode/fail"
)

func envOf(m map[string]string) Env { return func(k string) string { return m[k] } }

func TestPrecedenceFlagEnvFallbackDefault(t *testing.T) {
	env := map[string]string{"HOME": "/home/u", "CODEX_DOCKER_MEMORY": "1g", "CODEX_DOCKER_CPUS": "1", "XMODE_SANDBOX_CPUS": "3"}
	c, err := Load(envOf(env), map[string]Flag{"XMODE_SANDBOX_TTL": {Name: "--ttl", Value: "15m"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.TTL != 15*time.Minute || c.Memory != 1<<30 || c.CPUs != 3 || c.PidsLimit != 512 {
		t.Fatalf("ttl=%v memory=%d cpus=%v pids=%d", c.TTL, c.Memory, c.CPUs, c.PidsLimit)
	}
	src := map[string]string{}
	for _, v := range c.Values {
		src[v.Name] = v.Source
	}
	want := map[string]string{
		"XMODE_SANDBOX_TTL":        "flag --ttl",
		"XMODE_SANDBOX_MEMORY":     "env CODEX_DOCKER_MEMORY (fallback)",
		"XMODE_SANDBOX_CPUS":       "env XMODE_SANDBOX_CPUS",
		"XMODE_SANDBOX_PIDS_LIMIT": "default",
	}
	for k, w := range want {
		if src[k] != w {
			t.Errorf("%s source %q, want %q", k, src[k], w)
		}
	}
	if c.StorageRoot != "/home/u/.local/share/xmode" || c.StorageMount != c.StorageRoot {
		t.Errorf("storage root %q mount %q", c.StorageRoot, c.StorageMount)
	}
	if len(c.Values) != len(settings) {
		t.Errorf("%d values for %d settings", len(c.Values), len(settings))
	}
}

func TestXDGDataHome(t *testing.T) {
	c, err := Load(envOf(map[string]string{"XDG_DATA_HOME": "/data", "HOME": "/h"}), nil)
	if err != nil || c.StorageRoot != "/data/xmode" {
		t.Fatalf("%v %v", c, err)
	}
}

func TestBadValuesNameTheirSource(t *testing.T) {
	cases := map[string]string{
		"XMODE_SANDBOX_MEMORY":          "lots",
		"CODEX_DOCKER_MEMORY":           "1k",
		"XMODE_SANDBOX_CPUS":            "0",
		"XMODE_SANDBOX_PIDS_LIMIT":      "-1",
		"XMODE_SANDBOX_TTL":             "soon",
		"XMODE_SANDBOX_MAX_OPEN":        "-2",
		"XMODE_SANDBOX_NETWORK":         "host",
		"XMODE_SANDBOX_ENGINE":          "podman",
		"XMODE_RUNNER_MODE":             "turbo",
		"XMODE_SANDBOX_READONLY_ROOT":   "maybe",
		"XMODE_SANDBOX_USER":            "alice",
		"XMODE_SANDBOX_TMPFS":           "tmp",
		"XMODE_SANDBOX_DOCKER_INSECURE": "perhaps",
		"XMODE_SANDBOX_DOCKER_REMOTE":   "sometimes",
		"XMODE_SANDBOX_SYNC_MAX_BYTES":  "0",
		"XMODE_SANDBOX_RUNTIME":         "../runc",
		"XMODE_SANDBOX_STORAGE_MOUNT":   "relative",
		"XMODE_PROJECT_CACHE_MOUNT":     "/",
		"XMODE_USER":                    "two words",
		"XMODE_SANDBOX_STORAGE_VOLUME":  "../x",
		"XMODE_CR_MAX_BYTES":            "0",
		"XMODE_POOL_SIZE":               "-1",
		"XMODE_POOL_MAX_AGE":            "0s",
		"XMODE_SANDBOX_ALLOW":           "example.com,*.com",
		"XMODE_SANDBOX_RESOLVE":         "mirror.internal",
		"XMODE_SANDBOX_EGRESS_NETWORK":  "host",
		"XMODE_SANDBOX_EGRESS_SUBNETS":  "10.213.0.0/30",
		"XMODE_POOL_USERS":              "alice,two words",
	}
	for name, val := range cases {
		_, err := Load(envOf(map[string]string{"HOME": "/h", name: val}), nil)
		if err == nil || fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: %v", name, val, err)
		}
	}
	_, err := Load(envOf(map[string]string{"HOME": "/h"}), map[string]Flag{"XMODE_SANDBOX_TTL": {Name: "--ttl", Value: "x"}})
	if err == nil || !strings.Contains(err.Error(), "--ttl") {
		t.Errorf("bad flag: %v", err)
	}
}

// The egress settings: allow and open are proxied modes, the rules and
// names the proxy resolves are checked at load (a bad one names its
// variable and says what to write), and the rest of the networks are not.
func TestEgressSettings(t *testing.T) {
	c, err := Load(envOf(map[string]string{"HOME": "/h", "XMODE_SANDBOX_NETWORK": "allow",
		"XMODE_SANDBOX_ALLOW": "api.example.com, *.pkg.example:443 10.1.0.0/16", "XMODE_SANDBOX_RESOLVE": "mirror.internal=10.1.2.3"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := c.EgressMode(); !ok || m != "allow" || strings.Join(c.SandboxAllow, " ") != "api.example.com *.pkg.example:443 10.1.0.0/16" ||
		c.SandboxResolve != "mirror.internal=10.1.2.3" || c.EgressNetwork != "bridge" || c.EgressSubnets.String() != "10.213.0.0/16" {
		t.Fatalf("egress settings: %v %v %q %q %s %s", m, ok, c.SandboxAllow, c.SandboxResolve, c.EgressNetwork, c.EgressSubnets)
	}
	for network, proxied := range map[string]bool{"allow": true, "open": true, "none": false, "bridge": false, "mynet": false} {
		c, err := Load(envOf(map[string]string{"HOME": "/h", "XMODE_SANDBOX_NETWORK": network}), nil)
		if _, ok := c.EgressMode(); err != nil || ok != proxied {
			t.Errorf("XMODE_SANDBOX_NETWORK=%s: proxied %t, %v", network, ok, err)
		}
	}
	_, err = Load(envOf(map[string]string{"HOME": "/h", "XMODE_SANDBOX_ALLOW": "ok.example,*.com"}), nil)
	if err == nil || !strings.Contains(err.Error(), `env XMODE_SANDBOX_ALLOW: rule "*.com" (from XMODE_SANDBOX_ALLOW): *.com would allow a whole top-level domain`) {
		t.Errorf("a bad rule: %v", err)
	}
}

// The docker endpoint is the docker engine's to check when it opens: a
// DOCKER_HOST meant for the docker CLI does not stop the loader.
func TestDockerHostIsNotCheckedHere(t *testing.T) {
	for _, v := range []string{"ssh://user@build-host", "npipe:////./pipe/docker", "https://sandbox.example:2376"} {
		c, err := Load(envOf(map[string]string{"HOME": "/h", "DOCKER_HOST": v}), nil)
		if err != nil || c.DockerHost != v {
			t.Errorf("DOCKER_HOST=%s: %v %v", v, c, err)
		}
	}
	c, err := Load(envOf(map[string]string{"HOME": "/h", "DOCKER_CERT_PATH": "/certs", "DOCKER_TLS_VERIFY": "0", "XMODE_SANDBOX_DOCKER_REMOTE": "yes"}), nil)
	if err != nil || c.DockerCertPath != "/certs" || !c.DockerTLSVerify || c.DockerRemote != "on" || c.SyncMaxBytes != 2<<30 {
		t.Errorf("docker TLS settings: %+v %v", c, err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "512m": 512 << 20, "4g": 4 << 30, "4GB": 4 << 30, "1.5GiB": 3 << 29, "10k": 10 << 10, "7b": 7} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "g", "-1g", "4x", "1e3", "..5m", "4 g"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4g", "512m", "1.5GiB", "0", "99999999999999t", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"90s", "15m", "2h", "0s", "-1h", "1h30m", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err == nil && d <= 0 {
			t.Fatalf("ParseDuration(%q) = %v", s, d)
		}
		if err != nil && !strings.Contains(err.Error(), "duration") && !strings.Contains(err.Error(), "longer than zero") {
			t.Fatalf("unhelpful error %q", err)
		}
	})
}

// Limits that would only fail later at the daemon, or wedge a session, are
// usage errors naming their variable (issue 9).
func TestLimitsAreCheckedUpFront(t *testing.T) {
	cases := []map[string]string{
		{"XMODE_SANDBOX_CPUS": "NaN"},
		{"XMODE_SANDBOX_CPUS": "0.001"},
		{"XMODE_SANDBOX_CPUS": "+Inf"},
		{"XMODE_SANDBOX_MEMORY": "64m", "XMODE_SANDBOX_TMPFS": "/tmp:rw,size=1g"},
		{"XMODE_SANDBOX_MEMORY": "1g", "XMODE_SANDBOX_TMPFS": "/tmp:rw,size=1g"},
		{"XMODE_SANDBOX_TMPFS": "/tmp:rw"},
		{"XMODE_SANDBOX_TTL": "200h"},
		{"XMODE_SANDBOX_MAX_TTL": "1h", "XMODE_SANDBOX_TTL": "2h"},
		{"XMODE_EVIDENCE_MAX_BYTES": "10"},
		{"XMODE_MIN_FREE": "plenty"},
		{"XMODE_STORAGE_ROOT": "relative/root"},
	}
	for _, env := range cases {
		var name string
		for k := range env {
			if name == "" || k == "XMODE_SANDBOX_TMPFS" || k == "XMODE_SANDBOX_TTL" {
				name = k
			}
		}
		env["HOME"] = "/h"
		_, err := Load(envOf(env), nil)
		if err == nil || fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), name) {
			t.Errorf("%v: %v; want a usage error naming %s", env, err, name)
		}
	}
	// a small memory limit brings the default /tmp below it
	c, err := Load(envOf(map[string]string{"HOME": "/h", "XMODE_SANDBOX_MEMORY": "64m"}), nil)
	if err != nil || c.TmpfsOptions != "rw,exec,nosuid,nodev,size=32768k" {
		t.Fatalf("tmpfs with 64m of memory: %q, %v", c.TmpfsOptions, err)
	}
	if _, err := ParseDuration("9999999h"); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("9999999h: %v; want 'too long'", err)
	}
	if _, err := ParseDuration("soon"); err == nil || !strings.Contains(err.Error(), "not a duration") {
		t.Errorf("soon: %v", err)
	}
}

// A storage root reached through a symlink is resolved once, so every path
// derived from it is the path on disk; the part that does not exist yet is
// kept as given.
func TestStorageRootThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	realDir, _ := filepath.EvalSymlinks(real)
	c, err := Load(envOf(map[string]string{"HOME": "/h", "XMODE_STORAGE_ROOT": filepath.Join(dir, "link", "xmode")}), nil)
	if err != nil || c.StorageRoot != filepath.Join(realDir, "xmode") {
		t.Fatalf("root %q, %v; want %s", c.StorageRoot, err, filepath.Join(realDir, "xmode"))
	}
}
