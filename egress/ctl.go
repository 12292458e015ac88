package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// CtlCommand is the hidden command an engine runs, over an exec in the
// proxy's container, when it reaches that container's directory no other
// way (kubernetes: the directory is the pod's memory, never a Secret or a
// ConfigMap): `xmode __egress-ctl put|cat|serve|canary …` (docs/network.md,
// "The process and its directory").
const CtlCommand = "__egress-ctl"

// ctlMaxPut bounds a file put: a policy, a secret, egress.json.
const ctlMaxPut = 1 << 20

// Ctl runs one action of CtlCommand on dir:
//
//	put REL           stdin, whole, as dir/REL (egress.json, policies/<sandbox>.json, secrets/<sandbox>/<name>), mode 0600
//	cat REL           dir/REL (a log, a CA certificate) to stdout, following no link
//	serve SANDBOX H   SIGUSR1 to the proxy (pid 1 of the container) until its state serves policy hash H; the state on stdout
//	canary OPEN SHUT  succeed once a TCP connection to OPEN gets through and one to SHUT does not (a NetworkPolicy in force)
//
// Anything else is an error naming what it takes.
func Ctl(ctx context.Context, dir string, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("an action: put REL, cat REL, serve SANDBOX HASH or canary OPEN SHUT")
	}
	switch act, rest := args[0], args[1:]; {
	case act == "put" && len(rest) == 1:
		rel, err := ctlPath(rest[0])
		if err != nil {
			return err
		}
		b, err := io.ReadAll(io.LimitReader(stdin, ctlMaxPut+1))
		if err != nil {
			return err
		}
		if len(b) > ctlMaxPut {
			return fmt.Errorf("put %s: larger than %d bytes", rel, ctlMaxPut)
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		return writeFileAtomic(p, b, 0o600)
	case act == "cat" && len(rest) == 1:
		rel, err := ctlPath(rest[0])
		if err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(dir, rel), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", rel)
		}
		_, err = io.Copy(stdout, f)
		return err
	case act == "serve" && len(rest) == 2:
		return ctlServe(ctx, dir, rest[0], rest[1], stdout)
	case act == "canary" && len(rest) == 2:
		return Canary(ctx, rest[0], rest[1], 30*time.Second)
	}
	return fmt.Errorf("%q: the actions are put REL, cat REL, serve SANDBOX HASH and canary OPEN SHUT", strings.Join(args, " "))
}

// ctlPath checks a path of the directory: relative, below it, naming
// egress.json or a file under policies/, secrets/, logs/, ca/ or state/.
func ctlPath(rel string) (string, error) {
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%q is not a path inside the egress directory", rel)
	}
	rel = filepath.Clean(rel)
	top, _, _ := strings.Cut(rel, string(filepath.Separator))
	switch top {
	case ConfigFile, PoliciesDir, StateDir, "secrets", "logs", "ca":
		return rel, nil
	}
	return "", fmt.Errorf("%q is not one of the egress directory's files", rel)
}

// ctlServe signals the proxy to scan now (again every second: a signal
// that came while it started is lost) until its state file carries hash.
func ctlServe(ctx context.Context, dir, sandbox, hash string, stdout io.Writer) error {
	if err := checkSandboxID(sandbox); err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	var signalled time.Time
	for {
		if time.Since(signalled) > time.Second {
			if err := syscall.Kill(1, syscall.SIGUSR1); err != nil {
				return fmt.Errorf("signal the proxy (pid 1): %w", err)
			}
			signalled = time.Now()
		}
		st, err := ReadState(dir, sandbox)
		if err == nil && st.Policy == hash {
			b, _ := json.Marshal(st)
			fmt.Fprintf(stdout, "%s\n", b)
			if st.Error != "" {
				return fmt.Errorf("the proxy refuses sandbox %s's policy: %s", sandbox, st.Error)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the proxy did not serve sandbox %s's policy within 15 s", sandbox)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Canary proves, from inside a sandbox's network namespace, that a
// NetworkPolicy holds it: a TCP connection to open (the proxy) gets
// through — the probe works — and one to shut (a port of the proxy that
// listens but that the sandbox's policy does not allow) does not. A plugin
// that applies policies some time after a pod starts passes once it has;
// one that does not enforce them never does, within bound.
func Canary(ctx context.Context, open, shut string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	var d net.Dialer
	var last string
	for {
		try := func(addr string) error {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			c, err := d.DialContext(cctx, "tcp", addr)
			if err == nil {
				c.Close()
			}
			return err
		}
		errOpen, errShut := try(open), try(shut)
		switch {
		case errOpen == nil && errShut != nil:
			return nil
		case errOpen != nil:
			last = fmt.Sprintf("the egress proxy at %s cannot be reached (%v)", open, errOpen)
		default:
			last = fmt.Sprintf("a connection to %s, which the sandbox's NetworkPolicy does not allow, got through: the cluster does not enforce NetworkPolicy", shut)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New(last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
