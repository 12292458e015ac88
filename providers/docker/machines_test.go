package docker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/volume"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/providers/docker/dockertest"
)

// machineWorktree makes <root>/project_machines/<project>/repo a git
// repository with one commit and <root>/runs/<run>/worktree a linked
// worktree of it whose .git file points back by a relative path (as the
// machines package makes them). It returns the machine's .git.
func machineWorktree(t *testing.T, root, project, run string) (gitDir, worktree string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Skip(t, "no git on PATH")
	}
	repo := filepath.Join(root, "project_machines", project, "repo")
	worktree = filepath.Join(root, "runs", run, "worktree")
	if err := os.MkdirAll(filepath.Dir(worktree), 0o755); err != nil {
		t.Fatal(err)
	}
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git(repo, "init", "-q")
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("machine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(repo, "add", "README")
	git(repo, "commit", "-q", "-m", "one")
	git(repo, "worktree", "add", "--quiet", "--detach", worktree, "HEAD")
	gitDir = filepath.Join(repo, ".git")
	b, err := os.ReadFile(filepath.Join(worktree, ".git"))
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	rel, err := filepath.Rel(worktree, filepath.Join(gitDir, "worktrees", filepath.Base(admin)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(worktree, ".git"), []byte("gitdir: "+rel+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return gitDir, worktree
}

// A worktree branched from a project machine: git's files are where the
// worktree's .git file points, read-only but for the worktree's own record,
// whose files that redirect git (commondir, gitdir, the worktree's .git)
// stay read-only too, and what git writes to objects goes to the run's
// overlay;
// the project's cache volume is mounted, writable by the sandbox user, and
// outlives the session; the sandbox's env carries Spec.Env.
func TestProjectMachineSandbox(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{MountVolume, MountBind} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, mode, nil)
			ctx := context.Background()
			run := newRun()
			gitDir, wt := machineWorktree(t, e.root, "proj", run)
			spec := e.spec(run)
			if mode == MountVolume {
				// As in production: the storage root's owner (not root)
				// owns the worktree and its record in the machine.
				for _, dir := range []string{wt, filepath.Join(gitDir, "worktrees")} {
					if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
						if err != nil {
							return err
						}
						return os.Lchown(p, 1000, 1000)
					}); err != nil {
						t.Fatal(err)
					}
				}
			}
			cache := "xmode-test-cache-" + strings.TrimPrefix(dockertest.NewID("c_"), "c_")
			t.Cleanup(func() { _ = e.cli.VolumeRemove(context.Background(), cache, true) })
			spec.MachineGitDir = gitDir
			spec.CacheVolume, spec.CacheMount = cache, "/cache"
			spec.Env = []string{"XDG_CACHE_HOME=/cache", "XMODE_TEST_SPEC_ENV=yes"}
			sb := e.provisionSpec(spec)

			got := e.ok(sb, `gd=$(sed -n 's/^gitdir: //p' .git); cat "$gd/HEAD" >/dev/null && cat "$gd/commondir" && ls "$gd/../../objects" | head -1 >/dev/null && echo readable
				touch "$gd/index.test" && echo admin-writable
				touch "$gd/../../hooks/pre-commit" 2>/dev/null || echo hooks-readonly
				touch "$gd/../../objects/x" && echo objects-overlay
				touch "$gd/../../config" 2>/dev/null || echo config-readonly
				echo "gitdir: /elsewhere" > .git 2>/dev/null || echo dotgit-readonly
				echo /planted > "$gd/commondir" 2>/dev/null || echo commondir-readonly
				echo /planted > "$gd/gitdir" 2>/dev/null || echo gitdir-readonly
				echo c > /cache/f && echo cache-writable
				echo "$XMODE_TEST_SPEC_ENV $XDG_CACHE_HOME"`)
			want := "../..\nreadable\nadmin-writable\nhooks-readonly\nobjects-overlay\nconfig-readonly\ndotgit-readonly\ncommondir-readonly\ngitdir-readonly\ncache-writable\nyes /cache"
			if got != want {
				t.Errorf("in the sandbox:\n%s\nwant:\n%s", got, want)
			}
			if _, err := os.Stat(filepath.Join(gitDir, "hooks", "pre-commit")); err == nil {
				t.Error("the sandbox planted a hook in the machine's .git")
			}
			// what it wrote into the objects went to the run's overlay
			if _, err := os.Stat(filepath.Join(gitDir, "objects", "x")); err == nil {
				t.Error("the sandbox wrote into the machine's objects")
			}
			if m, _ := filepath.Glob(filepath.Join(gitDir, "worktrees", "*", "xmode", "objects", "x")); len(m) != 1 {
				t.Errorf("the sandbox's object is not in the run's overlay: %v", m)
			}
			if len(sb.Volumes) != 0 {
				t.Errorf("the cache volume is a session volume: %v", sb.Volumes)
			}
			v, err := e.cli.VolumeInspect(ctx, cache)
			if err != nil {
				t.Fatal(err)
			}
			if v.Labels[LabelProject] != "proj" || v.Labels[LabelSession] != "" || v.Labels[LabelManaged] != "true" || v.Labels[LabelInstance] != e.instance {
				t.Errorf("cache volume labels %v", v.Labels)
			}
			if err := e.p.Destroy(ctx, sb); err != nil {
				t.Fatal(err)
			}
			if _, err := e.cli.VolumeInspect(ctx, cache); err != nil {
				t.Errorf("Destroy removed the project's cache volume: %v", err)
			}
			// `machine rm`: the provider removes it; absent is fine; the
			// storage volume never.
			if err := e.p.RemoveVolume(ctx, cache, e.instance); err != nil {
				t.Errorf("RemoveVolume: %v", err)
			}
			if _, err := e.cli.VolumeInspect(ctx, cache); !cerrdefs.IsNotFound(err) {
				t.Errorf("cache volume still there: %v", err)
			}
			if err := e.p.RemoveVolume(ctx, cache, e.instance); err != nil {
				t.Errorf("RemoveVolume of an absent volume: %v", err)
			}
			if mode == MountVolume {
				if err := e.p.RemoveVolume(ctx, e.volume, e.instance); fail.KindOf(err) != fail.Refused {
					t.Errorf("RemoveVolume of the storage volume: %v", err)
				}
			}
		})
	}
}

// A cache volume of the project's name that is not this install's — another
// install's on the same daemon, or one a user made — is neither mounted into
// this install's sandboxes nor removed by its `machine rm`.
func TestProjectCacheVolumeOfAnotherInstall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountBind, nil)
	ctx := context.Background()
	for name, labels := range map[string]map[string]string{
		"other install": {LabelManaged: "true", LabelInstance: "someone-else", LabelProject: "proj"},
		"not xmode's":   {"owner": "a-user"},
	} {
		project := strings.ReplaceAll(strings.ReplaceAll(name, " ", "-"), "'", "")
		t.Run(name, func(t *testing.T) {
			cache := "xmode-test-cache-" + strings.TrimPrefix(dockertest.NewID("c_"), "c_")
			t.Cleanup(func() { _ = e.cli.VolumeRemove(context.Background(), cache, true) })
			if _, err := e.cli.VolumeCreate(ctx, volume.CreateOptions{Name: cache, Labels: labels}); err != nil {
				t.Fatal(err)
			}
			run := newRun()
			gitDir, _ := machineWorktree(t, e.root, project, run)
			spec := e.spec(run)
			spec.MachineGitDir = gitDir
			spec.CacheVolume, spec.CacheMount = cache, "/cache"
			sb, err := e.p.Provision(ctx, spec)
			if fail.KindOf(err) != fail.Refused || !strings.Contains(fmt.Sprint(err), cache) {
				t.Errorf("Provision with %s cache volume: %v, want refused naming the volume", name, err)
			}
			if err == nil {
				_ = e.p.Destroy(ctx, sb)
			}
			if err := e.p.RemoveVolume(ctx, cache, e.instance); fail.KindOf(err) != fail.Refused {
				t.Errorf("RemoveVolume of %s volume: %v, want refused", name, err)
			}
			if _, err := e.cli.VolumeInspect(ctx, cache); err != nil {
				t.Errorf("the volume is gone: %v", err)
			}
		})
	}
}

// A worktree whose .git file points outside the machine is not mounted.
func TestProjectMachineRefusesForeignGitdir(t *testing.T) {
	t.Parallel()
	e := newEnv(t, MountBind, nil)
	run := newRun()
	gitDir, wt := machineWorktree(t, e.root, "proj", run)
	if err := os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: /etc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := e.spec(run)
	spec.MachineGitDir = gitDir
	if _, err := e.p.Provision(context.Background(), spec); fail.KindOf(err) != fail.Refused {
		t.Errorf("Provision with a .git file pointing at /etc: %v, want refused", err)
	}
	spec.MachineGitDir = "/etc/.git"
	if _, err := e.p.Provision(context.Background(), spec); fail.KindOf(err) != fail.Refused {
		t.Errorf("Provision with a machine git dir outside the root: %v, want refused", err)
	}
}
