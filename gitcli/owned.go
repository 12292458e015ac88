package gitcli

import (
	"context"
	"io"
	"os"
	"strings"
)

// Owned is a git run whose configuration is xmode's own: git reads no
// system, global or environment configuration and no attributes or
// excludes file of the user, only the repository's own config. On a
// repository xmode created and alone writes (GitDir: the object store of
// change requests) no program git could be told to run (hooks, fsmonitor,
// external diff, textconv, filters, pagers) is defined anywhere it looks.
// Dir instead runs in a repository of the user's (`cr export`).
type Owned struct {
	GitDir    string    // GIT_DIR: a repository xmode created
	Dir       string    // -C: a repository of the user's (when GitDir is "")
	IndexFile string    // GIT_INDEX_FILE, when the command needs an index
	Stdin     io.Reader // nil: no input
	Stdout    io.Writer // nil: captured and returned, trimmed
	// Alternates are more object directories git reads from
	// (GIT_ALTERNATE_OBJECT_DIRECTORIES): other stores xmode owns, for a
	// diff between trees kept in two of them.
	Alternates []string
}

// ownedConfig is passed to every Owned run: beside hooks and the fsmonitor,
// it switches off the user's attributes and excludes files (they live in
// $XDG_CONFIG_HOME whatever GIT_CONFIG_GLOBAL says) and automatic gc.
var ownedConfig = []string{
	"-c", "core.attributesFile=/dev/null", "-c", "core.excludesFile=/dev/null",
	"-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "core.pager=cat",
}

// ownedEnv is the environment of an Owned run: the caller's, minus every
// GIT_* variable (GIT_CONFIG_PARAMETERS, GIT_EXTERNAL_DIFF, GIT_DIR…),
// plus the ones that pin git to the repository and to no configuration.
func ownedEnv(o Owned) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	if o.GitDir != "" {
		env = append(env, "GIT_DIR="+o.GitDir)
	}
	env = append(env, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ATTR_NOSYSTEM=1", "GIT_NO_REPLACE_OBJECTS=1", "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0")
	if o.IndexFile != "" {
		env = append(env, "GIT_INDEX_FILE="+o.IndexFile)
	}
	if len(o.Alternates) > 0 {
		env = append(env, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+strings.Join(o.Alternates, ":"))
	}
	return env
}

// RunOwned runs git args… on the repository o names, with the host-owned
// configuration above and Run's cancellation and error reporting.
func RunOwned(ctx context.Context, o Owned, args ...string) (string, error) {
	wait, err := StartOwned(ctx, o, args...)
	if err != nil {
		return "", err
	}
	return wait()
}

// StartOwned starts what RunOwned runs and returns the function that
// waits for it, for a git that must start before its input is ready.
func StartOwned(ctx context.Context, o Owned, args ...string) (wait func() (string, error), err error) {
	argv := append(append([]string(nil), safety...), ownedConfig...)
	if o.GitDir == "" && o.Dir != "" {
		argv = append(argv, "-C", o.Dir)
	}
	argv = append(argv, args...)
	return start(ctx, nil, ownedEnv(o), o.Stdin, o.Stdout, argv, args)
}
