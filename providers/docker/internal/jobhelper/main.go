// Command jobhelper plays xmode in the design's job container, for the
// production-topology test (providers/docker TestJobContainerTopology): it
// runs inside a container that has the docker socket and the storage volume
// mounted at its storage root, writes a worktree there, provisions a sibling
// sandbox in volume mode through the docker provider, runs steps in it and
// destroys it. It prints what it saw as key=value lines; exit 0 on success.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/providers/docker"
)

func main() {
	if err := run(); err != nil {
		fmt.Println("error=" + strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.Load(nil, nil)
	if err != nil {
		return err
	}
	p, err := docker.New(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	method, _, err := p.IsolationMethod(ctx)
	if err != nil {
		return err
	}
	fmt.Println("isolation=" + method)

	run, session := os.Getenv("JOB_RUN"), os.Getenv("JOB_SESSION")
	g := fsguard.Guard{Root: cfg.StorageRoot}
	wt, err := g.Worktree(run)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(wt, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(wt, "hello.txt"), []byte("written by xmode in the job container\n"), 0o644); err != nil {
		return err
	}
	sb, err := p.Provision(ctx, engine.Spec{
		SessionID: session, RunID: run, Project: "job", Worktree: wt,
		Labels: map[string]string{
			"xmode.managed": "true", "xmode.session": session, "xmode.run": run,
			"xmode.instance": os.Getenv("JOB_INSTANCE"), "xmode.test": "true",
		},
	})
	if err != nil {
		return err
	}
	defer p.Destroy(context.Background(), sb)
	fmt.Println("mount_mode=" + sb.MountMode)

	var out, errb bytes.Buffer
	st, err := p.Exec(ctx, sb, engine.ExecRequest{
		Argv:   []string{"sh", "-c", `cat hello.txt; pwd; ls "$1"; echo from the sibling > sibling.txt`, "sh", cfg.StorageMount + "/runs"},
		Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		return err
	}
	fmt.Printf("exit=%d\n", st.ExitCode)
	for i, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		fmt.Printf("out%d=%s\n", i, line)
	}
	if errb.Len() > 0 {
		fmt.Println("stderr=" + strings.ReplaceAll(errb.String(), "\n", " "))
	}
	back, err := os.ReadFile(filepath.Join(wt, "sibling.txt"))
	if err != nil {
		return fmt.Errorf("the sibling's file is not in the job container's worktree: %w", err)
	}
	fmt.Println("back=" + strings.TrimSpace(string(back)))
	if err := p.Destroy(ctx, sb); err != nil {
		return err
	}
	fmt.Println("destroyed=true")
	return nil
}
