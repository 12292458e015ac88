package cmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fatih/color"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/xmode/xmode/agents"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fsguard"
	"github.com/xmode/xmode/store"
)

// doctorOptions are `doctor`'s flags.
type doctorOptions struct {
	adopt bool
}

func (a *App) newDoctor() *cobra.Command {
	var o doctorOptions
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check a deployment: storage root, database, git, docker daemon, TLS, image, runtime, storage volume, isolation, Kubernetes cluster",
		Long: `Check everything xmode needs on this machine. Each line is ok, warn or fail,
with a fix. Every engine built in checks its own deployment (docker: the
daemon, TLS, the image, the runtime, the mount model; kubernetes: the
cluster, the namespace, each permission, NetworkPolicy enforcement, the
runtime class, the image); its failures are
failures when it is the configured engine (XMODE_SANDBOX_ENGINE) and
warnings otherwise. Each engine also says how it keeps a step's processes
together so that none outlives the step ("host steps": cgroup, or
process-group where no cgroup can be made, a warning; "docker steps":
container); --json gives it as "method".

--adopt makes a storage root whose store was lost (xmode.db missing, emptied
or another install's, while runs/ or project_machines/ remain) usable again,
deliberately: a new store keeps the root's instance, what is left of the old
database is moved aside, and every run directory stays (the reaper leaves
runs the store does not know alone unless ` + "`xmode reap --reclaim-unknown`" + `).

EXIT STATUS
  0 when nothing failed (warnings allowed), 1 when any check failed, 2 when
  the configuration itself is invalid.` + pipeExitHelp,
		Example: `  xmode doctor
  xmode doctor --adopt     # after restoring nothing: start a new store over a used root`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runDoctor(cmd.Context(), o) },
	}
	cmd.Flags().BoolVar(&o.adopt, "adopt", false, "start a new store over a storage root whose store was lost, keeping every run directory")
	return cmd
}

func (a *App) runDoctor(ctx context.Context, o doctorOptions) error {
	cfg, err := a.config(nil)
	if err != nil {
		return err
	}
	if o.adopt {
		st, res, err := store.Adopt(ctx, cfg.StorageRoot)
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
	checks := doctor(ctx, cfg, a.Env)
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
			fmt.Fprintf(a.Out, "%s  %-16s %s\n", mark, c.Name, clean(c.Detail))
			if c.Fix != "" && c.Status != "ok" {
				fmt.Fprintf(a.Out, "      %-16s fix: %s\n", "", clean(c.Fix))
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
}

func doctor(ctx context.Context, cfg *config.Config, getenv func(string) string) []engine.Check {
	var out []engine.Check
	add := func(name, status, detail, fix string) {
		out = append(out, engine.Check{Name: name, Status: status, Detail: detail, Fix: fix})
	}

	// storage root and database: looked at, never created (the first
	// command that needs them does that).
	dbPath := filepath.Join(cfg.StorageRoot, store.FileName)
	if st, err := os.Stat(cfg.StorageRoot); errors.Is(err, fs.ErrNotExist) {
		parent := existingParent(cfg.StorageRoot)
		if unix.Access(parent, unix.W_OK) != nil {
			add("storage root", "fail", cfg.StorageRoot+" does not exist and "+parent+" is not writable", "create it, or set XMODE_STORAGE_ROOT or --storage-root to a writable directory")
		} else {
			add("storage root", "ok", cfg.StorageRoot+" does not exist yet: the first `xmode sandbox create` makes it", "")
		}
	} else if err != nil || !st.IsDir() {
		add("storage root", "fail", cfg.StorageRoot+" is not a directory", "set XMODE_STORAGE_ROOT or --storage-root to a writable directory")
	} else if unix.Access(cfg.StorageRoot, unix.W_OK) != nil {
		add("storage root", "fail", cfg.StorageRoot+" is not writable", "fix its permissions or choose another --storage-root")
	} else {
		add("storage root", "ok", cfg.StorageRoot+" is writable", "")
	}

	// database
	if _, err := os.Stat(dbPath); errors.Is(err, fs.ErrNotExist) {
		if used, _ := filepath.Glob(filepath.Join(cfg.StorageRoot, "runs", "run_*")); len(used) > 0 {
			add("database", "fail", dbPath+" is missing while "+cfg.StorageRoot+" holds runs", "restore xmode.db from a backup, or `xmode doctor --adopt`")
		} else {
			add("database", "ok", dbPath+" does not exist yet: the first command that needs it creates it", "")
		}
	} else if unclaimed, st, err := openClaimed(ctx, cfg.StorageRoot); err != nil {
		fix := "see the message; a newer schema needs a newer xmode"
		if errors.Is(err, store.ErrLost) {
			fix = "restore xmode.db from a backup, or `xmode doctor --adopt`"
		}
		add("database", "fail", err.Error(), fix)
	} else {
		opens := fmt.Sprintf("%s opens (schema %d, WAL)", st.Path(), store.SchemaVersion())
		if unclaimed {
			add("database", "warn", opens+", but "+store.InstanceFile+" was missing: "+whoseStore(ctx, st, cfg.StorageRoot),
				"if it is another install's (copied or restored from elsewhere), move "+store.FileName+" aside and restore this root's from a backup, or start a new store with `xmode doctor --adopt`")
		} else {
			add("database", "ok", opens, "")
		}
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

	switch {
	case cfg.Engine == "":
		add("engine", "warn", "XMODE_SANDBOX_ENGINE is unset: every session runs as a host process", "for hardened docker containers set XMODE_SANDBOX_ENGINE=docker and XMODE_RUNNER_MODE=cloud_worker")
	case cfg.RunnerMode == config.ModeLocalWorktree:
		add("engine", "warn", "XMODE_SANDBOX_ENGINE="+cfg.Engine+", but new sessions are local_worktree (runner mode "+cfg.RunnerMode+", "+sourceOf(cfg, "XMODE_RUNNER_MODE")+"), which runs on the host: only cloud_worker sessions run on the "+cfg.Engine+" engine",
			"set XMODE_RUNNER_MODE=cloud_worker (or create with --runner-mode cloud_worker)")
	default:
		add("engine", "ok", "new sessions ("+cfg.RunnerMode+") run on the "+cfg.Engine+" engine", "")
	}
	if left := cfg.Unapplied(); len(left) > 0 {
		add("limits", "warn", "bind mode (no storage volume) keeps the lightweight docker argv: "+strings.Join(left, ", ")+" are not applied, nor cap-drop and no-new-privileges",
			"set XMODE_SANDBOX_STORAGE_VOLUME for volume mode, XMODE_SANDBOX_BIND_HARDENED=1 to apply them all in bind mode, or set the ones you need explicitly")
	}

	// Each engine checks its own deployment; only the configured one's
	// failures fail the doctor.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	enforced := false // the engine of new sessions holds them to an egress policy
	for _, name := range engine.Names() {
		configured := name == cfg.Engine
		a, err := engine.Open(name, cfg)
		if err != nil {
			add(name, badStatus(configured), err.Error(), "fix the "+name+" engine's settings (`xmode config` shows them)")
			continue
		}
		checks, _ := engine.Health(cctx, a)
		if c, ok := engine.StepContainment(a); ok {
			status := engine.CheckOK
			if c.Weak {
				status = engine.CheckWarn
			}
			checks = append(checks, engine.Check{Name: name + " steps", Status: status, Method: c.Method, Detail: c.Method + ": " + c.Detail, Fix: c.Fix})
		}
		// Whether it can hold a sandbox to an egress policy, warning where
		// the configuration asks new sessions of this engine for one.
		_, proxied := cfg.EgressMode()
		chosen, _ := engine.Choose(cfg.RunnerMode, cfg.Engine)
		checks = append(checks, engine.EgressCheck(name, a, proxied && chosen == name))
		if _, ok := engine.Egress(a); ok && chosen == name {
			enforced = true
		}
		engine.Close(a)
		for _, c := range checks {
			if c.Status == engine.CheckFail {
				c.Status = badStatus(configured)
			}
			out = append(out, c)
		}
	}
	// Whether the agents' keys reach their sandboxes, or only the edge.
	out = append(out, agents.CredentialCheck(cfg, getenv, enforced))
	return out
}

// openClaimed opens the store and reports whether the root that has been
// used (runs/ or project_machines/) had no xmode.instance to check the
// database against: a database of another install is then taken for this
// root's, and the open records its instance as the root's.
func openClaimed(ctx context.Context, root string) (bool, *store.Store, error) {
	_, err := os.Stat(filepath.Join(root, store.InstanceFile))
	unclaimed := errors.Is(err, fs.ErrNotExist)
	if unclaimed {
		runs, _ := os.Stat(filepath.Join(root, "runs"))
		machines, _ := os.Stat(filepath.Join(root, fsguard.MachinesDirName))
		unclaimed = runs != nil || machines != nil
	}
	st, err := store.Open(ctx, root)
	return unclaimed, st, err
}

// whoseStore says what can be told about a database the root had no
// instance for: nothing for certain (a root made before xmode.instance
// existed looks the same), but run directories it does not know point to
// another install's.
func whoseStore(ctx context.Context, st *store.Store, root string) string {
	inst, _ := st.InstanceID(ctx)
	msg := "xmode cannot tell whether this database is this root's own or another install's, and took it as this root's (instance " + inst + ", recorded now)"
	dirs, _ := filepath.Glob(filepath.Join(root, "runs", "run_*"))
	known, err := st.KnownRuns(ctx)
	if err != nil || len(dirs) == 0 {
		return msg
	}
	unknown := 0
	for _, d := range dirs {
		if !known[filepath.Base(d)] {
			unknown++
		}
	}
	if unknown == 0 {
		return msg + "; it knows every run under runs/, as this root's own would"
	}
	return msg + fmt.Sprintf("; it does not know %d of the %d runs under runs/, as another install's would not", unknown, len(dirs))
}

// existingParent is the nearest directory above p that exists.
func existingParent(p string) string {
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			return d
		}
	}
}

// sourceOf says where a setting's value came from.
func sourceOf(cfg *config.Config, name string) string {
	for _, v := range cfg.Values {
		if v.Name == name {
			return v.Source
		}
	}
	return "default"
}

// badStatus is how much a failing check of an engine matters: a failure
// for the configured engine, a warning for one that is merely built in.
func badStatus(configured bool) string {
	if configured {
		return engine.CheckFail
	}
	return engine.CheckWarn
}
