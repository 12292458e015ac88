package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/codexcloud/codexcloudtest"
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/internal/testenv"
	"github.com/xmode/xmode/plans"
	"github.com/xmode/xmode/providers/docker/dockertest"
	"github.com/xmode/xmode/store"
)

// docs/reference.md is held to the code here: what every command prints
// with --json against the fields and types it lists (TestReferenceJSON),
// its statuses against the store's CHECK constraints and the code's
// constants (TestReferenceStatuses), and the repository's citations
// against its own docs (TestDocsCiteTheRepository).

const referenceMD = "../../docs/reference.md"

// refDoc is what docs/reference.md says, read from its tables: under "JSON
// output" one table of fields per shape ("### Session": | field | type |
// meaning |), under "Statuses" one table of values per list.
type refDoc struct {
	headings map[string]string // anchor → heading (## and ###)
	section  map[string]string // ### heading → its ## section
	shapes   map[string]*refShape
	statuses map[string][]string
}

type refShape struct {
	name     string
	includes []string // "All the fields of [X](#x), and:"
	fields   []*refField
}

type refField struct {
	owner, name string
	typ         string          // as written
	kinds       map[string]bool // string, integer, boolean, null, array, object
	timestamp   bool            // a string in RFC 3339
	elemString  bool            // array of string
	elemInteger bool            // array of integer
	container   string          // "", "array" (each element) or "map" (each value)
	ref         string          // the shape of the value, of each element or each value
	status      string          // the list of values it takes
}

var (
	refLinkRE    = regexp.MustCompile(`\[([^\]]+)\]\(#([a-z0-9_-]+)\)`)
	refIncludeRE = regexp.MustCompile(`All the fields of \[([^\]]+)\]\(#([a-z0-9_-]+)\)`)
)

// refAnchor is GitHub's anchor of a heading.
func refAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func refCells(line string) []string {
	parts := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// refBackticked is `x` without its backticks; ok is false for anything else.
// `""` is the empty string.
func refBackticked(cell string) (string, bool) {
	if len(cell) < 2 || cell[0] != '`' || cell[len(cell)-1] != '`' || strings.Count(cell, "`") != 2 {
		return "", false
	}
	v := cell[1 : len(cell)-1]
	if v == `""` {
		return "", true
	}
	return v, true
}

func parseReference(t *testing.T, path string) *refDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	d := &refDoc{headings: map[string]string{}, section: map[string]string{}, shapes: map[string]*refShape{}, statuses: map[string][]string{}}
	// Headings first: a type may name a shape defined further down.
	fence, sec := false, ""
	for _, l := range lines {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if fence {
			continue
		}
		if h, ok := strings.CutPrefix(l, "## "); ok {
			sec = h
			d.headings[refAnchor(h)] = h
		} else if h, ok := strings.CutPrefix(l, "### "); ok {
			if _, dup := d.section[h]; dup {
				t.Errorf("%s: two headings %q", path, h)
			}
			d.headings[refAnchor(h)] = h
			d.section[h] = sec
		}
	}
	fence, sec = false, ""
	cur := ""
	includes := map[string]string{} // shape → the shape whose fields it has too
	var table [][]string
	flush := func() {
		defer func() { table = nil }()
		if len(table) < 2 {
			return
		}
		switch {
		case sec == "JSON output" && table[0][0] == "field":
			if _, dup := d.shapes[cur]; dup || cur == "" {
				t.Errorf("%s: a second table of fields under %q", path, cur)
				return
			}
			sh := &refShape{name: cur}
			d.shapes[cur] = sh
			for _, row := range table[2:] {
				name, ok := refBackticked(row[0])
				if !ok || len(row) != 3 {
					t.Errorf("%s: %s: the row %q names no field as `name` | type | meaning", path, cur, row)
					continue
				}
				f, err := d.parseType(cur, name, row[1])
				if err != nil {
					t.Errorf("%s: %s.%s: %v", path, cur, name, err)
					continue
				}
				sh.fields = append(sh.fields, f)
			}
		case sec == "Statuses" && table[0][0] == "value":
			if _, dup := d.statuses[cur]; dup || cur == "" {
				t.Errorf("%s: a second table of values under %q", path, cur)
				return
			}
			d.statuses[cur] = []string{}
			for _, row := range table[2:] {
				v, ok := refBackticked(row[0])
				if !ok {
					t.Errorf("%s: %s: the row %q names no value as `value`", path, cur, row)
					continue
				}
				d.statuses[cur] = append(d.statuses[cur], v)
			}
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if fence {
			continue
		}
		if strings.HasPrefix(l, "|") {
			table = append(table, refCells(l))
			continue
		}
		flush()
		if h, ok := strings.CutPrefix(l, "## "); ok {
			sec, cur = h, ""
		} else if h, ok := strings.CutPrefix(l, "### "); ok {
			cur = h
		} else if m := refIncludeRE.FindStringSubmatch(l); m != nil && sec == "JSON output" {
			if d.headings[m[2]] != m[1] || d.section[m[1]] != "JSON output" {
				t.Errorf("%s: %s includes [%s](#%s), which is no shape", path, cur, m[1], m[2])
				continue
			}
			includes[cur] = m[1]
		}
	}
	flush()
	for name, inc := range includes {
		if sh := d.shapes[name]; sh != nil {
			sh.includes = append(sh.includes, inc)
		} else {
			t.Errorf("%s: %s includes %s but has no table of its own fields", path, name, inc)
		}
	}
	if len(d.shapes) == 0 || len(d.statuses) == 0 {
		t.Fatalf("%s: no shapes or no statuses found: the page's layout changed", path)
	}
	return d
}

// parseType reads a type cell: string, integer, boolean, timestamp, "or
// null", "array of …", "map of … to [X](#x)", a shape's name (an object of
// it) or a status list's name (a string from it).
func (d *refDoc) parseType(owner, name, typ string) (*refField, error) {
	f := &refField{owner: owner, name: name, typ: typ, kinds: map[string]bool{}}
	for _, m := range refLinkRE.FindAllStringSubmatch(typ, -1) {
		target, ok := d.headings[m[2]]
		if !ok || target != m[1] {
			return nil, fmt.Errorf("type %q links to #%s, which is not the heading %q", typ, m[2], m[1])
		}
		switch d.section[target] {
		case "JSON output":
			f.ref = target
		case "Statuses":
			f.status = target
		default:
			return nil, fmt.Errorf("type %q links to %q, which is neither a shape nor a list of values", typ, target)
		}
	}
	plain := strings.ToLower(refLinkRE.ReplaceAllString(typ, "X"))
	for word, kind := range map[string]string{"string": "string", "timestamp": "string", "integer": "integer",
		"boolean": "boolean", "null": "null", "array": "array", "map": "object"} {
		if strings.Contains(plain, word) {
			f.kinds[kind] = true
		}
	}
	f.timestamp = strings.Contains(plain, "timestamp")
	switch {
	case strings.Contains(plain, "array of"):
		f.container = "array"
		f.elemString = strings.Contains(plain, "array of string")
		f.elemInteger = strings.Contains(plain, "array of integer")
	case strings.Contains(plain, "map of"):
		f.container = "map"
	case f.ref != "":
		f.kinds["object"] = true
	}
	if f.container != "" && f.ref == "" && !f.elemString && !f.elemInteger {
		return nil, fmt.Errorf("type %q: say what an array or map holds (array of string, array of integer, array of [Shape](#shape))", typ)
	}
	if len(f.kinds) == 0 {
		return nil, fmt.Errorf("type %q names no JSON type (string, integer, boolean, timestamp, array of …, a shape)", typ)
	}
	return f, nil
}

// refCheck compares what commands printed with the reference.
type refCheck struct {
	t      *testing.T
	doc    *refDoc
	seen   map[string]map[string]bool // shape → fields printed
	shapes map[string]bool            // shapes printed
	values map[string]map[string]bool // list of values → values printed
	said   map[string]bool            // problems reported, each once
}

// errorf reports a problem once, however many objects show it.
func (c *refCheck) errorf(key, format string, args ...any) {
	c.t.Helper()
	if c.said[key] {
		return
	}
	c.said[key] = true
	c.t.Errorf(format, args...)
}

func newRefCheck(t *testing.T, doc *refDoc) *refCheck {
	return &refCheck{t: t, doc: doc, seen: map[string]map[string]bool{}, shapes: map[string]bool{}, values: map[string]map[string]bool{}, said: map[string]bool{}}
}

// fields are a shape's fields, those it includes among them.
func (c *refCheck) fields(shape string) map[string]*refField {
	out := map[string]*refField{}
	sh := c.doc.shapes[shape]
	if sh == nil {
		return out
	}
	for _, inc := range sh.includes {
		for k, f := range c.fields(inc) {
			out[k] = f
		}
	}
	for _, f := range sh.fields {
		out[f.name] = f
	}
	return out
}

// observe checks one printed object of a shape.
func (c *refCheck) observe(where, shape string, v any) {
	c.t.Helper()
	if c.doc.shapes[shape] == nil {
		c.t.Errorf("%s: docs/reference.md has no shape %q", where, shape)
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		c.t.Errorf("%s: a %s is a JSON object; got %s", where, shape, refKind(v))
		return
	}
	c.shapes[shape] = true
	fields := c.fields(shape)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := fields[k]
		if f == nil {
			c.errorf(shape+"."+k, "%s: prints the field %q, which docs/reference.md does not list under %q", where, k, shape)
			continue
		}
		if c.seen[f.owner] == nil {
			c.seen[f.owner] = map[string]bool{}
		}
		c.seen[f.owner][k] = true
		c.value(where+"."+k, f, obj[k])
	}
}

func (c *refCheck) value(where string, f *refField, v any) {
	c.t.Helper()
	kind := refKind(v)
	if !f.kinds[kind] {
		c.errorf(f.owner+"."+f.name+" is "+kind, "%s is %s (%.80v), but docs/reference.md says %q", where, kind, v, f.typ)
		return
	}
	switch v := v.(type) {
	case string:
		if f.timestamp && f.kinds["string"] && f.container == "" {
			if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
				c.errorf(f.owner+"."+f.name+" timestamp", "%s = %q is not an RFC 3339 timestamp", where, v)
			}
		}
		if f.status != "" {
			if c.values[f.status] == nil {
				c.values[f.status] = map[string]bool{}
			}
			c.values[f.status][v] = true
			if !slices.Contains(c.doc.statuses[f.status], v) {
				c.errorf(f.status+"="+v, "%s = %q, which docs/reference.md does not list under %q", where, v, f.status)
			}
		}
	case []any:
		for i, e := range v {
			switch {
			case f.ref != "":
				c.observe(fmt.Sprintf("%s[%d]", where, i), f.ref, e)
			case f.elemString && refKind(e) != "string", f.elemInteger && refKind(e) != "integer":
				c.errorf(f.owner+"."+f.name+"[]", "%s[%d] is %s, but docs/reference.md says %q", where, i, refKind(e), f.typ)
			}
		}
	case map[string]any:
		if f.container == "map" {
			for k, e := range v {
				c.observe(where+"."+k, f.ref, e)
			}
		} else if f.ref != "" {
			c.observe(where, f.ref, v)
		}
	}
}

// refKind names a decoded value's JSON type, integers apart.
func refKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// finish fails on every shape and field the reference lists that no
// command printed.
func (c *refCheck) finish() {
	c.t.Helper()
	names := make([]string, 0, len(c.doc.shapes))
	for n := range c.doc.shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !c.shapes[n] {
			c.t.Errorf("docs/reference.md documents the shape %q, which no command printed here: add the command that prints it to TestReferenceJSON, or drop the shape", n)
			continue
		}
		for _, f := range c.doc.shapes[n].fields {
			if !c.seen[n][f.name] {
				c.t.Errorf("docs/reference.md lists %q under %q, but no command printed it: a field the code does not have, or one TestReferenceJSON never makes it print", f.name, n)
			}
		}
	}
}

// refRig runs this test binary as xmode on one storage root.
type refRig struct {
	t     *testing.T
	check *refCheck
	bin   string
	root  string
	env   []string
}

func (r *refRig) cmd(env []string, args ...string) *exec.Cmd {
	c := exec.Command(r.bin, args...)
	c.Env = append(os.Environ(), "XMODE_TEST_AS_MAIN=1", "XMODE_STORAGE_ROOT="+r.root, "NO_COLOR=1", "GORACE=atexit_sleep_ms=0")
	c.Env = append(append(c.Env, r.env...), env...)
	return c
}

// run runs `xmode --json ARGS` with env added, wants the exit code (-1:
// any) and checks each JSON document on stdout against shapes, in turn:
// "Session", "[]Session" (an array of them) or "*Thread line" (every
// document one). It returns the documents.
func (r *refRig) run(env []string, code int, shapes string, args ...string) []any {
	r.t.Helper()
	c := r.cmd(env, append([]string{"--json"}, args...)...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	got := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		got = ee.ExitCode()
	} else if err != nil {
		r.t.Fatalf("xmode %s: %v", strings.Join(args, " "), err)
	}
	where := "xmode --json " + strings.Join(args, " ")
	if code >= 0 && got != code {
		r.t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", where, got, code, stdout.String(), stderr.String())
	}
	return r.decode(where, stdout.Bytes(), shapes)
}

func (r *refRig) j(code int, shapes string, args ...string) []any {
	r.t.Helper()
	return r.run(nil, code, shapes, args...)
}

func (r *refRig) decode(where string, out []byte, shapes string) []any {
	r.t.Helper()
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var docs []any
	for {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			break
		}
		if err != nil {
			r.t.Fatalf("%s: stdout is not JSON documents: %v\n%s", where, err, out)
		}
		docs = append(docs, v)
	}
	want := strings.Split(shapes, ",")
	if every, ok := strings.CutPrefix(shapes, "*"); ok {
		want = nil
		for range docs {
			want = append(want, every)
		}
	}
	if len(docs) != len(want) {
		r.t.Fatalf("%s: %d JSON documents on stdout, want %d (%s):\n%s", where, len(docs), len(want), shapes, out)
	}
	for i, v := range docs {
		r.observe(fmt.Sprintf("%s (document %d)", where, i+1), want[i], v)
	}
	return docs
}

func (r *refRig) observe(where, shape string, v any) {
	r.t.Helper()
	if elem, ok := strings.CutPrefix(shape, "[]"); ok {
		arr, ok := v.([]any)
		if !ok {
			r.t.Errorf("%s: want an array of %s, got %s", where, elem, refKind(v))
			return
		}
		for i, e := range arr {
			r.check.observe(fmt.Sprintf("%s[%d]", where, i), elem, e)
		}
		return
	}
	r.check.observe(where, shape, v)
}

// observeFile checks a JSON file xmode wrote.
func (r *refRig) observeFile(path, shape string) {
	r.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		r.t.Fatal(err)
	}
	r.decode(path, b, shape)
}

// refStr is a string field of a decoded object.
func refStr(t *testing.T, v any, key string) string {
	t.Helper()
	obj, _ := v.(map[string]any)
	s, ok := obj[key].(string)
	if !ok {
		t.Fatalf("no string %q in %v", key, v)
	}
	return s
}

// refWaitFile waits for a file a step creates.
func refWaitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}

// TestReferenceJSON runs every command that prints JSON, on real sandboxes
// (host processes, and a docker container for what only docker prints),
// and holds what it prints to docs/reference.md: no field the page does
// not list, no listed field that is never printed, each of the type the
// page gives, each status from the page's lists. The JSON files of steps
// and packages on disk are checked the same way.
func TestReferenceJSON(t *testing.T) {
	t.Parallel()
	doc := parseReference(t, referenceMD)
	img := dockertest.Image(t) // a docker session prints what only docker has

	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := makeRepo(repo); err != nil {
		t.Fatal(err)
	}
	fakeBin := codexcloudtest.Install(t)
	fake := codexcloudtest.New(t)
	examples, err := filepath.Abs(filepath.Join("..", "..", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	r := &refRig{t: t, check: newRefCheck(t, doc), bin: os.Args[0], root: filepath.Join(dir, "root"),
		env: append(fake.Env(), "HOME="+filepath.Join(dir, "home"), "XMODE_USER=tester", "XMODE_SANDBOX_MAX_OPEN=0",
			"GIT_CONFIG_NOSYSTEM=1", "XMODE_CODEX_BIN="+filepath.Join(fakeBin, "codex"),
			"XMODE_AGENT_COMMAND_TEMPLATE=sh '"+filepath.Join(examples, "agent.sh")+"' {prompt_file}")}
	// Every session of the test ends, whatever fails on the way.
	t.Cleanup(func() {
		out, _ := r.cmd(nil, "sandbox", "list", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			r.cmd([]string{"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host()}, "sandbox", "stop", "--force", id).Run()
		}
	})

	// What every command prints, and the errors of each kind.
	r.j(0, "Version", "version")
	r.j(0, "Version", "--version")
	r.j(0, "[]Config value", "config")
	r.run([]string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker"}, 0, "[]Config value", "config")
	r.j(-1, "[]Doctor check", "doctor")
	r.j(3, "Error", "examples") // the test binary has no examples beside it
	installed := filepath.Join(dir, "inst", "bin", "xmode")
	if err := os.MkdirAll(filepath.Dir(installed), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(os.Args[0], installed); err != nil {
		if err := refCopyFile(os.Args[0], installed); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.CopyFS(filepath.Join(dir, "inst", "examples"), os.DirFS(examples)); err != nil {
		t.Fatal(err)
	}
	(&refRig{t: t, check: r.check, bin: installed, root: r.root, env: r.env}).j(0, "Examples", "examples")
	r.j(2, "Error", "sandbox", "create", "--no-such-flag")
	r.run([]string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_DOCKER_HOST=unix://" + filepath.Join(dir, "no-daemon.sock")},
		5, "Error", "sandbox", "create", "--repo", repo)

	// A session and its steps.
	a := refStr(t, r.j(0, "Session", "sandbox", "create", "--repo", repo)[0], "id")
	r.j(0, "Step result", "sandbox", "exec", a, "--", "sh", "-c", "echo out; echo err >&2")
	r.j(0, "Step result", "sandbox", "exec", a, "--name", "bytes", "--", "printf", "%s", "\xff\xfe")
	r.j(0, "Step result", "sandbox", "exec", a, "--name", "inc", "--", "sh", "-c", `mkdir "$(ls -d ../steps/*-inc)/result.json"`)
	r.j(3, "Step result", "sandbox", "exec", a, "--env", "B=c", "--env", "A_TOKEN=secret", "--env", "HOME", "--workdir", "sub", "--", "sh", "-c", "exit 3")
	r.j(124, "Step result", "sandbox", "exec", a, "--timeout", "100ms", "--", "sleep", "5")
	r.j(137, "Step result", "sandbox", "exec", a, "--", "sh", "-c", "kill -9 $$")
	r.j(125, "Error", "sandbox", "exec", "sbx_nosuch", "--", "true")
	// -t: a step on a terminal of its own (command.json says tty).
	tc := r.cmd(nil, "sandbox", "exec", a, "-t", "--name", "term", "--", "true")
	f, err := pty.Start(tc)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, f) // until the step's terminal closes (EIO)
	if err := tc.Wait(); err != nil {
		t.Fatalf("exec -t: %v", err)
	}
	f.Close()
	r.j(0, "[]Step", "sandbox", "logs", a)
	r.j(0, "Step", "sandbox", "logs", a, "1", "--all")
	r.j(0, "Step", "sandbox", "logs", a, "1", "--stderr")
	r.j(0, "Session", "sandbox", "extend", a, "--ttl", "3h")
	r.j(0, "[]Session", "sandbox", "list")
	r.j(0, "Session with steps", "sandbox", "show", a)
	r.j(0, "Copy", "sandbox", "cp", a+":sub", filepath.Join(dir, "copied"))

	// Its change, as a diff and as change requests.
	r.j(0, "Step result", "sandbox", "exec", a, "--", "sh", "-c", `set -e
echo new > c.txt; echo more >> README; git mv sub/dir/file.txt moved.txt; chmod +x README
git -c user.name=agent -c user.email=agent@example.com commit -qam "agent commit"
echo untracked > u.txt; mkdir -p .GIT; echo x > .GIT/config`)
	r.j(0, "Diff", "sandbox", "diff", a)
	pkg1 := r.j(0, "Change request package", "cr", "create", a, "--title", "One", "-m", "why")[0]
	cr1 := refStr(t, pkg1, "id")
	r.j(0, "[]Change request", "cr", "list")
	r.j(0, "Change request", "cr", "review", cr1, "--approve", "--note", "fine")
	r.j(0, "Change request shown", "cr", "show", cr1, "--patch")
	r.j(0, "Verify report", "cr", "verify", cr1)
	r.j(0, "Export", "cr", "export", cr1, "--repo", repo)
	// An agent commit holding a path git refuses: warned about, and
	// exported as one commit (squashed).
	b := refStr(t, r.j(0, "Session", "sandbox", "create", "--repo", repo)[0], "id")
	r.j(0, "Step result", "sandbox", "exec", b, "--", "sh", "-c", `set -e
git config user.name agent; git config user.email agent@example.com
blob=$(printf 'x\n' | git hash-object -w --stdin)
cfg=$(printf '100644 blob %s\tconfig\n' "$blob" | git mktree)
tree=$( (git ls-tree HEAD; printf '040000 tree %s\t.GIT\n' "$cfg") | git mktree)
git reset -q --soft "$(git commit-tree "$tree" -p HEAD -m planted)"
echo uncommitted > notes.txt`)
	cr2 := refStr(t, r.j(0, "Change request package", "cr", "create", b, "--title", "Planted")[0], "id")
	r.j(0, "Export", "cr", "export", cr2, "--repo", repo, "--branch", "planted")
	r.j(4, "Error", "cr", "export", cr2, "--repo", repo, "--branch", "planted")
	// A tampered package.
	if err := os.WriteFile(filepath.Join(refStr(t, pkg1, "dir"), "change.patch"), []byte("tampered\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.j(1, "Verify report", "cr", "verify", cr1)
	r.j(3, "[]Session", "sandbox", "stop", "sbx_nosuch1", b) // the first failure's status
	r.j(3, "[]Session,Error", "sandbox", "stop", "sbx_nosuchx")
	r.j(0, "Session", "sandbox", "stop", a)
	r.j(3, "Error", "cr", "create", a) // its worktree is gone

	// A step stopped by `sandbox stop --force`, and one whose xmode died.
	c := r.j(0, "Session", "sandbox", "create", "--repo", repo)[0]
	cid, cwt := refStr(t, c, "id"), refStr(t, c, "worktree_path")
	long := r.cmd(nil, "--json", "sandbox", "exec", cid, "--", "sh", "-c", "touch started; exec sleep 60")
	var longOut bytes.Buffer
	long.Stdout = &longOut
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	refWaitFile(t, filepath.Join(cwt, "started"))
	r.j(0, "Session", "sandbox", "stop", "--force", cid)
	if err := long.Wait(); err == nil || long.ProcessState.ExitCode() != 143 {
		t.Fatalf("the stopped step's exec: %v, want exit 143", err)
	}
	r.decode("the stopped step's sandbox exec --json", longOut.Bytes(), "Step result")
	r.j(0, "[]Step", "sandbox", "logs", cid) // stopped_by
	d := r.j(0, "Session", "sandbox", "create", "--repo", repo)[0]
	did, dwt := refStr(t, d, "id"), refStr(t, d, "worktree_path")
	lost := r.cmd(nil, "sandbox", "exec", did, "--", "sh", "-c", "touch started; exec sleep 60")
	if err := lost.Start(); err != nil {
		t.Fatal(err)
	}
	refWaitFile(t, filepath.Join(dwt, "started"))
	lost.Process.Signal(syscall.SIGKILL)
	lost.Wait()
	r.j(0, "Reap summary", "reap")
	r.j(0, "Session with steps", "sandbox", "show", did)
	r.j(0, "[]Session", "sandbox", "stop", cid, did)
	// Background steps: printed as far as known when started, ended by
	// `sandbox kill` (which prints the step) and by `sandbox stop`.
	g := refStr(t, r.j(0, "Session", "sandbox", "create", "--repo", repo)[0], "id")
	r.j(0, "Step", "sandbox", "exec", g, "--detach", "--name", "bg", "--", "sleep", "300")
	r.j(0, "Step", "sandbox", "kill", g, "bg")
	r.j(4, "Error", "sandbox", "kill", g, "bg")
	r.j(0, "Step", "sandbox", "exec", g, "-d", "--", "sleep", "300")
	r.j(0, "Session", "sandbox", "stop", g)
	r.j(0, "Session with steps", "sandbox", "show", g)
	// Forks and snapshots: the fields a fork and a session made from a
	// snapshot record, the snapshot itself, and their refusals.
	fp := refStr(t, r.j(0, "Session", "sandbox", "create", "--repo", repo)[0], "id")
	r.j(0, "Step result", "sandbox", "exec", fp, "--", "sh", "-c", "echo f > forked.txt")
	fk := refStr(t, r.j(0, "Session", "sandbox", "fork", fp, "--title", "another way")[0], "id")
	r.j(0, "Session with steps", "sandbox", "show", fk)
	r.j(0, "Snapshot", "sandbox", "snapshot", fp, "--name", "ref-snap")
	r.j(4, "Error", "sandbox", "snapshot", fp, "--name", "ref-snap")
	r.j(2, "Error", "sandbox", "snapshot", fp, "--name", "123")
	r.j(0, "[]Snapshot", "sandbox", "snapshots")
	fs := refStr(t, r.j(0, "Session", "sandbox", "create", "--from-snapshot", "ref-snap")[0], "id")
	r.j(2, "Error", "sandbox", "create", "--from-snapshot", "ref-snap", "--repo", repo)
	r.j(3, "Error", "sandbox", "create", "--from-snapshot", "no-such-snap")
	r.j(0, "[]Session", "sandbox", "stop", fk, fs, fp)
	r.j(4, "Error", "sandbox", "fork", fp)
	r.j(0, "[]Snapshot", "sandbox", "snapshots", "rm", "ref-snap")
	// A pass that cannot reach its engine's daemon fails, and says so.
	r.run([]string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_SANDBOX_DOCKER_HOST=unix://" + filepath.Join(dir, "no-daemon.sock")}, 1, "Reap summary", "reap")

	// Agents, plans and the loop.
	e := refStr(t, r.j(0, "Session", "sandbox", "create", "--repo", repo)[0], "id")
	r.j(0, "Step result", "agent", "run", e, "--agent", "command", "--prompt", "write notes")
	failing := filepath.Join(dir, "failing-agent.sh")
	if err := os.WriteFile(failing, []byte(`printf '%s\n' '{"type":"turn.failed","error":{"message":"the model refused"}}'; exit 1`+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.run([]string{"XMODE_AGENT_COMMAND_TEMPLATE=sh " + failing + " {prompt_file}"}, 1, "Step result", "agent", "run", e, "--agent", "command", "--prompt", "x")
	plan := filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(plan, []byte(`steps:
  - name: ok
    run: [true]
  - name: slow
    run: [sleep, "5"]
    timeout: 200ms
    allow_failure: true
  - name: bad
    run: exit 3
  - name: after
    run: [true]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	r.j(1, "Pipeline report", "pipeline", "run", e, "-f", plan)
	r.j(1, "Pipeline report", "pipeline", "run", e, "-f", plan, "--from", "bad", "--keep-going")
	wait := filepath.Join(dir, "wait.yaml")
	if err := os.WriteFile(wait, []byte("steps:\n  - name: wait\n    run: [sh, -c, \"touch waiting; exec sleep 60\"]\n  - name: never\n    run: [true]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ewt := refStr(t, r.j(0, "Session with steps", "sandbox", "show", e)[0], "worktree_path")
	pipe := r.cmd(nil, "--json", "pipeline", "run", e, "-f", wait)
	var pipeOut bytes.Buffer
	pipe.Stdout = &pipeOut
	if err := pipe.Start(); err != nil {
		t.Fatal(err)
	}
	refWaitFile(t, filepath.Join(ewt, "waiting"))
	pipe.Process.Signal(syscall.SIGINT)
	if err := pipe.Wait(); err == nil || pipe.ProcessState.ExitCode() != 130 {
		t.Fatalf("the interrupted pipeline: %v, want exit 130", err)
	}
	r.decode("the interrupted pipeline run --json", pipeOut.Bytes(), "Pipeline report")
	r.j(0, "Session", "sandbox", "stop", e)
	res1 := r.j(0, "Run result", "run", "--repo", repo, "--objective", "write notes", "-f", filepath.Join(examples, "xmode.yaml"))[0]
	run1 := refStr(t, res1, "id")
	modelPlan := filepath.Join(dir, "model.yaml")
	if err := os.WriteFile(modelPlan, []byte(`steps:
  - name: think
    agent: codex
    model: some-model
    prompt: "{objective}"
    timeout: 5m
  - name: check
    run: [true]
    env: {A: b}
    workdir: .
    allow_failure: true
`), 0o644); err != nil {
		t.Fatal(err)
	}
	run2 := refStr(t, r.run([]string{"XMODE_CODEX_BIN=" + filepath.Join(dir, "no-codex")}, 127, "Run result", "run", "--repo", repo, "--objective", "think", "-f", modelPlan)[0], "id")
	r.j(0, "Run shown", "run", "show", run2) // a plan with every field
	runs := r.j(0, "[]Run", "run", "list", "--all")[0].([]any)
	r.j(0, "Run shown", "run", "show", run1)
	for _, rv := range runs {
		if refStr(t, rv, "objective") == "" {
			r.j(0, "Run shown", "run", "show", refStr(t, rv, "id")) // plan null
			break
		}
	}
	r.j(0, "Change request shown", "cr", "show", refStr(t, res1, "cr_id")) // its evidence has an agent step

	// Attempts, comments on lines, versions, the interdiff, the
	// comparison, a reviewer command.
	attemptsPlan, plan1, reviewer := filepath.Join(dir, "attempts.yaml"), filepath.Join(dir, "plan1.yaml"), filepath.Join(dir, "reviewer.sh")
	for name, body := range map[string]string{
		attemptsPlan: "attempts: 2\niterate: 1\nsteps:\n  - name: implement\n    agent: command\n    prompt: \"{objective}\"\n  - name: check\n    run: [test, -s, AGENT_NOTES.md]\n",
		plan1:        "steps:\n  - name: implement\n    agent: command\n    prompt: \"{objective}\"\n",
		reviewer:     "if [ \"$XMODE_CR_VERSION\" = 1 ]; then echo request-changes; echo 'comment: AGENT_NOTES.md:1: (ok)'; else echo approve; fi\n",
	} {
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	atts := r.j(0, "Run result", "run", "--repo", repo, "--objective", "write notes", "-f", attemptsPlan)[0]
	attempts := r.j(0, "Run shown", "run", "show", refStr(t, atts, "id"))[0].(map[string]any)["ranking"].([]any)
	if len(attempts) != 2 {
		t.Fatalf("a run of 2 attempts shows %d", len(attempts))
	}
	cra, crb := refStr(t, attempts[0], "cr_id"), refStr(t, attempts[1], "cr_id")
	r.j(0, "Comparison", "cr", "compare", cra, crb)
	kept := r.j(0, "Run result", "run", "--repo", repo, "--objective", "write notes", "-f", plan1, "--keep")[0]
	crk := refStr(t, kept, "cr_id")
	r.j(4, "Error", "run", "continue", refStr(t, kept, "id"))
	r.j(0, "Change request", "cr", "review", crk, "--request-changes", "-m", "mark it", "--comment", "AGENT_NOTES.md:1: (seen)")
	r.j(0, "Run result", "run", "continue", refStr(t, kept, "id"))
	r.j(0, "Change request shown", "cr", "show", crk)
	r.j(0, "Change request shown", "cr", "show", crk, "--version", "1")
	r.j(0, "Interdiff", "cr", "diff", crk, "--from", "1", "--to", "2")
	r.j(0, "Run shown", "run", "show", refStr(t, kept, "id"))
	r.j(0, "Verify report", "cr", "verify", crk)
	r.j(0, "Change request", "cr", "review", crk, "--approve")
	r.j(0, "Export", "cr", "export", crk, "--repo", repo, "--branch", "reviewed")
	r.j(0, "Run result", "run", "--repo", repo, "--objective", "write notes", "-f", plan1, "--reviewer", "sh "+reviewer, "--iterate", "1")
	r.j(0, "Change request", "cr", "review", cra, "--approve", "--close-others")
	r.j(0, "[]Run", "run", "list", "--all")
	r.j(0, "[]Change request", "cr", "list")

	// Project machines and their pools.
	pm := []string{"XMODE_PROJECT_MACHINES=1"}
	r.run(pm, 0, "Machine", "machine", "warm", "proj", "--repo", repo, "--pool", "1")
	r.run(pm, 0, "[]Machine", "machine", "list")
	r.run(pm, 0, "Machine", "machine", "show", "proj")
	p := refStr(t, r.run(pm, 0, "Session", "sandbox", "create", "--project", "proj")[0], "id")
	r.run(pm, 0, "Step result", "sandbox", "exec", p, "--", "sh", "-c", "echo x > new.txt")
	crp := refStr(t, r.run(pm, 0, "Change request package", "cr", "create", p)[0], "id")
	r.run(pm, 0, "Change request shown", "cr", "show", crp)
	r.run(pm, 0, "Reap summary", "reap")
	r.run(pm, 0, "Machine removal", "machine", "rm", "proj", "--force")

	// The Codex cloud loop: a task that ends ready, one that hits a
	// permanent error, a submit that fails.
	status := []string{"CODEX_CLOUD_STATUS_COMMAND=" + filepath.Join(fakeBin, "fakecodex") + " result {task_id}"}
	s1 := refStr(t, r.j(0, "Session", "sandbox", "create", "--repo", repo, "--runner-mode", "cloud_subscription")[0], "id")
	tid := refStr(t, r.j(0, "Cloud task", "cloud", "submit", s1, "--env", "env_1", "--prompt", "version three")[0], "task_id")
	fake.Update(tid, func(task *codexcloudtest.Task) {
		task.Status, task.Transcript = codexcloudtest.StatusRunning, []string{"Reading README", "Editing README"}
	})
	r.run(status, 0, "Poll summary", "cloud", "poll")
	r.j(0, "*Thread line", "cloud", "log", s1)
	fake.Update(tid, func(task *codexcloudtest.Task) {
		task.Status, task.Title = codexcloudtest.StatusReady, "README: version three"
		task.Diff = "diff --git a/README b/README\nindex 1b3ea8c..5d5b1f1 100644\n--- a/README\n+++ b/README\n@@ -1 +1 @@\n-version two\n+version three\n"
		task.Added, task.Removed, task.Files = 1, 1, 1
	})
	r.j(0, "Poll summary", "cloud", "poll")
	r.j(0, "Cloud task", "cloud", "show", s1)
	s2 := refStr(t, r.j(0, "Session", "sandbox", "create", "--repo", repo, "--runner-mode", "cloud_subscription")[0], "id")
	r.j(0, "Cloud task", "cloud", "submit", s2, "--env", "env_1", "--prompt", "x")
	fake.Configure(func(cfg *codexcloudtest.Config) { cfg.SignedIn = false })
	r.j(1, "Poll summary", "cloud", "poll")
	r.j(0, "Cloud task", "cloud", "show", s2)
	s3 := refStr(t, r.j(0, "Session", "sandbox", "create", "--repo", repo, "--runner-mode", "cloud_subscription")[0], "id")
	r.j(1, "Error", "cloud", "submit", s3, "--env", "env_1", "--prompt", "x")
	r.j(0, "Session with steps", "sandbox", "show", s3)
	r.j(0, "Session", "sandbox", "stop", s2)

	// What only a docker session has: a container, its mount mode in a
	// manifest, the docker engine's checks.
	dk := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + img,
		"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host()}
	x := refStr(t, r.run(dk, 0, "Session", "sandbox", "create", "--repo", repo)[0], "id")
	r.run(dk, 0, "Step result", "sandbox", "exec", x, "--", "sh", "-c", "echo d > d.txt")
	r.run(dk, 0, "Snapshot", "sandbox", "snapshot", x, "--name", "ref-docker-snap")
	r.run(dk, 0, "[]Snapshot", "sandbox", "snapshots", "rm", "ref-docker-snap")
	crx := refStr(t, r.run(dk, 0, "Change request package", "cr", "create", x)[0], "id")
	r.run(dk, 0, "Change request shown", "cr", "show", crx)
	r.run(dk, -1, "[]Doctor check", "doctor")
	r.run(dk, 0, "Session", "sandbox", "stop", x)
	refNetwork(t, r, repo)

	// A session an MCP client made (origin, client, title) and its file
	// steps, whose command.json and result.json say what they did.
	mr := &mcpRig{t: t, dir: dir, root: r.root, repo: repo, env: append([]string{"XMODE_TEST_AS_MAIN=1", "XMODE_STORAGE_ROOT=" + r.root, "NO_COLOR=1", "GORACE=atexit_sleep_ms=0"}, r.env...)}
	mc := mr.stdio(nil, nil)
	m := str(ok(t, mc, "sandbox_create", map[string]any{"repository": repo, "title": "files"}), "session", "id")
	ok(t, mc, "file_write", map[string]any{"session": m, "path": "d/a.txt", "content": "a\na\n"})
	ok(t, mc, "file_edit", map[string]any{"session": m, "path": "d/a.txt", "old_string": "a", "new_string": "b", "replace_all": true})
	ok(t, mc, "file_read", map[string]any{"session": m, "path": "d/a.txt", "start_line": 1, "end_line": 2})
	ok(t, mc, "file_list", map[string]any{"session": m, "pattern": "**/*.txt"})
	ok(t, mc, "file_write", map[string]any{"session": m, "path": "gone/x", "content": "x"})
	ok(t, mc, "file_delete", map[string]any{"session": m, "path": "gone", "recursive": true})
	r.j(0, "Session with steps", "sandbox", "show", m)
	crm := refStr(t, r.j(0, "Change request package", "cr", "create", m)[0], "id")
	r.j(0, "Change request shown", "cr", "show", crm)
	r.j(0, "Session", "sandbox", "stop", m)

	// The files on disk.
	for pattern, shape := range map[string]string{
		"runs/*/steps/*/command.json":            "Command file",
		"runs/*/steps/*/result.json":             "Step result",
		"runs/*/change_requests/*/manifest.json": "Manifest",
		"runs/*/change_requests/*/evidence.json": "Evidence file",
	} {
		files, _ := filepath.Glob(filepath.Join(r.root, pattern))
		if len(files) == 0 {
			t.Errorf("no %s", pattern)
		}
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() {
				r.observeFile(f, shape)
			}
		}
	}

	r.check.finish()
	// The commands above fail in every kind (fail.Kinds), so what they
	// printed is the whole list.
	for _, list := range []string{"Error kind"} {
		var got []string
		for v := range r.check.values[list] {
			got = append(got, v)
		}
		sort.Strings(got)
		want := slices.Sorted(slices.Values(doc.statuses[list]))
		if !slices.Equal(got, want) {
			t.Errorf("docs/reference.md lists %q as %q; the commands printed %q", list, want, got)
		}
	}
}

func refCopyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// TestReferenceStatuses holds each list of values in docs/reference.md to
// where the code keeps it: a CHECK constraint of the store's schema, or
// the package's constants. A list with neither is one the commands print
// in full (TestReferenceJSON compares it) or whose printed values must be
// among the listed ones.
func TestReferenceStatuses(t *testing.T) {
	t.Parallel()
	doc := parseReference(t, referenceMD)
	root := t.TempDir()
	st, err := store.Open(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(root, store.FileName)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name, sql FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string][]string{} // table.column → its CHECK's values
	checkRE := regexp.MustCompile(`CHECK \((\w+) IN \(([^)]*)\)\)`)
	valueRE := regexp.MustCompile(`'([^']*)'`)
	for rows.Next() {
		var table, ddl string
		if err := rows.Scan(&table, &ddl); err != nil {
			t.Fatal(err)
		}
		for _, m := range checkRE.FindAllStringSubmatch(ddl, -1) {
			for _, v := range valueRE.FindAllStringSubmatch(m[2], -1) {
				checks[table+"."+m[1]] = append(checks[table+"."+m[1]], v[1])
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	fromStore := map[string]string{
		"Session status":         "sessions.status",
		"Session end reason":     "sessions.end_reason",
		"Session origin":         "sessions.origin",
		"Step state":             "steps.state",
		"Run status":             "runs.status",
		"Change request status":  "change_requests.status",
		"Review decision":        "change_request_reviews.decision",
		"Comment side":           "change_request_comments.side",
		"Cloud task state":       "cloud_tasks.state",
		"Cloud task error class": "cloud_tasks.error_class",
		"Pool entry state":       "pool_entries.state",
		"Snapshot status":        "snapshots.status",
	}
	fromCode := map[string][]string{
		"Plan step status":    {plans.Passed, plans.Failed, plans.AllowedFailure, plans.Skipped, plans.NotRun},
		"Doctor check status": {engine.CheckOK, engine.CheckWarn, engine.CheckFail},
		"Runner mode":         {config.ModeLocalWorktree, config.ModeCloudWorker, config.ModeCloudSubscription},
		"Engine":              append(engine.Names(), engine.Cloud),
		"Worktree kind":       {changes.KindClone, changes.KindMachine, changes.KindPatch},
		"Error kind":          errorKindNames(),
	}
	// Printed in full by TestReferenceJSON, or checked value by value.
	printed := []string{"Evidence step status", "Mount mode", "File change status"}

	for list, values := range doc.statuses {
		var want []string
		var from string
		switch {
		case fromStore[list] != "":
			from = "the store's CHECK on " + fromStore[list]
			want = checks[fromStore[list]]
			if want == nil {
				t.Errorf("%s: the store has no CHECK on %s", list, fromStore[list])
				continue
			}
		case fromCode[list] != nil:
			from, want = "the code's constants", fromCode[list]
		case slices.Contains(printed, list):
			continue
		default:
			t.Errorf("docs/reference.md lists the values of %q, which TestReferenceStatuses does not know where to find in the code: add it there", list)
			continue
		}
		got := slices.Sorted(slices.Values(values))
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(got, want) {
			t.Errorf("docs/reference.md lists %q as %q; %s has %q", list, got, from, want)
		}
	}
	for list := range fromStore {
		if doc.statuses[list] == nil {
			t.Errorf("docs/reference.md has no list %q (### %s under Statuses)", list, list)
		}
	}
	for list := range fromCode {
		if doc.statuses[list] == nil {
			t.Errorf("docs/reference.md has no list %q (### %s under Statuses)", list, list)
		}
	}
}

func errorKindNames() []string {
	var names []string
	for _, k := range fail.Kinds() {
		names = append(names, k.Name())
	}
	return names
}

// TestReferenceErrorKindCodes holds docs/reference.md's exit code of each
// error kind to fail's table.
func TestReferenceErrorKindCodes(t *testing.T) {
	t.Parallel()
	md, err := os.ReadFile(referenceMD)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(md), "### Error kind\n")
	if !ok {
		t.Fatal("docs/reference.md has no ### Error kind")
	}
	table, _, _ = strings.Cut(table, "\n\n###")
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([0-9]+) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		documented[m[1]] = m[2]
	}
	for _, k := range fail.Kinds() {
		if got, want := documented[k.Name()], strconv.Itoa(k.ExitCode()); got != want {
			t.Errorf("docs/reference.md: error kind %s exits %q; fail's table says %s", k.Name(), got, want)
		}
	}
	if len(documented) != len(fail.Kinds()) {
		t.Errorf("docs/reference.md documents %d error kinds, fail has %d", len(documented), len(fail.Kinds()))
	}
}

// TestReferenceLinks checks that every link within docs/reference.md
// leads to one of its headings.
func TestReferenceLinks(t *testing.T) {
	t.Parallel()
	doc := parseReference(t, referenceMD)
	b, err := os.ReadFile(referenceMD)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range refLinkRE.FindAllStringSubmatch(string(b), -1) {
		if _, ok := doc.headings[m[2]]; !ok {
			t.Errorf("docs/reference.md links to #%s (%q): no such heading", m[2], m[1])
		}
	}
}

// TestDocsCiteTheRepository keeps the promises in the repository: no file
// cites the design documents that stood outside it, every citation of a
// section (docs/<page>.md, "<heading>") names a heading (or a bold lead-in)
// of that page, and docs/configuration.md lists every variable the code
// reads.
func TestDocsCiteTheRepository(t *testing.T) {
	t.Parallel()
	top, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", top, "ls-files", "-z").Output()
	if err != nil {
		testenv.Skip(t, "git ls-files: %v (not a git checkout)", err)
	}
	outside := []string{"contract " + "§", "shared/" + "seed", "shared/" + "design", "facts" + ".md", "sandbox-" + "architecture"}
	citeRE := regexp.MustCompile(`docs/([a-z0-9-]+\.md),\s+\\?"([^"\\]+)\\?"`)
	commentRE := regexp.MustCompile(`(?m)^\s*(//|#|--|\*)\s?`)
	pages := map[string][]string{} // docs page → its headings and bold lead-ins
	targets := func(page string) []string {
		if t, ok := pages[page]; ok {
			return t
		}
		b, err := os.ReadFile(filepath.Join(top, "docs", page))
		var out []string
		if err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				l = strings.TrimSpace(l)
				if h := strings.TrimLeft(l, "#"); h != l && strings.HasPrefix(h, " ") {
					out = append(out, strings.ReplaceAll(strings.TrimSpace(h), "`", ""))
				}
				for _, m := range regexp.MustCompile(`\*\*([^*]+)\*\*`).FindAllStringSubmatch(l, -1) {
					out = append(out, strings.ReplaceAll(m[1], "`", ""))
				}
			}
		}
		pages[page] = out
		return out
	}
	vars := map[string][]string{} // variable → files that read it
	varRE := regexp.MustCompile(`"((?:XMODE|CODEX)_[A-Z0-9_]+)"`)
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		switch filepath.Ext(name) {
		case ".go", ".md", ".txt", ".sql", ".yaml", ".sh":
		default:
			continue
		}
		b, err := os.ReadFile(filepath.Join(top, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, o := range outside {
			if strings.Contains(text, o) {
				t.Errorf("%s cites %q, which is not in the repository: cite the docs/ section that holds it", name, o)
			}
		}
		flat := strings.Join(strings.Fields(commentRE.ReplaceAllString(text, "")), " ")
		for _, m := range citeRE.FindAllStringSubmatch(flat, -1) {
			cited := strings.ReplaceAll(m[2], "`", "")
			found := false
			for _, h := range targets(m[1]) {
				if strings.HasPrefix(h, cited) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s cites docs/%s, %q: no such heading there", name, m[1], m[2])
			}
		}
		if filepath.Ext(name) == ".go" && !strings.HasSuffix(name, "_test.go") && !strings.HasSuffix(filepath.Base(filepath.Dir(name)), "test") {
			for _, m := range varRE.FindAllStringSubmatch(text, -1) {
				vars[m[1]] = append(vars[m[1]], name)
			}
		}
	}
	conf, err := os.ReadFile(filepath.Join(top, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	for v, files := range vars {
		if !strings.Contains(string(conf), "`"+v+"`") {
			t.Errorf("%s reads %s, which docs/configuration.md does not list", strings.Join(slices.Compact(files), ", "), v)
		}
	}
}

// refNetwork prints what only a sandbox whose network is proxied has: its
// policy (with a credential and names the proxy resolves), the proxy's
// decisions of every kind (a plain request, a tunnel, a request a
// credential was added to, a DNS question, a refusal), network steps (a
// change from the CLI, a plan step's rules added and taken out), a
// published port, and the network in a change request's evidence. Its
// test hosts are containers on a network the test made.
func refNetwork(t *testing.T, r *refRig, repo string) {
	t.Helper()
	cli := dockertest.Require(t)
	if !strings.HasPrefix(dockertest.Host(), "unix://") {
		testenv.Skip(t, "a proxied sandbox in bind mode needs the daemon on this machine, and it is at %s", dockertest.Host())
	}
	inst, err := os.ReadFile(filepath.Join(r.root, store.InstanceFile))
	if err != nil {
		t.Fatal(err)
	}
	instance := strings.TrimSpace(string(inst))
	t.Cleanup(func() { dockertest.CleanupInstance(t, cli, instance) })
	up := dockertest.NewUpstream(t, cli, instance)
	allowed, denied := up.Host(t, "allowed.test").String(), up.Host(t, "denied.test").String()
	nx := []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host(),
		"XMODE_SANDBOX_IMAGE=" + dockertest.ProbeImage(t), "XMODE_SANDBOX_EGRESS_BINARY=" + dockertest.XmodeBinary(t),
		"XMODE_SANDBOX_EGRESS_NETWORK=" + up.Name, "XMODE_SANDBOX_EGRESS_CA=" + dockertest.TestPKI(t).CAFile,
		"XMODE_SANDBOX_ALLOW=" + up.Subnet.String(), "XMODE_SANDBOX_RESOLVE=allowed.test=" + allowed + ",denied.test=" + denied,
		"XMODE_REF_SECRET=sk-ref-3f1c0a9e7b5d2c4a6e8f0b1d3c5a7e9f"}
	n := refStr(t, r.run(nx, 0, "Session", "sandbox", "create", "--repo", repo, "--network", "allow",
		"--allow", "allowed.test", "--deny", "denied.test", "--credential", "allowed.test=x-api-key:XMODE_REF_SECRET")[0], "id")
	r.run(nx, 0, "Step result", "sandbox", "exec", n, "--", "egressprobe", "get", "http://allowed.test/")
	r.run(nx, 0, "Step result", "sandbox", "exec", n, "--", "sh", "-c", `egressprobe get -H "X-Api-Key: $XMODE_REF_SECRET" https://allowed.test/`)
	r.run(nx, 3, "Step result", "sandbox", "exec", n, "--", "egressprobe", "get", "http://denied.test/")
	r.run(nx, 0, "Step result", "sandbox", "exec", n, "--", "nslookup", "allowed.test")
	r.run(nx, 0, "Network change", "sandbox", "network", n, "--mode", "allow", "--allow", "other.test", "--remove", "denied.test",
		"--deny", "denied.test:80", "--credential", "other.test=authorization:XMODE_REF_SECRET")
	r.run(nx, 0, "Network change", "sandbox", "network", n, "--allow", "other.test") // nothing new: no step
	plan := filepath.Join(t.TempDir(), "plan.yaml")
	if err := os.WriteFile(plan, []byte("steps:\n  - name: fetch\n    run: [egressprobe, get, \"http://allowed.test/\"]\n    network:\n      allow: [allowed.test:80]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.run(nx, 0, "Pipeline report", "pipeline", "run", n, "-f", plan)
	r.run(nx, 0, "Network view", "sandbox", "network", n)
	r.run(nx, 0, "Network view", "sandbox", "network", n, "--denied")
	r.run(nx, 0, "[]Network decision", "sandbox", "logs", n, "--network")
	r.run(nx, 0, "[]Network decision", "sandbox", "logs", n, "2", "--network")
	r.run(nx, 0, "Step", "sandbox", "exec", n, "--detach", "--", "busybox", "httpd", "-f", "-p", "8080")
	r.run(nx, 0, "Port", "sandbox", "port", n, "8080")
	r.run(nx, 0, "[]Port", "sandbox", "port", n)
	r.run(nx, 0, "Session with steps", "sandbox", "show", n)
	r.run(nx, 0, "Step result", "sandbox", "exec", n, "--", "sh", "-c", "echo n > n.txt")
	crn := refStr(t, r.run(nx, 0, "Change request package", "cr", "create", n)[0], "id")
	r.run(nx, 0, "Change request shown", "cr", "show", crn)
	r.run(nx, 0, "Session", "sandbox", "stop", n)
}
