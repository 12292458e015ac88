package cmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/httpserve"
	"github.com/xmode/xmode/ui"
)

// uiOptions are `xmode ui`'s flags.
type uiOptions struct {
	listen      string
	open        bool
	allowRemote bool
}

func (a *App) newUI() *cobra.Command {
	var o uiOptions
	cmd := &cobra.Command{
		Use:   "ui [--listen ADDR] [--open]",
		Short: "Review in a browser: runs, live steps, change requests with their diff, evidence and review form",
		Long: `Serve a local web app over this storage root: runs (plan, a timeline of the
steps, each step's output, live while it runs), change requests (files, a
highlighted unified or side-by-side diff, the evidence, the verification,
approve / request changes / reject, export to a branch), sessions (stop,
extend), project machines and their pools, Codex cloud tasks. It calls what
the commands call, and keeps no state of its own. See docs/ui.md.

It listens on loopback (--listen 127.0.0.1:0 picks a free port) and prints
the URL with a token, as Jupyter does: http://xmode-PORT.localhost:PORT/, a
name of its own that browsers resolve to this machine, so that its cookie
goes to no other local server. Opening the URL logs that browser in (a
login of its own, for 12 hours or until Log out); every request without
one is refused. Another address only with --allow-remote (the traffic is
plain HTTP: put it behind TLS or an SSH tunnel); an empty host (:8765) is
refused, as by ` + "`xmode mcp --listen`" + `. --open opens the URL in a browser.
Ctrl-C stops it.` + exitStatusHelp,
		Example: `  xmode ui
  xmode ui --open
  xmode ui --listen 127.0.0.1:8765`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runUI(cmd.Context(), o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:0", "address to listen on (port 0: a free one)")
	f.BoolVar(&o.open, "open", false, "open the URL in a browser (xdg-open)")
	f.BoolVar(&o.allowRemote, "allow-remote", false, "let --listen take an address other machines reach")
	return a.setTraits(cmd, traits{interrupted: "stopped serving"})
}

func (a *App) runUI(ctx context.Context, o uiOptions) error {
	if err := httpserve.CheckListen(o.listen, o.allowRemote); err != nil {
		return err
	}
	svc, err := a.service(ctx, nil)
	if err != nil {
		return err
	}
	ln, err := httpserve.Listen(o.listen, o.allowRemote)
	if err != nil {
		return err
	}
	defer ln.Close()
	host, _, _ := net.SplitHostPort(o.listen)
	addr := ln.Addr().(*net.TCPAddr)
	shown := host
	remote := !httpserve.Loopback(host)
	switch {
	case addr.IP.IsUnspecified():
		shown, _ = os.Hostname()
	case host != "localhost":
		shown = addr.IP.String()
	}
	reach := net.JoinHostPort(shown, fmt.Sprint(addr.Port))
	srv, err := ui.New(ui.Options{Svc: svc, Changes: changesOf(svc), Addr: reach, Remote: remote})
	if err != nil {
		return err
	}
	url := srv.URL()
	// The URL first: a reader of it that is already gone (| head with its
	// line) ends xmode ui before it serves anyone (141, silently).
	if _, err := fmt.Fprintln(a.Out, url); err != nil {
		return err
	}
	served := make(chan error, 1)
	// Handlers (a live log) end when xmode is asked to stop.
	go func() { served <- httpserve.Serve(ctx, ln, srv, httpserve.Options{Base: ctx}) }()
	a.info("xmode ui: serving %s at the URL above; Ctrl-C stops it", svc.Cfg.StorageRoot)
	if o.open {
		page, err := a.openBrowser(svc.Cfg.StorageRoot, url)
		if err != nil {
			a.warn([]string{"could not open a browser (" + err.Error() + "): open the URL above yourself"})
		}
		if page != "" {
			defer os.Remove(page)
		}
	}
	if err := <-served; err != nil {
		return fail.Failedf("serve %s: %v", reach, err)
	}
	a.info("xmode ui: stopped")
	return nil
}

// openBrowser opens url with xdg-open, through a file that redirects to
// it, as Jupyter does: the token never appears on a command line that
// other users could read in ps. It returns the file, which the caller
// removes when it stops serving.
func (a *App) openBrowser(root, url string) (string, error) {
	opener, err := exec.LookPath("xdg-open")
	if err != nil {
		return "", errors.New("xdg-open is not on PATH")
	}
	f, err := os.CreateTemp(root, "ui-open-*.html") // 0600
	if err != nil {
		return "", err
	}
	page := `<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=` + url + `"><title>xmode ui</title><a href="` + url + `">xmode ui</a>`
	_, err = f.WriteString(page)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return f.Name(), err
	}
	c := exec.Command(opener, filepath.Clean(f.Name()))
	if err := c.Start(); err != nil {
		return f.Name(), err
	}
	go c.Wait() // reap it; a browser it starts lives on
	return f.Name(), nil
}
