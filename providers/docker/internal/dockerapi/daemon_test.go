package dockerapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// These tests run against the real daemon (dockertest.Require skips
// without one, fails in CI) and check what this client did with the Docker
// SDK, independently.

func newTestClient(t *testing.T, host string) *Client {
	t.Helper()
	c, err := New(Config{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testContainer creates and starts a keep-alive container of the test
// image with this client, labelled for the instance's cleanup.
func testContainer(t *testing.T, c *Client, instance string) string {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	yes := true
	created, err := c.ContainerCreate(ctx, "", &ContainerConfig{
		Image:      dockertest.Image(t),
		Entrypoint: []string{"sleep", "2147483647"},
		Labels:     map[string]string{dockertest.LabelTest: "true", "xmode.instance": instance},
	}, &HostConfig{Init: &yes, NetworkMode: "none", RestartPolicy: RestartPolicy{Name: "no"}})
	if err != nil {
		t.Fatalf("ContainerCreate: %v", err)
	}
	if err := c.ContainerStart(ctx, created.ID); err != nil {
		t.Fatalf("ContainerStart: %v", err)
	}
	return created.ID
}

func TestNegotiationAgainstDaemon(t *testing.T) {
	sdk := dockertest.Require(t)
	ctx := ctxFor(t, 30*time.Second)
	sdkPing, err := sdk.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_API_VERSION", "")
	c := newTestClient(t, dockertest.Host())
	if v := c.Version(); v != DefaultVersion {
		t.Errorf("before any ping the client says %s, want %s", v, DefaultVersion)
	}
	ping, err := c.Ping(ctx)
	if err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if ping.APIVersion != sdkPing.APIVersion {
		t.Errorf("Ping says the daemon speaks %q; the SDK says %q", ping.APIVersion, sdkPing.APIVersion)
	}
	got := c.Version()
	if compareVersions(got, DefaultVersion) > 0 || compareVersions(got, ping.APIVersion) > 0 {
		t.Errorf("negotiated %s: newer than ours (%s) or the daemon's (%s)", got, DefaultVersion, ping.APIVersion)
	}
	if compareVersions(ping.APIVersion, DefaultVersion) < 0 && got != ping.APIVersion {
		t.Errorf("the daemon speaks %s (older than %s) but the client negotiated %s", ping.APIVersion, DefaultVersion, got)
	}
	// The SDK negotiates the same (its default is ours).
	sdk.NegotiateAPIVersionPing(sdkPing)
	if sdk.ClientVersion() != got {
		t.Errorf("negotiated %s, the SDK %s", got, sdk.ClientVersion())
	}
	t.Logf("daemon API %s, negotiated %s", ping.APIVersion, got)

	// A client whose first call is not a ping negotiates before it.
	lazy := newTestClient(t, dockertest.Host())
	if _, err := lazy.ContainerList(ctx, false, Filters{"label": {"xmode.test.none=1"}}); err != nil {
		t.Fatalf("ContainerList without a ping first: %v", err)
	}
	if lazy.Version() != got {
		t.Errorf("negotiated lazily %s, by ping %s", lazy.Version(), got)
	}
}

func TestNotFound(t *testing.T) {
	dockertest.Require(t)
	c := newTestClient(t, dockertest.Host())
	ctx := ctxFor(t, 30*time.Second)
	absent := "xmode-test-absent-" + strings.TrimPrefix(dockertest.NewID("x_"), "x_")
	calls := map[string]error{}
	_, calls["ContainerInspect"] = c.ContainerInspect(ctx, absent)
	calls["ContainerStart"] = c.ContainerStart(ctx, absent)
	calls["ContainerRemove"] = c.ContainerRemove(ctx, absent, RemoveOptions{Force: true})
	_, calls["ContainerTop"] = c.ContainerTop(ctx, absent, nil)
	_, calls["ExecCreate"] = c.ExecCreate(ctx, absent, ExecConfig{Cmd: []string{"true"}})
	_, calls["ExecInspect"] = c.ExecInspect(ctx, strings.Repeat("0", 64))
	_, calls["ImageInspect"] = c.ImageInspect(ctx, absent+":1")
	_, calls["VolumeInspect"] = c.VolumeInspect(ctx, absent)
	calls["VolumeRemove"] = c.VolumeRemove(ctx, absent, false)
	_, calls["ContainerInspect(empty)"] = c.ContainerInspect(ctx, "")
	for what, err := range calls {
		var e *Error
		switch {
		case !IsNotFound(err):
			t.Errorf("%s of something absent: %v, want a not-found error", what, err)
		case IsConflict(err) || IsConnectionFailed(err):
			t.Errorf("%s: a 404 classified as conflict or connection failure: %v", what, err)
		case !errors.As(err, &e) || e.Message == "" || !strings.HasPrefix(err.Error(), "Error response from daemon: "):
			t.Errorf("%s: %v does not carry the daemon's message", what, err)
		}
	}
	if err := calls["ContainerInspect"]; !strings.Contains(err.Error(), "No such container") {
		t.Errorf("ContainerInspect: %v does not say what is missing", err)
	}
}

// An exec attached over the hijacked connection: stdin in, stdout and
// stderr apart, the exit code, and an output larger than a frame.
func TestExecHijacked(t *testing.T) {
	sdk := dockertest.Require(t)
	c := newTestClient(t, dockertest.Host())
	id := testContainer(t, c, dockertest.NewInstance(t, sdk))
	ctx := ctxFor(t, time.Minute)

	execID, err := c.ExecCreate(ctx, id, ExecConfig{
		Cmd:         []string{"sh", "-c", `tr a-z A-Z; echo "to stderr $X" >&2; head -c 100000 /dev/zero | tr '\0' x; exit 3`},
		Env:         []string{"X=from-env"},
		WorkingDir:  "/tmp",
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		t.Fatalf("ExecCreate: %v", err)
	}
	hc, err := c.ExecStart(ctx, execID)
	if err != nil {
		t.Fatalf("ExecStart: %v", err)
	}
	defer hc.Close()
	go func() {
		_, _ = io.WriteString(hc, "hello stdin\n")
		_ = hc.CloseWrite()
	}()
	var stdout, stderr bytes.Buffer
	if _, err := Demux(&stdout, &stderr, hc); err != nil {
		t.Fatalf("Demux: %v", err)
	}
	if want := "HELLO STDIN\n" + strings.Repeat("x", 100000); stdout.String() != want {
		t.Errorf("stdout: %d bytes starting %q, want %d bytes", stdout.Len(), stdout.String()[:min(40, stdout.Len())], len(want))
	}
	if stderr.String() != "to stderr from-env\n" {
		t.Errorf("stderr: %q", stderr.String())
	}
	var ins ExecInspect
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ins, err = c.ExecInspect(ctx, execID); err != nil || !ins.Running {
			break
		}
	}
	if err != nil || ins.Running || ins.ExitCode != 3 || ins.Pid == 0 || ins.ID != execID {
		t.Errorf("ExecInspect: %+v %v, want exited 3", ins, err)
	}
	sdkIns, err := sdk.ContainerExecInspect(ctx, execID)
	if err != nil || sdkIns.ExitCode != 3 || sdkIns.ContainerID != id {
		t.Errorf("the SDK sees the exec as %+v %v", sdkIns, err)
	}

	// Without stdin, and the context of the start ending right after it:
	// the stream must stay open.
	execID, err = c.ExecCreate(ctx, id, ExecConfig{Cmd: []string{"sh", "-c", "sleep 0.3; echo late"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	hc2, err := c.ExecStart(sctx, execID)
	cancel()
	if err != nil {
		t.Fatalf("ExecStart: %v", err)
	}
	defer hc2.Close()
	stdout.Reset()
	if _, err := Demux(&stdout, io.Discard, hc2); err != nil || stdout.String() != "late\n" {
		t.Errorf("output after the start's context ended: %q %v", stdout.String(), err)
	}
}

func TestEventsFiltered(t *testing.T) {
	sdk := dockertest.Require(t)
	c := newTestClient(t, dockertest.Host())
	instance := dockertest.NewInstance(t, sdk)
	ctx := ctxFor(t, time.Minute)
	since := time.Now().Add(-time.Second)
	one := testContainer(t, c, instance)
	other := testContainer(t, c, instance)
	execID, err := c.ExecCreate(ctx, one, ExecConfig{Cmd: []string{"true"}, AttachStdout: true})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := c.ExecStart(ctx, execID)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, hc)
	hc.Close()
	time.Sleep(200 * time.Millisecond)
	until := time.Now().Add(time.Second)

	msgs, errs := c.Events(ctx, EventsOptions{Since: since, Until: until, Filters: Filters{"type": {"container"}, "container": {one}}})
	var actions []string
	execStarted := false
	for done := false; !done; {
		select {
		case m := <-msgs:
			if m.Type != "container" || m.Actor.ID != one {
				t.Errorf("an event outside the filter: %s %s of %s", m.Type, m.Action, m.Actor.ID)
			}
			if strings.HasPrefix(m.Action, "exec_start") && m.Actor.Attributes["execID"] == execID {
				execStarted = true
			}
			if m.TimeNano == 0 {
				t.Errorf("event without its time: %+v", m)
			}
			actions = append(actions, strings.SplitN(m.Action, ":", 2)[0])
		case err := <-errs:
			if !errors.Is(err, io.EOF) {
				t.Errorf("the stream ended with %v, want io.EOF at its until", err)
			}
			done = true
		case <-ctx.Done():
			t.Fatal("the events stream did not end at its until")
		}
	}
	for _, want := range []string{"create", "start", "exec_create", "exec_start", "exec_die"} {
		found := false
		for _, a := range actions {
			found = found || a == want
		}
		if !found {
			t.Errorf("no %s event; got %v", want, actions)
		}
	}
	if !execStarted {
		t.Errorf("no exec_start carrying execID %s", execID)
	}
	_ = other

	// A stream without until stays open until its context ends.
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, errs = c.Events(sctx, EventsOptions{Filters: Filters{"container": {one}, "event": {"oom"}}})
	select {
	case err := <-errs:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("open stream ended with %v, want its context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("an open events stream did not end with its context")
	}
}

// No registry here: a pull of an image that does not exist fails within
// seconds, with the daemon's reason, whether the daemon refuses the request
// or reports the failure inside the stream.
func TestImagePullFailure(t *testing.T) {
	dockertest.Require(t)
	c := newTestClient(t, dockertest.Host())
	ctx := ctxFor(t, 2*time.Minute)
	ref := "xmode-test-no-such-image-" + strings.TrimPrefix(dockertest.NewID("x_"), "x_") + ":1"
	start := time.Now()
	rc, err := c.ImagePull(ctx, ref)
	if err == nil {
		var seen []JSONMessage
		err = DecodeStream(rc, func(m JSONMessage) { seen = append(seen, m) })
		rc.Close()
		t.Logf("messages before the error: %+v", seen)
	}
	var de *Error
	var se *StreamError
	switch {
	case err == nil:
		t.Fatal("pulling an image that does not exist succeeded")
	case errors.As(err, &se):
		if se.Message == "" {
			t.Errorf("stream error without the daemon's message: %+v", se)
		}
	case errors.As(err, &de):
		if de.Message == "" {
			t.Errorf("daemon error without a message: %+v", de)
		}
	default:
		t.Errorf("pull failed with %T %v, want the daemon's error", err, err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("the failed pull took %v", took)
	}
	t.Logf("pull failure after %v: %v", time.Since(start), err)
	if _, err := c.ImageInspect(ctx, ref); !IsNotFound(err) {
		t.Errorf("after the failed pull, ImageInspect: %v", err)
	}
	if _, err := c.ImagePull(ctx, "Bad//Ref"); err == nil {
		t.Error("ImagePull of an invalid reference was sent")
	}
}

// A lifecycle through this client, checked with the SDK: create (with the
// hardening fields as the provider sets them), list by label, top,
// restart, stop, remove; volumes.
func TestContainerAndVolumeLifecycle(t *testing.T) {
	sdk := dockertest.Require(t)
	c := newTestClient(t, dockertest.Host())
	instance := dockertest.NewInstance(t, sdk)
	ctx := ctxFor(t, 2*time.Minute)

	vol, err := c.VolumeCreate(ctx, VolumeCreateRequest{Name: "xmode-test-" + strings.TrimPrefix(dockertest.NewID("v_"), "v_"),
		Labels: map[string]string{dockertest.LabelTest: "true", "xmode.instance": instance}})
	if err != nil {
		t.Fatalf("VolumeCreate: %v", err)
	}
	if sv, err := sdk.VolumeInspect(ctx, vol.Name); err != nil || sv.Labels["xmode.instance"] != instance || sv.Mountpoint != vol.Mountpoint || vol.Driver != "local" {
		t.Errorf("the SDK sees the volume as %+v %v; we got %+v", sv, err, vol)
	}
	if vs, err := c.VolumeList(ctx, Filters{"label": {"xmode.instance=" + instance}}); err != nil || len(vs) != 1 || vs[0].Name != vol.Name {
		t.Errorf("VolumeList by label: %+v %v", vs, err)
	}

	yes, pids, zero := true, int64(64), 0
	created, err := c.ContainerCreate(ctx, "xmode-test-"+strings.TrimPrefix(dockertest.NewID("c_"), "c_"), &ContainerConfig{
		Image: dockertest.Image(t), Entrypoint: []string{"sleep", "2147483647"}, WorkingDir: "/data", User: "65534:65534",
		Env:    []string{"A=1"},
		Labels: map[string]string{dockertest.LabelTest: "true", "xmode.instance": instance},
	}, &HostConfig{
		Init: &yes, NetworkMode: "none", RestartPolicy: RestartPolicy{Name: "no"},
		CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"}, IpcMode: "private", ReadonlyRootfs: true,
		Tmpfs:    map[string]string{"/tmp": "rw,size=16m"},
		NanoCPUs: 500_000_000, Memory: 64 << 20, MemorySwap: 64 << 20, PidsLimit: &pids,
		Ulimits: []*Ulimit{{Name: "nofile", Soft: 100, Hard: 200}},
		Mounts:  []Mount{{Type: MountTypeVolume, Source: vol.Name, Target: "/data", VolumeOptions: &VolumeOptions{NoCopy: true}}},
	})
	if err != nil {
		t.Fatalf("ContainerCreate: %v", err)
	}
	ci, err := sdk.ContainerInspect(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	hc := ci.HostConfig
	if !*hc.Init || hc.NetworkMode != "none" || hc.CapDrop[0] != "ALL" || hc.SecurityOpt[0] != "no-new-privileges" || hc.IpcMode != "private" ||
		!hc.ReadonlyRootfs || hc.Tmpfs["/tmp"] != "rw,size=16m" || hc.NanoCPUs != 500_000_000 || hc.Memory != 64<<20 || hc.MemorySwap != 64<<20 ||
		*hc.PidsLimit != 64 || hc.Ulimits[0].Soft != 100 || hc.Ulimits[0].Hard != 200 || len(ci.Mounts) != 1 || ci.Mounts[0].Name != vol.Name ||
		ci.Config.User != "65534:65534" || ci.Config.WorkingDir != "/data" || ci.Config.Entrypoint[0] != "sleep" {
		t.Errorf("the daemon recorded %+v\n%+v", ci.Config, hc)
	}
	if err := c.ContainerStart(ctx, created.ID); err != nil {
		t.Fatalf("ContainerStart: %v", err)
	}
	if err := c.ContainerStart(ctx, created.ID); err != nil {
		t.Errorf("starting a running container again: %v", err)
	}
	ours, err := c.ContainerInspect(ctx, created.ID)
	if err != nil || !ours.State.Running || ours.State.Pid == 0 || ours.Config.Labels["xmode.instance"] != instance ||
		ours.HostConfig.Ulimits[0].Soft != 100 || len(ours.Mounts) != 1 || ours.Mounts[0].Destination != "/data" || ours.Name != "/"+strings.TrimPrefix(ci.Name, "/") {
		t.Errorf("ContainerInspect: %+v %+v %v", ours, ours.State, err)
	}
	list, err := c.ContainerList(ctx, false, Filters{"label": {"xmode.instance=" + instance, dockertest.LabelTest + "=true"}})
	if err != nil || len(list) != 1 || list[0].ID != created.ID || list[0].State != "running" || list[0].Created == 0 {
		t.Errorf("ContainerList by labels: %+v %v", list, err)
	}
	top, err := c.ContainerTop(ctx, created.ID, []string{"-o", "pid,args"})
	if err != nil || len(top.Titles) != 2 || !strings.Contains(strings.Join(flatten(top.Processes), " "), "sleep 2147483647") {
		t.Errorf("ContainerTop: %+v %v", top, err)
	}
	if err := c.ContainerRestart(ctx, created.ID, StopOptions{Signal: "KILL", Timeout: &zero}); err != nil {
		t.Errorf("ContainerRestart: %v", err)
	}
	if after, err := sdk.ContainerInspect(ctx, created.ID); err != nil || !after.State.Running || after.State.Pid == ours.State.Pid {
		t.Errorf("after the restart: %+v %v (pid before: %d)", after.State, err, ours.State.Pid)
	}
	// The provider never stops a container (Restart, Remove): the SDK does.
	if err := sdk.ContainerStop(ctx, created.ID, container.StopOptions{Timeout: &zero}); err != nil {
		t.Errorf("stop with the SDK: %v", err)
	}
	if st, err := c.ContainerInspect(ctx, created.ID); err != nil || st.State.Running || st.State.Status != "exited" {
		t.Errorf("after the stop: %+v %v", st.State, err)
	}
	if err := c.VolumeRemove(ctx, vol.Name, false); !IsConflict(err) {
		t.Errorf("removing a volume in use: %v, want a conflict", err)
	}
	if err := c.ContainerRemove(ctx, created.ID, RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
		t.Errorf("ContainerRemove: %v", err)
	}
	if _, err := sdk.ContainerInspect(ctx, created.ID); !client.IsErrNotFound(err) {
		t.Errorf("the container is still there: %v", err)
	}
	if err := c.VolumeRemove(ctx, vol.Name, false); err != nil {
		t.Errorf("VolumeRemove: %v", err)
	}
	if _, err := sdk.VolumeInspect(ctx, vol.Name); !client.IsErrNotFound(err) {
		t.Errorf("the volume is still there: %v", err)
	}
}

func flatten(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}

// tcp:// works, the exec stream included, through a proxy on loopback.
func TestTCPEndpoint(t *testing.T) {
	sdk := dockertest.Require(t)
	px := dockertest.NewTCPProxy(t)
	if !strings.HasPrefix(px.Host(), "tcp://127.0.0.1:") {
		t.Fatalf("proxy host %s", px.Host())
	}
	c := newTestClient(t, px.Host())
	if c.Host() != px.Host() {
		t.Errorf("Host() = %s", c.Host())
	}
	ctx := ctxFor(t, time.Minute)
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping over tcp: %v", err)
	}
	id := testContainer(t, c, dockertest.NewInstance(t, sdk))
	execID, err := c.ExecCreate(ctx, id, ExecConfig{Cmd: []string{"sh", "-c", "cat; echo e >&2"}, AttachStdin: true, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := c.ExecStart(ctx, execID)
	if err != nil {
		t.Fatalf("ExecStart over tcp: %v", err)
	}
	defer hc.Close()
	go func() { _, _ = io.WriteString(hc, "over tcp"); _ = hc.CloseWrite() }()
	var out, errb bytes.Buffer
	if _, err := Demux(&out, &errb, hc); err != nil || out.String() != "over tcp" || errb.String() != "e\n" {
		t.Errorf("exec over tcp: %q %q %v", out.String(), errb.String(), err)
	}

	// The endpoint going away is a connection failure, not a daemon error.
	px.Stop()
	_, err = c.Ping(ctx)
	if !IsConnectionFailed(err) || !strings.Contains(err.Error(), px.Host()) {
		t.Errorf("Ping with the endpoint gone: %v, want a connection failure naming it", err)
	}
	if _, err := c.ExecStart(ctx, execID); !IsConnectionFailed(err) {
		t.Errorf("ExecStart with the endpoint gone: %v, want a connection failure", err)
	}
}

func TestUnreachable(t *testing.T) {
	for _, host := range []string{"unix:///nonexistent/docker.sock", "tcp://127.0.0.1:1"} {
		c := newTestClient(t, host)
		ctx := ctxFor(t, 10*time.Second)
		_, err := c.Ping(ctx)
		if !IsConnectionFailed(err) {
			t.Errorf("%s: Ping: %v, want a connection failure", host, err)
		}
		if _, err := c.ContainerInspect(ctx, "x"); !IsConnectionFailed(err) || IsNotFound(err) {
			t.Errorf("%s: ContainerInspect: %v, want a connection failure", host, err)
		}
	}
	if _, err := New(Config{Host: "ssh://host"}); err == nil {
		t.Error("ssh:// accepted")
	}
	if _, err := New(Config{Host: "tcp://host"}); err == nil {
		t.Error("tcp:// without a port accepted")
	}
	if _, err := New(Config{Host: "/var/run/docker.sock"}); err == nil {
		t.Error("a host without a scheme accepted")
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if strays := dockertest.Strays(); len(strays) > 0 {
		for _, s := range strays {
			os.Stderr.WriteString("left behind: " + s + "\n")
		}
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
