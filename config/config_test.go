package config

import (
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
		"XMODE_SANDBOX_MEMORY":         "lots",
		"CODEX_DOCKER_MEMORY":          "1k",
		"XMODE_SANDBOX_CPUS":           "0",
		"XMODE_SANDBOX_PIDS_LIMIT":     "-1",
		"XMODE_SANDBOX_TTL":            "soon",
		"XMODE_SANDBOX_MAX_OPEN":       "-2",
		"XMODE_SANDBOX_NETWORK":        "host",
		"XMODE_SANDBOX_ENGINE":         "podman",
		"XMODE_RUNNER_MODE":            "turbo",
		"XMODE_SANDBOX_READONLY_ROOT":  "maybe",
		"XMODE_SANDBOX_USER":           "alice",
		"XMODE_SANDBOX_TMPFS":          "tmp",
		"XMODE_SANDBOX_DOCKER_HOST":    "ssh://x",
		"DOCKER_HOST":                  "npipe:////./pipe/docker",
		"XMODE_SANDBOX_STORAGE_MOUNT":  "relative",
		"XMODE_PROJECT_CACHE_MOUNT":    "/",
		"XMODE_USER":                   "two words",
		"XMODE_SANDBOX_STORAGE_VOLUME": "../x",
		"XMODE_CR_MAX_BYTES":           "0",
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

func TestCRMaxBytes(t *testing.T) {
	c, err := Load(envOf(map[string]string{"HOME": "/h"}), nil)
	if err != nil || c.CRMaxBytes != 100<<20 {
		t.Fatalf("default XMODE_CR_MAX_BYTES: %d, %v; want 100m", c.CRMaxBytes, err)
	}
	c, err = Load(envOf(map[string]string{"HOME": "/h", "XMODE_CR_MAX_BYTES": "2k"}), nil)
	if err != nil || c.CRMaxBytes != 2048 {
		t.Fatalf("XMODE_CR_MAX_BYTES=2k: %d, %v", c.CRMaxBytes, err)
	}
	for _, bad := range []string{"lots", "-1m"} {
		if _, err := Load(envOf(map[string]string{"HOME": "/h", "XMODE_CR_MAX_BYTES": bad}), nil); err == nil || !strings.Contains(err.Error(), "XMODE_CR_MAX_BYTES") {
			t.Errorf("XMODE_CR_MAX_BYTES=%s: %v", bad, err)
		}
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
