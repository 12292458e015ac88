package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/providers/docker"
	"github.com/xmode/xmode/store"
)

// check is one line of `xmode doctor`.
type check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, warn, fail
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

func (a *App) newDoctor() *cobra.Command {
	var adopt bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check a deployment: storage root, database, git, docker daemon, image, storage volume, isolation",
		Long: `Check everything xmode needs on this machine. Each line is ok, warn or fail,
with a fix. Docker checks are failures when XMODE_SANDBOX_ENGINE=docker and
warnings otherwise.

--adopt makes a storage root whose store was lost (xmode.db missing, emptied
or another install's, while runs/ or project_machines/ remain) usable again,
deliberately: a new store keeps the root's instance, what is left of the old
database is moved aside, and every run directory stays (the reaper leaves
runs the store does not know alone unless ` + "`xmode reap --reclaim-unknown`" + `).

EXIT STATUS
  0 when nothing failed (warnings allowed), 1 when any check failed, 2 when
  the configuration itself is invalid.`,
		Example: `  xmode doctor
  xmode doctor --adopt     # after restoring nothing: start a new store over a used root`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.config(nil)
			if err != nil {
				return err
			}
			if adopt {
				st, res, err := store.Adopt(cmd.Context(), cfg.StorageRoot)
				if err != nil {
					return err
				}
				st.Close()
				switch {
				case !res.Adopted:
					a.info("nothing to adopt: the store of %s is this root's (instance %s)", cfg.StorageRoot, res.Instance)
				default:
					a.info("adopted %s: %s; the store is instance %s now", cfg.StorageRoot, res.Reason, res.Instance)
					for _, m := range res.MovedTo {
						a.info("kept the old database file as %s", m)
					}
				}
			}
			checks := doctor(cmd.Context(), cfg)
			failed := 0
			for _, c := range checks {
				if c.Status == "fail" {
					failed++
				}
			}
			if a.json {
				if err := a.printJSON(checks); err != nil {
					return err
				}
			} else {
				for _, c := range checks {
					mark := map[string]string{"ok": a.paint(color.FgGreen, "ok  "), "warn": a.paint(color.FgYellow, "warn"), "fail": a.paint(color.FgRed, "fail")}[c.Status]
					fmt.Fprintf(a.Out, "%s  %-16s %s\n", mark, c.Name, c.Detail)
					if c.Fix != "" && c.Status != "ok" {
						fmt.Fprintf(a.Out, "      %-16s fix: %s\n", "", c.Fix)
					}
				}
			}
			if failed > 0 {
				if !a.json {
					fmt.Fprintf(a.Err, "xmode: %d check(s) failed\n", failed)
				}
				return exitStatus(1)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&adopt, "adopt", false, "start a new store over a storage root whose store was lost, keeping every run directory")
	return cmd
}

func doctor(ctx context.Context, cfg *config.Config) []check {
	var out []check
	add := func(name, status, detail, fix string) { out = append(out, check{name, status, detail, fix}) }

	// storage root
	if err := os.MkdirAll(cfg.StorageRoot, 0o755); err != nil {
		add("storage root", "fail", err.Error(), "set XMODE_STORAGE_ROOT or --storage-root to a writable directory")
	} else if f, err := os.CreateTemp(cfg.StorageRoot, ".doctor-*"); err != nil {
		add("storage root", "fail", cfg.StorageRoot+" is not writable: "+err.Error(), "fix its permissions or choose another --storage-root")
	} else {
		f.Close()
		os.Remove(f.Name())
		add("storage root", "ok", cfg.StorageRoot+" is writable", "")
	}

	// database
	if st, err := store.Open(ctx, cfg.StorageRoot); err != nil {
		fix := "see the message; a newer schema needs a newer xmode"
		if errors.Is(err, store.ErrLost) {
			fix = "restore xmode.db from a backup, or `xmode doctor --adopt`"
		}
		add("database", "fail", err.Error(), fix)
	} else {
		add("database", "ok", fmt.Sprintf("%s opens (schema %d, WAL)", st.Path(), store.SchemaVersion()), "")
		st.Close()
	}

	// git
	if path, err := exec.LookPath("git"); err != nil {
		add("git", "fail", "git is not on PATH: local clones and project machines need it", "install git (apt-get install git)")
	} else if v, err := exec.Command(path, "--version").Output(); err != nil {
		add("git", "fail", path+": "+err.Error(), "reinstall git")
	} else {
		add("git", "ok", strings.TrimSpace(string(v)), "")
	}

	// docker
	bad := "warn"
	if cfg.Engine == "docker" {
		bad = "fail"
	}
	p, err := docker.New(cfg)
	if err != nil {
		add("docker", bad, err.Error(), "check XMODE_SANDBOX_DOCKER_HOST / DOCKER_HOST")
		return out
	}
	defer p.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	api, err := p.Ping(cctx)
	if err != nil {
		add("docker daemon", bad, err.Error(), "start dockerd, or point XMODE_SANDBOX_DOCKER_HOST at a reachable daemon")
		return out
	}
	add("docker daemon", "ok", fmt.Sprintf("%s answers, API %s (negotiated)", p.Host(), api), "")
	if cfg.Engine != "docker" {
		add("engine", "warn", "XMODE_SANDBOX_ENGINE is unset: cloud_worker sessions run as host processes", "set XMODE_SANDBOX_ENGINE=docker for hardened containers")
	} else {
		add("engine", "ok", "cloud_worker sessions run in docker containers", "")
	}
	if ok, err := p.ImagePresent(cctx, cfg.Image); err != nil {
		add("image", bad, err.Error(), "")
	} else if !ok {
		add("image", "warn", cfg.Image+" is not present locally: sandbox create will pull it", "docker pull "+cfg.Image+" (or set XMODE_SANDBOX_IMAGE to a local image)")
	} else {
		add("image", "ok", cfg.Image+" is present", "")
	}
	if cfg.StorageVolume == "" {
		add("mount model", "ok", "bind mode: <worktree>:/workspace (XMODE_SANDBOX_STORAGE_VOLUME unset)", "")
		return out
	}
	if ok, err := p.VolumePresent(cctx, cfg.StorageVolume); err != nil || !ok {
		msg := fmt.Sprintf("storage volume %s does not exist", cfg.StorageVolume)
		if err != nil {
			msg = err.Error()
		}
		add("storage volume", "fail", msg, "docker volume create "+cfg.StorageVolume+" and mount it at "+cfg.StorageMount+" where xmode runs")
		return out
	}
	add("storage volume", "ok", fmt.Sprintf("%s present, mounted in sandboxes at %s", cfg.StorageVolume, cfg.StorageMount), "")
	if cfg.StorageMount != cfg.StorageRoot && !strings.HasPrefix(cfg.StorageRoot, filepath.Clean(cfg.StorageMount)+"/") {
		add("storage mount", "warn", fmt.Sprintf("the storage root %s is not the volume's mount %s: sandboxes will not see the worktrees xmode writes unless the volume is mounted at the storage root here", cfg.StorageRoot, cfg.StorageMount), "set XMODE_SANDBOX_STORAGE_MOUNT to the storage root")
	}
	method, detail, err := p.IsolationMethod(cctx)
	switch {
	case err != nil:
		add("isolation", "fail", err.Error(), "")
	case method == docker.IsolationWholeVolume:
		add("isolation", "warn", detail, "Engine 26+ (API 1.45) mounts volume subpaths; a local-driver volume allows the mountpoint bind")
	default:
		add("isolation", "ok", method+": "+detail, "")
	}
	return out
}
