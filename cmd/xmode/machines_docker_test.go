package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/store"
)

// The dependency cache of docker sandboxes is the project's and the user's:
// a file a run of project one writes under XMODE_PROJECT_CACHE_MOUNT is
// there for alice's next run of project one, is not there for bob's run of
// it (a sandbox cannot plant what another user's run executes: a build
// cache entry, a module's source), nor for project two; what bob's run
// writes alice's never sees; `machine rm` removes every user's volume of
// the project, and only that project's.
func TestMachineCacheVolumeDocker(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	root, repo, _ := warmMachine(t, 0)
	// Volume names are per daemon: unique projects keep parallel runs apart.
	one, two := strings.TrimPrefix(store.NewRunID(), "run_"), strings.TrimPrefix(store.NewRunID(), "run_")
	mustRun(t, mx(t, root, "machine", "warm", one, "--repo", repo, "-q"))
	mustRun(t, mx(t, root, "machine", "warm", two, "--repo", repo, "-q"))
	dx := func(user string, args ...string) *exec.Cmd {
		c := mx(t, root, args...)
		c.Env = append(c.Env, "XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE="+img, "XMODE_USER="+user)
		if h := dockertest.Host(); h != client.DefaultDockerHost {
			c.Env = append(c.Env, "XMODE_SANDBOX_DOCKER_HOST="+h)
		}
		return c
	}
	volumesOf := func(project string) []string {
		vs, err := cli.VolumeList(context.Background(), volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "xmode.project="+project))})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, v := range vs.Volumes {
			names = append(names, v.Name)
		}
		slices.Sort(names)
		return names
	}
	var sessions []string
	t.Cleanup(func() {
		ctx := context.Background()
		for _, id := range sessions {
			cli.ContainerRemove(ctx, "xmode-"+id, container.RemoveOptions{Force: true})
		}
		removeProjectVolumes(cli, one)
		removeProjectVolumes(cli, two)
	})
	create := func(user, project string) string {
		id := mustRun(t, dx(user, "sandbox", "create", "--project", project, "-q"))
		sessions = append(sessions, id)
		return id
	}

	a := create("alice", one)
	env := mustRun(t, dx("alice", "sandbox", "exec", a, "--", "sh", "-c",
		`echo $XDG_CACHE_HOME $GOMODCACHE $npm_config_cache $PIP_CACHE_DIR $BUNDLE_PATH; echo kept > /cache/marker`))
	if env != "/cache /cache/go-mod /cache/npm /cache/pip /cache/bundle" {
		t.Fatalf("cache environment: %q", env)
	}
	// the worktree is the machine's: its README is there
	if out := mustRun(t, dx("alice", "sandbox", "exec", a, "--", "cat", "README")); out != "version two" {
		t.Fatalf("README in the sandbox: %q", out)
	}
	mustRun(t, dx("alice", "sandbox", "stop", a))

	b := create("alice", one)
	if out := mustRun(t, dx("alice", "sandbox", "exec", b, "--", "cat", "/cache/marker")); out != "kept" {
		t.Fatalf("alice's next run of the project sees %q in its cache, want kept", out)
	}
	poisoned := create("bob", one)
	if out := mustRun(t, dx("bob", "sandbox", "exec", poisoned, "--", "sh", "-c", "ls -A /cache; echo bob > /cache/bobs")); out != "" {
		t.Fatalf("bob's run of the project sees alice's cache: %q", out)
	}
	if out := mustRun(t, dx("alice", "sandbox", "exec", b, "--", "sh", "-c", "ls -A /cache")); out != "marker" {
		t.Fatalf("alice's cache after bob's run wrote his: %q", out)
	}
	c := create("alice", two)
	if out := mustRun(t, dx("alice", "sandbox", "exec", c, "--", "sh", "-c", "ls -A /cache")); out != "" {
		t.Fatalf("another project's cache holds %q", out)
	}
	if got := volumesOf(one); len(got) != 2 {
		t.Fatalf("project one's cache volumes: %v, want alice's and bob's", got)
	}

	mustRun(t, dx("alice", "machine", "rm", one, "--force"))
	if got := volumesOf(one); len(got) != 0 {
		t.Fatalf("machine rm left the cache volumes %v", got)
	}
	if got := volumesOf(two); len(got) != 1 {
		t.Fatalf("machine rm of one project touched another's volumes: %v", got)
	}
	mustRun(t, dx("alice", "machine", "rm", two, "--force"))
}

// git works in a docker sandbox of a project machine — status, diff, add,
// commit, branch, stash — and its writes land in the run's own overlay:
// the machine's objects, refs, config and hooks are as they were, and the
// change request holds the agent's commit.
func TestGitInDockerMachineWorktree(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	img := dockertest.Image(t)
	for _, mode := range []string{"bind", "volume"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			repo := filepath.Join(dir, "repo")
			if err := makeRepo(repo); err != nil {
				t.Fatal(err)
			}
			root := filepath.Join(dir, "root")
			env := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
				"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host()}
			if mode == "volume" {
				vol, mountpoint := dockertest.StorageVolume(t, cli)
				root = mountpoint
				env = append(env, "XMODE_SANDBOX_STORAGE_VOLUME="+vol, "XMODE_SANDBOX_STORAGE_MOUNT="+mountpoint)
			}
			project := "g" + strings.TrimPrefix(store.NewRunID(), "run_")
			dx := func(args ...string) *exec.Cmd {
				c := mx(t, root, args...)
				c.Env = append(c.Env, env...)
				return c
			}
			mustRun(t, dx("machine", "warm", project, "--repo", repo, "-q"))
			machine := filepath.Join(root, "project_machines", project, "repo")
			before := gitOut(t, machine, "for-each-ref")
			objects := func() string { return gitOut(t, machine, "count-objects", "-v") }
			objBefore := objects()
			id := mustRun(t, dx("sandbox", "create", "--project", project, "-q"))
			t.Cleanup(func() {
				dx("sandbox", "stop", id).Run()
				removeProjectVolumes(cli, project)
			})
			out := mustRun(t, dx("sandbox", "exec", id, "--env", "HOME=/tmp", "--", "sh", "-c", `set -e
export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.com GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.com
echo three > README && git status --porcelain && git diff --stat | tail -1
git add README && git commit -qm 'agent: version three'
git branch agent-work && git branch --list agent-work
echo wip >> README && git stash -q && git stash list | wc -l && git stash pop -q
git log --oneline -1 --format=%s`))
			for _, want := range []string{"M README", "1 file changed", "agent-work", "\n1\n", "agent: version three"} {
				if !strings.Contains("\n"+out+"\n", want) {
					t.Fatalf("git in the sandbox: %q lacks %q", out, want)
				}
			}
			if after := gitOut(t, machine, "for-each-ref"); after != before {
				t.Fatalf("the sandbox moved the machine's refs:\n%s\nwas\n%s", after, before)
			}
			if got := objects(); got != objBefore {
				t.Fatalf("the sandbox wrote the machine's objects:\n%s\nwas\n%s", got, objBefore)
			}
			cr := mustRun(t, dx("cr", "create", id, "--title", "agent work", "-q"))
			show := mustRun(t, dx("cr", "show", cr, "--json"))
			if !strings.Contains(show, "agent: version three") {
				t.Fatalf("the change request lacks the agent's commit:\n%s", show)
			}
			mustRun(t, dx("cr", "verify", cr))
		})
	}
}

// removeProjectVolumes removes a test project's cache volumes: each user's
// (xmode_proj_<project>.u<hash>), found by their project label.
func removeProjectVolumes(cli *client.Client, project string) {
	ctx := context.Background()
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "xmode.project="+project))})
	if err != nil {
		return
	}
	for _, v := range vs.Volumes {
		_ = cli.VolumeRemove(ctx, v.Name, true)
	}
}
