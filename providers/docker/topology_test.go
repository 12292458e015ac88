package docker

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// The production topology, for real: xmode runs in a job container with the
// docker socket and the named storage volume mounted at its storage root,
// and creates sibling sandboxes in volume mode. A step in the sibling sees
// the worktree xmode wrote, and xmode sees what the step wrote — the volume
// is the only mount the daemon and the job container agree on.
func TestJobContainerTopology(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	host := dockertest.Host()
	if !strings.HasPrefix(host, "unix://") {
		testenv.Skip(t, "the daemon is at %s; the job container needs its unix socket", host)
	}
	instance := dockertest.NewInstance(t, cli)
	vol, _ := dockertest.StorageVolume(t, cli)

	bin := filepath.Join(t.TempDir(), "jobhelper")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	build := exec.Command(goTool, "build", "-o", bin, "github.com/xmode/xmode/providers/docker/internal/jobhelper")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the job helper: %v\n%s", err, out)
	}

	const root = "/xmode-root"
	run, session := newRun(), dockertest.NewID("sbx_")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job, err := cli.ContainerCreate(ctx, &container.Config{
		Image: img,
		Cmd:   []string{"/xmode-job"},
		Env: []string{
			"HOME=/root",
			"XMODE_STORAGE_ROOT=" + root,
			"XMODE_SANDBOX_ENGINE=docker",
			"XMODE_RUNNER_MODE=cloud_worker",
			"XMODE_SANDBOX_STORAGE_VOLUME=" + vol,
			"XMODE_SANDBOX_IMAGE=" + img,
			"DOCKER_HOST=unix:///var/run/docker.sock",
			"JOB_RUN=" + run, "JOB_SESSION=" + session, "JOB_INSTANCE=" + instance,
		},
		Labels: map[string]string{"xmode.instance": instance, dockertest.LabelTest: "true"},
	}, &container.HostConfig{
		NetworkMode: "none",
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: strings.TrimPrefix(host, "unix://"), Target: "/var/run/docker.sock"},
			{Type: mount.TypeBind, Source: bin, Target: "/xmode-job", ReadOnly: true},
			{Type: mount.TypeVolume, Source: vol, Target: root},
		},
	}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cli.ContainerRemove(context.Background(), job.ID, container.RemoveOptions{Force: true})
	}()
	waitC, errC := cli.ContainerWait(ctx, job.ID, container.WaitConditionNextExit)
	if err := cli.ContainerStart(ctx, job.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	var code int64
	select {
	case w := <-waitC:
		code = w.StatusCode
	case err := <-errC:
		t.Fatalf("wait for the job container: %v", err)
	}
	logs, err := cli.ContainerLogs(ctx, job.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &errb, logs)
	logs.Close()
	t.Logf("job container said:\n%s%s", out.String(), errb.String())
	got := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	want := map[string]string{
		"isolation":  IsolationMountpoint,
		"mount_mode": MountVolume,
		"exit":       "0",
		"out0":       "written by xmode in the job container",
		"out1":       root + "/runs/" + run + "/worktree",
		"out2":       run, // the sibling sees its own run only
		"back":       "from the sibling",
		"destroyed":  "true",
	}
	if code != 0 {
		t.Errorf("the job container exited %d", code)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, err := cli.ContainerInspect(ctx, ContainerName(session)); !cerrdefs.IsNotFound(err) {
		t.Errorf("the sibling sandbox is still there after Destroy: %v", err)
	}
}
