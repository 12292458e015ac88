package dockerapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distribution/reference"
)

// fakeDaemon answers on a unix socket like dockerd would for the few
// things a test needs: /_ping with apiVersion, the rest from handler. It
// records the paths asked for.
type fakeDaemon struct {
	apiVersion string
	handler    http.HandlerFunc
	mu         sync.Mutex
	paths      []string
}

func (f *fakeDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.paths = append(f.paths, r.Method+" "+r.URL.RequestURI())
	f.mu.Unlock()
	if r.URL.Path == "/_ping" {
		if f.apiVersion != "" {
			w.Header().Set("API-Version", f.apiVersion)
		}
		w.Header().Set("OSType", "linux")
		_, _ = io.WriteString(w, "OK")
		return
	}
	if f.handler != nil {
		f.handler(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, `{"message":"page not found"}`)
}

func (f *fakeDaemon) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.paths...)
}

func startFake(t *testing.T, f *fakeDaemon) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "xmode-fd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return "unix://" + sock
}

func TestNegotiationRules(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	for _, tc := range []struct{ daemon, want string }{
		{"1.99", DefaultVersion}, // newer daemon: ours
		{"1.41", "1.41"},         // older daemon: its
		{"1.24", "1.24"},
		{"", "1.24"}, // no header: the last version before it existed
	} {
		f := &fakeDaemon{apiVersion: tc.daemon, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `[]`)
		}}
		c := newTestClient(t, startFake(t, f))
		if _, err := c.ContainerList(ctx, true, nil); err != nil {
			t.Fatalf("daemon %q: %v", tc.daemon, err)
		}
		if c.Version() != tc.want {
			t.Errorf("daemon %q: negotiated %s, want %s", tc.daemon, c.Version(), tc.want)
		}
		asked := f.asked()
		if len(asked) != 2 || asked[0] != "GET /_ping" || asked[1] != "GET /v"+tc.want+"/containers/json?all=1" {
			t.Errorf("daemon %q: asked %v", tc.daemon, asked)
		}
	}

	// Too old: refused with a clear error, no request made.
	f := &fakeDaemon{apiVersion: "1.23"}
	c := newTestClient(t, startFake(t, f))
	_, err := c.Ping(ctx)
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Daemon != "1.23" || !strings.Contains(err.Error(), "1.24 or newer") {
		t.Errorf("daemon 1.23: %v", err)
	}
	if _, err := c.ContainerInspect(ctx, "x"); !errors.As(err, &ve) {
		t.Errorf("a call to a 1.23 daemon: %v", err)
	}
	if asked := f.asked(); len(asked) != 2 || asked[1] != "GET /_ping" {
		t.Errorf("asked a too-old daemon %v", asked)
	}
}

// DOCKER_API_VERSION pins the version: no negotiation changes it.
func TestPinnedVersion(t *testing.T) {
	f := &fakeDaemon{apiVersion: "1.45"}
	host := startFake(t, f)
	env := map[string]string{"DOCKER_HOST": host, "DOCKER_API_VERSION": "1.40"}
	cfg, err := ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil || cfg.Host != host || cfg.Version != "1.40" || cfg.TLS != nil {
		t.Fatalf("ConfigFromEnv: %+v %v", cfg, err)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 10*time.Second)
	_, _ = c.ContainerInspect(ctx, "abc")
	if _, err := c.Ping(ctx); err != nil || c.Version() != "1.40" {
		t.Errorf("pinned 1.40, after a ping: %s %v", c.Version(), err)
	}
	if asked := f.asked(); len(asked) < 1 || asked[0] != "GET /v1.40/containers/abc/json" {
		t.Errorf("asked %v", asked)
	}
}

// Version-dependent requests: the stop signal from 1.42, volume subpaths
// refused below 1.45 (an old daemon would silently mount the whole volume).
func TestVersionDependentRequests(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	zero := 0
	for _, v := range []string{"1.41", "1.42"} {
		f := &fakeDaemon{apiVersion: v, handler: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }}
		c := newTestClient(t, startFake(t, f))
		if err := c.ContainerRestart(ctx, "abc", StopOptions{Signal: "KILL", Timeout: &zero}); err != nil {
			t.Fatal(err)
		}
		asked := f.asked()
		last := asked[len(asked)-1]
		if hasSignal := strings.Contains(last, "signal=KILL"); hasSignal != (v == "1.42") || !strings.Contains(last, "t=0") {
			t.Errorf("API %s: restart asked %s", v, last)
		}
	}
	f := &fakeDaemon{apiVersion: "1.44"}
	c := newTestClient(t, startFake(t, f))
	_, err := c.ContainerCreate(ctx, "x", &ContainerConfig{Image: "i"}, &HostConfig{Mounts: []Mount{{Type: MountTypeVolume, Source: "v", Target: "/t", VolumeOptions: &VolumeOptions{Subpath: "a/b"}}}})
	if err == nil || !strings.Contains(err.Error(), "1.45") {
		t.Errorf("a subpath mount on API 1.44: %v", err)
	}
	for _, a := range f.asked() {
		if strings.Contains(a, "/containers/create") {
			t.Errorf("the create was sent: %s", a)
		}
	}
}

func TestErrorBodies(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	f := &fakeDaemon{apiVersion: "1.41", handler: func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/json-conflict"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"message":"removal of container x is already in progress\n"}`)
		case strings.HasSuffix(r.URL.Path, "/text"):
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "plain failure\n")
		default:
			w.WriteHeader(http.StatusBadGateway)
		}
	}}
	c := newTestClient(t, startFake(t, f))
	err := c.ContainerRemove(ctx, "json-conflict", RemoveOptions{})
	if !IsConflict(err) || err.Error() != "Error response from daemon: removal of container x is already in progress" {
		t.Errorf("JSON error: %v", err)
	}
	err = c.ContainerRemove(ctx, "text", RemoveOptions{})
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != 500 || e.Message != "plain failure" || IsNotFound(err) || IsConflict(err) {
		t.Errorf("text error: %#v", err)
	}
	err = c.ContainerRemove(ctx, "empty", RemoveOptions{})
	if !errors.As(err, &e) || e.StatusCode != 502 || !strings.Contains(e.Message, "502") {
		t.Errorf("empty error: %v", err)
	}
	if err := c.ContainerStart(ctx, "a/../b"); err == nil {
		t.Error("an id with a slash was sent")
	}
}

func frame(stream byte, payload string) []byte {
	h := make([]byte, 8, 8+len(payload))
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(payload)))
	return append(h, payload...)
}

func TestDemux(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 5000) // 80 KB: more than one buffer
	var in bytes.Buffer
	in.Write(frame(1, "out1 "))
	in.Write(frame(2, "err1 "))
	in.Write(frame(1, big))
	in.Write(frame(2, ""))
	in.Write(frame(0, "stdin-as-stdout"))
	var out, errb bytes.Buffer
	n, err := Demux(&out, &errb, bytes.NewReader(in.Bytes()))
	if err != nil || out.String() != "out1 "+big+"stdin-as-stdout" || errb.String() != "err1 " || n != int64(out.Len()+errb.Len()) {
		t.Errorf("Demux: n %d err %v, stdout %d bytes, stderr %q", n, err, out.Len(), errb.String())
	}

	// The daemon's own error.
	in.Reset()
	in.Write(frame(1, "x"))
	in.Write(frame(3, "exec failed: boom"))
	in.Write(frame(1, "never"))
	out.Reset()
	if _, err := Demux(&out, io.Discard, &in); err == nil || !strings.Contains(err.Error(), "exec failed: boom") || out.String() != "x" {
		t.Errorf("system frame: %v, stdout %q", err, out.String())
	}
	// A stream cut inside a frame, and one that is not multiplexed.
	cut := frame(1, "abcdef")[:10]
	if _, err := Demux(io.Discard, io.Discard, bytes.NewReader(cut)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut stream: %v", err)
	}
	if _, err := Demux(io.Discard, io.Discard, strings.NewReader("plain text, no frames")); err == nil {
		t.Error("a raw stream was taken for a multiplexed one")
	}
	// A writer's error stops it.
	boom := errors.New("disk full")
	if _, err := Demux(failWriter{boom}, io.Discard, bytes.NewReader(frame(1, "x"))); !errors.Is(err, boom) {
		t.Errorf("writer error: %v", err)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

// ParseReference against distribution/reference (the SDK's parser), as an
// independent check of the grammar and the normalisation.
func TestParseReference(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	for _, s := range []string{
		"busybox", "busybox:1", "busybox:1.36.1-musl", "library/busybox", "docker.io/busybox", "index.docker.io/library/busybox:latest",
		"xmode-test-busybox:1", "ghcr.io/org/team/image:v2", "localhost/img", "localhost:5000/img:tag", "127.0.0.1:5000/a/b",
		"registry.example.com:443/a_b/c__d/e---f.g:t_1", "[::1]:5000/img", "img@sha256:" + hex64, "img:tag@sha256:" + hex64,
		"Bad//Ref", "UPPER/img", "up/Img", "img:", ":tag", "img:-bad", "a/b/", "/a", "a..b", "a_-b", "-a", "a-", "img@sha256:abc",
		"img@md5:" + hex64, hex64, "host:port/img", "exa_mple.com/img", "ex-.com/img", "img:" + strings.Repeat("t", 129), "",
		"a" + strings.Repeat("/b", 130), "sub.example.com/UPPER",
	} {
		ours, err := ParseReference(s)
		theirs, terr := reference.ParseNormalizedNamed(s)
		if (err == nil) != (terr == nil) {
			t.Errorf("%q: ours %+v %v, distribution/reference %v", s, ours, err, terr)
			continue
		}
		if terr != nil {
			continue
		}
		tag, dig := "", ""
		if tg, ok := theirs.(reference.Tagged); ok {
			tag = tg.Tag()
		}
		if d, ok := theirs.(reference.Digested); ok {
			dig = d.Digest().String()
		}
		if ours.Name != theirs.Name() || ours.Tag != tag || ours.Digest != dig {
			t.Errorf("%q: ours %+v, distribution/reference %s %q %q", s, ours, theirs.Name(), tag, dig)
		}
	}
}

// TLS from DOCKER_CERT_PATH, verified (DOCKER_TLS_VERIFY): a ping and a
// hijacked exec over https against a fake daemon with its own CA.
func TestTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/_ping":
			w.Header().Set("API-Version", "1.43")
		case strings.HasSuffix(r.URL.Path, "/start") && r.Header.Get("Upgrade") == "tcp":
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
			_, _ = brw.Write(frame(1, "secret out"))
			_, _ = brw.Write(frame(2, "secret err"))
			_ = brw.Flush()
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the plain-HTTP attempt below
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	host := "tcp://" + srv.Listener.Addr().String()
	env := map[string]string{"DOCKER_HOST": host, "DOCKER_CERT_PATH": dir, "DOCKER_TLS_VERIFY": "1"}
	cfg, err := ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil || cfg.TLS == nil || cfg.TLS.InsecureSkipVerify {
		t.Fatalf("ConfigFromEnv: %+v %v", cfg, err)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	if p, err := c.Ping(ctx); err != nil || p.APIVersion != "1.43" || c.Version() != "1.43" {
		t.Fatalf("Ping over TLS: %+v %v", p, err)
	}
	hc, err := c.ExecStart(ctx, "abc")
	if err != nil {
		t.Fatalf("ExecStart over TLS: %v", err)
	}
	defer hc.Close()
	var out, errb bytes.Buffer
	if _, err := Demux(&out, &errb, hc); err != nil || out.String() != "secret out" || errb.String() != "secret err" {
		t.Errorf("exec over TLS: %q %q %v", out.String(), errb.String(), err)
	}

	// Without the CA the daemon's certificate is refused.
	plain, err := New(Config{Host: host, TLS: nil})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Ping(ctx); err == nil {
		t.Error("plain HTTP to a TLS daemon answered")
	}
	env["DOCKER_CERT_PATH"] = t.TempDir() // no ca.pem
	if _, err := ConfigFromEnv(func(k string) string { return env[k] }); err == nil {
		t.Error("DOCKER_TLS_VERIFY without a ca.pem accepted")
	}
}

// A JSON progress stream: messages pass, an error inside ends it with the
// daemon's message.
func TestDecodeStream(t *testing.T) {
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	_ = enc.Encode(map[string]any{"status": "Pulling from library/x", "id": "1"})
	_ = enc.Encode(map[string]any{"status": "Downloading", "id": "abc", "progressDetail": map[string]int{"current": 5, "total": 10}, "progress": "[==>  ]"})
	_ = enc.Encode(map[string]any{"errorDetail": map[string]any{"message": "manifest unknown"}, "error": "manifest unknown"})
	_ = enc.Encode(map[string]any{"status": "never seen"})
	var seen []string
	err := DecodeStream(&in, func(m JSONMessage) { seen = append(seen, m.ID+":"+m.Status) })
	var se *StreamError
	if !errors.As(err, &se) || se.Message != "manifest unknown" || len(seen) != 2 {
		t.Errorf("DecodeStream: %v, saw %v", err, seen)
	}
	if err := DecodeStream(strings.NewReader(`{"status":"ok"}`+"\n"+`{"status":`), nil); err == nil {
		t.Error("a broken stream ended without an error")
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"1.41", "1.45", -1}, {"1.45", "1.45", 0}, {"1.100", "1.51", 1}, {"v1.24", "1.24", 0}, {"2.0", "1.99", 1}, {"1.4", "1.40", -1}} {
		if got := compareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("compareVersions(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
