package docker

import (
	"context"
	"errors"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// SnapshotImage commits a sandbox's filesystem outside its worktree as an
// image labelled as asked (none of the container's own session labels
// carried over); a sandbox made from it has the file; the image is listed
// with the orphans, refuses removal while a container runs it, and goes
// with the session it was made for.
func TestSnapshotImage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	ctx := context.Background()
	parent := e.provision()
	// Root writes outside the worktree (the sandbox user may not: /opt is
	// root's in the test image).
	if code, out, err := e.p.runHelperAs(ctx, parent.ContainerID, "0:0", []string{"sh", "-c", "mkdir -p /opt && echo parent > /opt/x"}, time.Minute); err != nil || code != 0 {
		t.Fatalf("write /opt/x: %d %s %v", code, out, err)
	}
	forkSpec := e.spec(newRun())
	labels := dockertest.Labels(e.instance, forkSpec.SessionID, forkSpec.RunID)
	ref, err := e.p.SnapshotImage(ctx, parent, forkSpec.SessionID, labels)
	if err != nil {
		t.Fatal(err)
	}
	if ref != ImageRepo+":"+forkSpec.SessionID {
		t.Fatalf("image %q, want %s:%s", ref, ImageRepo, forkSpec.SessionID)
	}
	ii, err := e.cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if l := ii.Config.Labels; l[LabelSession] != forkSpec.SessionID || l[LabelRun] != forkSpec.RunID || l[LabelInstance] != e.instance || l[LabelManaged] != "true" || l[LabelSnapshot] != "" {
		t.Errorf("image labels %v: want the fork's session and run, none of the parent's", l)
	}
	forkSpec.Image = ref
	fork := e.provisionSpec(forkSpec)
	if got := e.ok(fork, "cat /opt/x"); got != "parent" {
		t.Errorf("/opt/x in the fork: %q", got)
	}
	// Divergence: the parent's later writes do not reach the fork.
	if code, _, err := e.p.runHelperAs(ctx, parent.ContainerID, "0:0", []string{"sh", "-c", "echo later > /opt/x"}, time.Minute); err != nil || code != 0 {
		t.Fatal(code, err)
	}
	if got := e.ok(fork, "cat /opt/x"); got != "parent" {
		t.Errorf("/opt/x in the fork after the parent changed it: %q", got)
	}

	objs, err := e.p.ListObjects(ctx, e.instance)
	if err != nil {
		t.Fatal(err)
	}
	var img *engine.Object
	for i, o := range objs {
		if o.Kind == engine.KindImage {
			img = &objs[i]
		}
	}
	if img == nil || img.ID != ref || img.SessionID != forkSpec.SessionID || img.Instance != e.instance {
		t.Fatalf("ListObjects: image %+v, want %s of %s", img, ref, forkSpec.SessionID)
	}
	if err := e.p.RemoveObject(ctx, *img); !errors.Is(err, engine.ErrInUse) {
		t.Errorf("RemoveObject of an image a container runs: %v, want engine.ErrInUse", err)
	}
	foreign := *img
	foreign.Instance = "test_someoneelse"
	if err := e.p.RemoveObject(ctx, foreign); fail.KindOf(err) != fail.Refused {
		t.Errorf("RemoveObject of an image as another install: %v, want refused", err)
	}
	if err := e.p.RemoveObject(ctx, engine.Object{Kind: engine.KindImage, ID: e.cfg.Image}); fail.KindOf(err) != fail.Refused {
		t.Errorf("RemoveObject of the sandbox image: %v, want refused", err)
	}
	// The fork's own image goes with its container.
	if err := e.p.Destroy(ctx, fork); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.ImageInspect(ctx, ref); !cerrdefs.IsNotFound(err) {
		t.Errorf("the fork's image outlived it: %v", err)
	}
	if _, err := e.cli.ImageInspect(ctx, e.cfg.Image); err != nil {
		t.Errorf("the sandbox image went with the fork: %v", err)
	}
}

// A snapshot's image committed of a fork's keeps the fork's layers: the
// fork's image is only untagged when the fork ends, and both go with the
// snapshot's.
func TestSnapshotImageOfAFork(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountVolume, nil)
	ctx := context.Background()
	parent := e.provision()
	forkSpec := e.spec(newRun())
	ref, err := e.p.SnapshotImage(ctx, parent, forkSpec.SessionID, dockertest.Labels(e.instance, forkSpec.SessionID, forkSpec.RunID))
	if err != nil {
		t.Fatal(err)
	}
	forkSpec.Image = ref
	fork := e.provisionSpec(forkSpec)
	snapID := dockertest.NewID("snp_")
	snapLabels := dockertest.Labels(e.instance, "", "")
	snapLabels[LabelSnapshot] = snapID
	snap, err := e.p.SnapshotImage(ctx, fork, snapID, snapLabels)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.Destroy(ctx, fork); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.ImageInspect(ctx, ref); !cerrdefs.IsNotFound(err) {
		t.Errorf("the fork's tag outlived it: %v", err)
	}
	if err := e.p.RemoveObject(ctx, engine.Object{Kind: engine.KindImage, ID: snap, Instance: e.instance}); err != nil {
		t.Fatal(err)
	}
	is, err := e.cli.ImageList(ctx, image.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range is {
		if i.Labels[LabelInstance] == e.instance {
			t.Errorf("image %s (%v) left behind", i.ID, i.RepoTags)
		}
	}
}
