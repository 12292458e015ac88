// Package dockertest holds what tests against a real Docker daemon need:
// finding the daemon (skip on a laptop without one, fail in CI), a tiny
// busybox image built locally (no registry is needed), storage volumes and
// labels that make stray test objects recognisable and removable.
//
// Everything a test creates carries xmode.test=true; CleanupInstance removes
// what carries a test instance's label.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/xmode/xmode/internal/testenv"
)

// ImageRef is the tag of the test image.
const ImageRef = "xmode-test-busybox:1"

// ImageRefTmp0755 is the test image with a /tmp of mode 0755 instead of
// 1777, as some images have it.
const ImageRefTmp0755 = "xmode-test-busybox:tmp0755"

// LabelTest marks every object a test creates.
const LabelTest = "xmode.test"

// BusyboxPath is where the static busybox comes from (Debian busybox-static).
var BusyboxPath = "/bin/busybox"

// Host is the daemon endpoint tests use: XMODE_SANDBOX_DOCKER_HOST, else
// DOCKER_HOST, else the SDK's default (the local socket).
func Host() string {
	if h := os.Getenv("XMODE_SANDBOX_DOCKER_HOST"); h != "" {
		return h
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return client.DefaultDockerHost
}

// NewClient returns an SDK client for Host, with version negotiation.
func NewClient() (*client.Client, error) {
	return client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation(), client.WithHost(Host()))
}

// Require returns a client for a daemon that answers, or skips the test with
// a visible message when there is none — except in CI (CI=true), where a
// missing daemon fails the test: CI must run these tests.
func Require(t testing.TB) *client.Client {
	t.Helper()
	cli, err := NewClient()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx)
	}
	if err != nil {
		testenv.Skip(t, "docker daemon at %s is not reachable (%v): start dockerd", Host(), err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

var (
	imageOnce, tmp0755Once sync.Once
	imageErr, tmp0755Err   error
)

// Image returns ImageRef, importing it once per process when the daemon
// lacks it (or has one built from another busybox): /bin/busybox in an
// empty root, a symlink for every applet, the host's git with its
// libraries, /etc/passwd and /etc/group, /tmp.
func Image(t testing.TB) string {
	t.Helper()
	cli := Require(t)
	imageOnce.Do(func() { imageErr = buildImage(cli, ImageRef, 0o1777) })
	if imageErr != nil {
		testenv.Skip(t, "cannot build the busybox test image (%v): install busybox-static", imageErr)
	}
	return ImageRef
}

// ImageTmp0755 returns ImageRefTmp0755, importing it once per process when
// the daemon lacks it: Image's files with /tmp 0755.
func ImageTmp0755(t testing.TB) string {
	t.Helper()
	cli := Require(t)
	tmp0755Once.Do(func() { tmp0755Err = buildImage(cli, ImageRefTmp0755, 0o755) })
	if tmp0755Err != nil {
		testenv.Skip(t, "cannot build the busybox test image (%v): install busybox-static", tmp0755Err)
	}
	return ImageRefTmp0755
}

func buildImage(cli *client.Client, ref string, tmpMode int64) error {
	git, err := gitFiles()
	if err != nil {
		return err
	}
	return buildBusyboxImage(cli, ref, tmpMode, "xmode.test.busybox", git)
}

// buildBusyboxImage imports ref, unless the daemon has it with the same
// digest (under the label digestLabel): /bin/busybox in an empty root with
// a symlink per applet, /etc/passwd and /etc/group, /tmp of mode tmpMode,
// and the extra files (executable, their directories made).
func buildBusyboxImage(cli *client.Client, ref string, tmpMode int64, digestLabel string, extra []imageFile) error {
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return err
	}
	h := sha256.New()
	if tmpMode != 0o1777 { // the usual image's digest stays what it was
		fmt.Fprintf(h, "tmp %o\n", tmpMode)
	}
	h.Write(bin)
	for _, f := range extra {
		h.Write([]byte(f.name))
		h.Write(f.data)
	}
	digest := hex.EncodeToString(h.Sum(nil)[:8])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if img, err := cli.ImageInspect(ctx, ref); err == nil && img.Config != nil && img.Config.Labels[digestLabel] == digest {
		return nil
	}
	out, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	dir := func(name string, mode int64) {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: now})
	}
	file := func(name string, mode int64, data []byte) {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: now})
		_, _ = tw.Write(data)
	}
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "root", "home", "usr", "usr/bin", "var"} {
		dir(d, 0o755)
	}
	made := map[string]bool{"etc": true, "usr": true, "usr/bin": true}
	dir("tmp", tmpMode)
	file("bin/busybox", 0o755, bin)
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: now})
	}
	for _, f := range extra {
		parts := strings.Split(f.name, "/")
		for i := 1; i < len(parts); i++ {
			if d := strings.Join(parts[:i], "/"); !made[d] {
				dir(d, 0o755)
				made[d] = true
			}
		}
		file(f.name, 0o755, f.data)
	}
	file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	if err := tw.Close(); err != nil {
		return err
	}
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: &buf, SourceName: "-"}, ref, image.ImportOptions{
		Changes: []string{
			"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LABEL " + LabelTest + "=true " + digestLabel + "=" + digest,
			`CMD ["sh"]`,
		},
	})
	if err != nil {
		return err
	}
	defer rc.Close()
	var msg bytes.Buffer
	_, _ = msg.ReadFrom(rc)
	if strings.Contains(msg.String(), `"error"`) {
		return &importError{msg.String()}
	}
	_, err = cli.ImageInspect(ctx, ref)
	return err
}

type imageFile struct {
	name string // in the image, no leading /
	data []byte
}

// gitFiles is the host's git binary and the shared libraries ldd says it
// needs (with the dynamic loader), as files of the test image.
func gitFiles() ([]imageFile, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, err
	}
	if git, err = filepath.EvalSymlinks(git); err != nil {
		return nil, err
	}
	out, err := exec.Command("ldd", git).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", git, err)
	}
	paths := []string{git}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				paths = append(paths, f)
			}
		}
	}
	var files []imageFile
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(p, "/")
		if p == git {
			name = "usr/bin/git"
		}
		files = append(files, imageFile{name, data})
	}
	return files, nil
}

type importError struct{ msg string }

func (e *importError) Error() string { return "image import: " + e.msg }

// NewID returns a fresh ID of xmode's shape: prefix + 8 lowercase base32.
func NewID(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// created remembers, per process, the test instances and storage volumes
// tests made, with the test's name, so that Strays can say who leaked what.
var created sync.Map // instance id or "volume:<name>" -> test name

// NewInstance returns a fresh test instance id and removes, when the test
// ends, every container and volume labelled with it.
func NewInstance(t testing.TB, cli *client.Client) string {
	t.Helper()
	id := NewID("test_")
	created.Store(id, t.Name())
	t.Cleanup(func() { CleanupInstance(t, cli, id) })
	return id
}

// Strays lists (as "test: object") what this process's tests created and
// left on the daemon after their cleanups ran, and removes it. Call it from
// TestMain after m.Run.
func Strays() []string {
	cli, err := NewClient()
	if err != nil {
		return nil
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		return nil
	}
	var out []string
	f := filters.NewArgs(filters.Arg("label", LabelTest+"=true"))
	cs, _ := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	for _, c := range cs {
		if test, ok := created.Load(c.Labels["xmode.instance"]); ok {
			out = append(out, test.(string)+": container "+strings.Join(c.Names, ",")+" ("+string(c.State)+")")
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
	}
	is, _ := cli.ImageList(ctx, image.ListOptions{Filters: f})
	for _, i := range is {
		if test, ok := created.Load(i.Labels["xmode.instance"]); ok {
			out = append(out, test.(string)+": image "+strings.Join(i.RepoTags, ","))
			removeImage(ctx, cli, i)
		}
	}
	ns, _ := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	for _, n := range ns {
		if test, ok := created.Load(n.Labels["xmode.instance"]); ok {
			out = append(out, test.(string)+": network "+n.Name)
			_ = cli.NetworkRemove(ctx, n.ID)
		}
	}
	vs, _ := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	for _, v := range vs.Volumes {
		test, ok := created.Load(v.Labels["xmode.instance"])
		if !ok {
			test, ok = created.Load("volume:" + v.Name)
		}
		if ok {
			out = append(out, test.(string)+": volume "+v.Name)
			_ = cli.VolumeRemove(ctx, v.Name, true)
		}
	}
	return out
}

// Labels are xmode's labels (docs/reference.md, "Docker objects and
// labels") for a test session, plus xmode.test=true.
func Labels(instance, session, run string) map[string]string {
	return map[string]string{
		"xmode.managed":  "true",
		"xmode.session":  session,
		"xmode.run":      run,
		"xmode.instance": instance,
		LabelTest:        "true",
	}
}

// removeImage removes an image a test made (a fork's or a snapshot's), by
// each of its tags: an image committed of another is only untagged then,
// and goes with the last one made from it.
func removeImage(ctx context.Context, cli *client.Client, i image.Summary) {
	for _, tag := range i.RepoTags {
		_, _ = cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true})
	}
	if len(i.RepoTags) == 0 {
		_, _ = cli.ImageRemove(ctx, i.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	}
}

// CleanupInstance force-removes the containers, images, networks and volumes labelled
// xmode.instance=<instance>.
func CleanupInstance(t testing.TB, cli *client.Client, instance string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := filters.NewArgs(filters.Arg("label", "xmode.instance="+instance))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Logf("cleanup: list containers of %s: %v", instance, err)
	}
	for _, c := range cs {
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Logf("cleanup: remove container %s: %v", c.ID[:12], err)
		}
	}
	is, err := cli.ImageList(ctx, image.ListOptions{Filters: f})
	if err != nil {
		t.Logf("cleanup: list images of %s: %v", instance, err)
	}
	for _, i := range is {
		removeImage(ctx, cli, i)
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		t.Logf("cleanup: list networks of %s: %v", instance, err)
	}
	for _, n := range ns {
		if err := cli.NetworkRemove(ctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
			t.Logf("cleanup: remove network %s: %v", n.Name, err)
		}
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		t.Logf("cleanup: list volumes of %s: %v", instance, err)
		return
	}
	for _, v := range vs.Volumes {
		if err := cli.VolumeRemove(ctx, v.Name, true); err != nil && !cerrdefs.IsNotFound(err) {
			t.Logf("cleanup: remove volume %s: %v", v.Name, err)
		}
	}
}

// StorageVolume creates a named volume (labelled xmode.test=true) to serve
// as a volume-mode storage volume and returns its name and its mountpoint.
// The mountpoint is a path on the daemon's host; the test skips unless it is
// also a directory here (a local daemon), because tests write the storage
// root through it. The volume is removed when the test ends.
func StorageVolume(t testing.TB, cli *client.Client) (name, mountpoint string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name = "xmode-test-storage-" + strings.TrimPrefix(NewID("v_"), "v_")
	v, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: map[string]string{LabelTest: "true"}})
	if err != nil {
		t.Fatalf("create storage volume: %v", err)
	}
	created.Store("volume:"+name, t.Name())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Test containers still using it go first (cleanups run in reverse
		// order of registration, and a failed test may skip its own).
		users, _ := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("volume", name), filters.Arg("label", LabelTest+"=true"))})
		for _, c := range users {
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
		if err := cli.VolumeRemove(ctx, name, true); err != nil && !cerrdefs.IsNotFound(err) {
			t.Logf("cleanup: remove storage volume %s: %v", name, err)
		}
	})
	if st, err := os.Stat(v.Mountpoint); err != nil || !st.IsDir() {
		testenv.Skip(t, "volume mountpoint %s is not reachable from this host (remote daemon?): volume-mode tests need a local daemon", v.Mountpoint)
	}
	return name, v.Mountpoint
}
