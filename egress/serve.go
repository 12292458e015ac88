package egress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The configuration directory a proxy process serves (docs/network.md,
// "The process and its directory"):
//
//	egress.json              Config (optional)
//	policies/<sandbox>.json  one Policy each, written whole (WritePolicy)
//	state/<sandbox>.json     written by the proxy: where it listens, which policy it serves
//	ca/<sandbox>/            the sandbox's CA (ca.pem for the sandbox, the key for the proxy)
//	logs/<sandbox>.jsonl     the sandbox's network log, and .dropped beside it
const (
	ConfigFile  = "egress.json"
	PoliciesDir = "policies"
	StateDir    = "state"
)

// ConfigError is a configuration the process cannot serve: it exits
// non-zero rather than serve something else.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// configFile is egress.json.
type configFile struct {
	Block       []blockJSON `json:"block,omitempty"`
	ExtraCAFile string      `json:"extra_ca_file,omitempty"`
	LogMaxBytes int64       `json:"log_max_bytes,omitempty"`
	ResolveOnly bool        `json:"resolve_only,omitempty"`
	DNSRate     float64     `json:"dns_rate,omitempty"`
	DNSBurst    int         `json:"dns_burst,omitempty"`
}

// WriteConfig writes egress.json.
func WriteConfig(dir string, c Config) error {
	b, err := EncodeConfig(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, ConfigFile), b, 0o600)
}

// EncodeConfig is egress.json's content, for a writer that hands it to the
// process another way (`xmode __egress --config-json`).
func EncodeConfig(c Config) ([]byte, error) {
	f := configFile{ExtraCAFile: c.ExtraCAFile, LogMaxBytes: c.LogMaxBytes, ResolveOnly: c.ResolveOnly, DNSRate: c.DNSRate, DNSBurst: c.DNSBurst}
	for _, b := range c.Block {
		f.Block = append(f.Block, blockJSON{b.Prefix, b.Reason, b.Liftable})
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ReadConfig reads egress.json; without one, the defaults.
func ReadConfig(dir string) (Config, error) {
	b, err := readSmall(filepath.Join(dir, ConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Config{}, nil
	}
	if err != nil {
		return Config{}, err
	}
	var f configFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Config{}, fmt.Errorf("%s: %w", ConfigFile, err)
	}
	if f.LogMaxBytes < 0 || f.DNSRate < 0 || f.DNSBurst < 0 {
		return Config{}, fmt.Errorf("%s: log_max_bytes, dns_rate and dns_burst may not be negative", ConfigFile)
	}
	c := Config{ExtraCAFile: f.ExtraCAFile, LogMaxBytes: f.LogMaxBytes, ResolveOnly: f.ResolveOnly, DNSRate: f.DNSRate, DNSBurst: f.DNSBurst}
	for _, b := range f.Block {
		if !b.CIDR.IsValid() {
			return Config{}, fmt.Errorf("%s: a block entry needs a cidr", ConfigFile)
		}
		c.Block = append(c.Block, Block{b.CIDR.Masked(), b.Reason, b.Liftable})
	}
	return c, nil
}

// WritePolicy writes a sandbox's policy file whole; a running proxy
// serves it from its next scan (at once on SIGUSR1), and its state file
// then carries the file's hash (PolicyHash).
func WritePolicy(dir string, p Policy) (hash string, err error) {
	b, err := EncodePolicy(p)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(dir, PoliciesDir), 0o700); err != nil {
		return "", err
	}
	if err := writeFileAtomic(filepath.Join(dir, PoliciesDir, p.Sandbox+".json"), b, 0o600); err != nil {
		return "", err
	}
	return PolicyHash(b), nil
}

// EncodePolicy is a policy's file as WritePolicy writes it, for a writer
// that places the file itself (with another owner, or into a container
// through the daemon's archive API): policies/<sandbox>.json, served once
// the state file carries PolicyHash of these bytes.
func EncodePolicy(p Policy) ([]byte, error) {
	if err := checkSandboxID(p.Sandbox); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// PolicyHash names a policy file's content.
func PolicyHash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// State is what the proxy says about a sandbox it serves
// (state/<sandbox>.json).
type State struct {
	Sandbox string    `json:"sandbox"`
	Proxy   string    `json:"proxy,omitempty"` // where its proxy listens (the port chosen when the policy said 0)
	DNS     string    `json:"dns,omitempty"`
	CACert  string    `json:"ca_cert,omitempty"` // the certificate the sandbox trusts
	Policy  string    `json:"policy"`            // the hash of the policy file served
	Error   string    `json:"error,omitempty"`   // why the file's policy is not served (everything is refused)
	Time    time.Time `json:"time"`
}

// ReadState reads a sandbox's state file.
func ReadState(dir, sandbox string) (State, error) {
	var s State
	b, err := readSmall(filepath.Join(dir, StateDir, sandbox+".json"))
	if err != nil {
		return s, err
	}
	err = json.Unmarshal(b, &s)
	return s, err
}

// ServeOptions run a proxy process on a directory.
type ServeOptions struct {
	Dir    string
	Reload <-chan struct{} // a scan now (SIGUSR1)
	Poll   time.Duration   // between scans; 0: one second
	Stderr io.Writer
	Lookup LookupFunc
	Getenv func(string) string
	Now    func() time.Time
	// KeepGoing serves what it can at start too: a policy that cannot be
	// served (an address gone, a secret unreadable) puts its sandbox in
	// mode none, as it would later, instead of ending the process. A proxy
	// shared by many sandboxes and restarted by its engine uses it, so one
	// sandbox's stale file cannot keep every other one offline.
	KeepGoing bool
}

// Serve runs the proxy for every policy in dir until ctx ends. A bad
// configuration at start (egress.json, a policy, a secret, an address it
// cannot listen on) is a ConfigError. Later, a policy file that changed
// is served for new connections from the scan that sees it; one that no
// longer reads puts its sandbox in mode none (its state says why); a
// removed one stops its sandbox's listeners.
func Serve(ctx context.Context, o ServeOptions) error {
	cfg, err := ReadConfig(o.Dir)
	if err != nil {
		return &ConfigError{err}
	}
	srv, err := NewServer(Options{Dir: o.Dir, Config: cfg, Lookup: o.Lookup, Getenv: o.Getenv, Now: o.Now})
	if err != nil {
		return &ConfigError{err}
	}
	defer srv.Close()
	if err := os.MkdirAll(filepath.Join(o.Dir, StateDir), 0o700); err != nil {
		return &ConfigError{err}
	}
	// A state file says what this process serves: one a previous process
	// left (a restart) would tell a writer its policy is served before
	// anything listens.
	if old, err := os.ReadDir(filepath.Join(o.Dir, StateDir)); err == nil {
		for _, e := range old {
			if strings.HasSuffix(e.Name(), ".json") {
				_ = os.Remove(filepath.Join(o.Dir, StateDir, e.Name()))
			}
		}
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	w := &watcher{srv: srv, o: o, known: map[string]string{}}
	if err := w.scan(!o.KeepGoing); err != nil {
		return &ConfigError{err}
	}
	tick := time.NewTicker(o.Poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.Reload:
		case <-tick.C:
		}
		_ = w.scan(false)
	}
}

// ReloadSignal is a channel that gets a value on each SIGUSR1 (SIGHUP
// ends xmode's commands), and the function that stops it.
func ReloadSignal() (<-chan struct{}, func()) {
	sig := make(chan os.Signal, 1)
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		for {
			select {
			case <-sig:
				select {
				case out <- struct{}{}:
				default:
				}
			case <-done:
				return
			}
		}
	}()
	return out, func() { signal.Stop(sig); close(done) }
}

type watcher struct {
	srv   *Server
	o     ServeOptions
	known map[string]string // sandbox → hash of the policy file served (or refused)
}

// scan serves what changed in policies/; strict (at start) stops at the
// first policy that cannot be served.
func (w *watcher) scan(strict bool) error {
	dir := filepath.Join(w.o.Dir, PoliciesDir)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		if strict {
			return err
		}
		fmt.Fprintf(w.o.Stderr, "xmode egress: %v\n", err)
		return err
	}
	seen := map[string]bool{}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := checkSandboxID(id); err != nil {
			if strict {
				return fmt.Errorf("%s: %w", filepath.Join(PoliciesDir, e.Name()), err)
			}
			continue
		}
		seen[id] = true
		b, err := readSmall(filepath.Join(dir, e.Name()))
		if err != nil {
			if strict {
				return err
			}
			continue // removed between the listing and now: the next scan says so
		}
		hash := PolicyHash(b)
		if w.known[id] == hash {
			continue
		}
		w.known[id] = hash
		if err := w.apply(id, b, hash); err != nil {
			err = fmt.Errorf("policy %s: %w", filepath.Join(PoliciesDir, e.Name()), err)
			if strict {
				return err
			}
			fmt.Fprintf(w.o.Stderr, "xmode egress: %v; its sandbox is refused everything until the file is fixed\n", err)
			w.srv.Refuse(id)
			w.writeState(State{Sandbox: id, Policy: hash, Error: err.Error()}, Listening{})
		}
	}
	for id := range w.known {
		if !seen[id] {
			delete(w.known, id)
			w.srv.Remove(id)
			_ = os.Remove(filepath.Join(w.o.Dir, StateDir, id+".json"))
		}
	}
	return nil
}

func (w *watcher) apply(id string, b []byte, hash string) error {
	var p Policy
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	if p.Sandbox != id {
		return fmt.Errorf("the file names sandbox %q", p.Sandbox)
	}
	l, err := w.srv.Apply(p)
	if err != nil {
		return err
	}
	w.writeState(State{Sandbox: id, Policy: hash, CACert: filepath.Join(CADir(w.o.Dir, id), CACertFile)}, l)
	return nil
}

func (w *watcher) writeState(s State, l Listening) {
	s.Proxy, s.DNS, s.Time = l.Proxy, l.DNS, w.srv.opts.Now().UTC()
	b, err := json.MarshalIndent(s, "", "  ")
	if err == nil {
		err = writeFileAtomic(filepath.Join(w.o.Dir, StateDir, s.Sandbox+".json"), append(b, '\n'), 0o644)
	}
	if err != nil {
		fmt.Fprintf(w.o.Stderr, "xmode egress: state of %s: %v\n", s.Sandbox, err)
	}
}

// readSmall reads a configuration file of at most 1 MiB.
func readSmall(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, err
	}
	if len(b) > 1<<20 {
		return nil, fmt.Errorf("%s is larger than 1 MiB", path)
	}
	return b, nil
}
