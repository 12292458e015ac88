package fail

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"html"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestKinds walks every kind: each has a name, an exit code, an HTTP
// status and a tool message of its own, and a number that is no kind is
// Failed.
func TestKinds(t *testing.T) {
	names, codes := map[string]Kind{}, map[int]Kind{}
	for _, k := range Kinds() {
		if k.Name() == "" || strings.ContainsAny(k.Name(), " -") {
			t.Errorf("kind %d: name %q", k, k.Name())
		}
		if o, ok := names[k.Name()]; ok {
			t.Errorf("kinds %d and %d are both %q", o, k, k.Name())
		}
		names[k.Name()] = k
		if o, ok := codes[k.ExitCode()]; ok {
			t.Errorf("kinds %d and %d both exit %d", o, k, k.ExitCode())
		}
		codes[k.ExitCode()] = k
		if c := k.ExitCode(); c < 1 || c > 5 {
			t.Errorf("%s exits %d: not one of docs/reference.md's 1-5", k.Name(), c)
		}
		if s := k.HTTPStatus(); s < 400 || http.StatusText(s) == "" {
			t.Errorf("%s: HTTP status %d is no error status", k.Name(), s)
		}
		if m := k.ToolMessage("MSG"); !strings.Contains(m, "MSG") || m == "MSG" {
			t.Errorf("%s: tool message %q", k.Name(), m)
		}
		if got := KindOf(&Error{Kind: k, Err: errors.New("x")}); got != k {
			t.Errorf("KindOf an error of kind %s = %s", k.Name(), got.Name())
		}
	}
	want := map[Kind][2]any{
		Failed: {"failed", http.StatusInternalServerError}, Usage: {"usage", http.StatusBadRequest},
		NotFound: {"not_found", http.StatusNotFound}, Refused: {"refused", http.StatusConflict},
		EngineUnavailable: {"engine", http.StatusServiceUnavailable},
	}
	if len(want) != len(Kinds()) {
		t.Errorf("%d kinds, the test knows %d", len(Kinds()), len(want))
	}
	for k, w := range want {
		if k.Name() != w[0] || k.HTTPStatus() != w[1] {
			t.Errorf("kind %d is %q, HTTP %d; want %q, %d", k, k.Name(), k.HTTPStatus(), w[0], w[1])
		}
	}
	for _, k := range []Kind{-1, Kind(len(kinds))} {
		if k.Name() != "failed" || k.ExitCode() != 1 || k.HTTPStatus() != 500 {
			t.Errorf("kind %d: %q %d %d, want failed's", k, k.Name(), k.ExitCode(), k.HTTPStatus())
		}
	}
	if ExitCode(nil) != 0 || ExitCode(errors.New("x")) != 1 || ExitCode(Usagef("x")) != 2 || ExitCode(fmt.Errorf("w: %w", Refusedf("x"))) != 4 {
		t.Error("ExitCode does not follow the table")
	}
}

// TestOneTable holds the kinds table to being the only place that maps a
// kind to a code, a name or a status: no package outside fail switches on
// KindOf or keys a map by kinds.
func TestOneTable(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	kindNames := map[string]bool{}
	for _, n := range []string{"Failed", "Usage", "NotFound", "Refused", "EngineUnavailable"} {
		kindNames[n] = true
	}
	isKind := func(e ast.Expr) bool {
		s, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := s.X.(*ast.Ident)
		return ok && x.Name == "fail" && kindNames[s.Sel.Name]
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "fail" || n == "third_party" || n == "testdata" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SwitchStmt:
				if c, ok := n.Tag.(*ast.CallExpr); ok {
					if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "KindOf" {
						t.Errorf("%s: a switch on fail.KindOf: map a kind in fail's table (Kind.ExitCode, Name, HTTPStatus, ToolMessage)", rel)
					}
				}
			case *ast.KeyValueExpr:
				if isKind(n.Key) {
					t.Errorf("%s: a literal keyed by a fail kind: map a kind in fail's table", rel)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files under %s: not the module", files, root)
	}
}

// TestServiceErrorsNameInputs: a service's error names an input with an
// Input argument, never as a CLI flag, which MCP and UI users do not have.
// A command line to run, in backticks, may keep its flags.
func TestServiceErrorsNameInputs(t *testing.T) {
	// Every package below the front ends.
	services := []string{"agents", "changes", "codexcloud", "engine", "evidence", "fsguard", "gitcli", "gitread", "loop",
		"machines", "plans", "pool", "providers", "reaper", "sandbox", "store"}
	flag := regexp.MustCompile(`(^|[^\w-])--[a-z]`)
	quoted := regexp.MustCompile("`[^`]*`")
	calls := 0
	for _, dir := range services {
		err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok || len(c.Args) == 0 {
					return true
				}
				s, ok := c.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := s.X.(*ast.Ident); !ok || x.Name != "fail" || !strings.HasSuffix(s.Sel.Name, "f") {
					return true
				}
				lit, ok := c.Args[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				calls++
				format, _ := strconv.Unquote(lit.Value)
				if flag.MatchString(quoted.ReplaceAllString(format, "")) {
					t.Errorf("%s: %q names a CLI flag: pass the input (fail.Repo, …) as an argument", fset.Position(lit.Pos()), format)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if calls < 100 {
		t.Fatalf("found %d calls of fail's constructors: not the services", calls)
	}
}

// The words three front ends have for an input.
var cliWords, mcpWords = Words{Input: cliWord}, Words{Input: mcpWord}

func cliWord(in Input) string { return in.Flag() }
func mcpWord(in Input) string {
	if in == Repo {
		return "repository"
	}
	return string(in)
}

// uiHTML renders an error as the UI would: escaped text, each input a link
// to its form field.
func uiHTML(err error) string {
	var b strings.Builder
	for _, p := range Parts(err) {
		if p.Input != "" {
			fmt.Fprintf(&b, `<a href="#%s">%s</a>`, string(p.Input), html.EscapeString(string(p.Input)))
			continue
		}
		b.WriteString(html.EscapeString(p.Text))
	}
	return b.String()
}

func TestRender(t *testing.T) {
	inner := Usagef("%s %q: no such branch, tag or commit in %s", Ref, "v9", "/r")
	for _, c := range []struct {
		name          string
		err           error
		cli, mcp, ui  string
		input         Input
		errorIsTheCLI bool
	}{{
		name:  "one input",
		err:   Usagef("%s %s is not a git repository", Repo, "/tmp/x"),
		cli:   "--repo /tmp/x is not a git repository",
		mcp:   "repository /tmp/x is not a git repository",
		ui:    `<a href="#repo">repo</a> /tmp/x is not a git repository`,
		input: Repo,
	}, {
		name:  "wrapped twice, with text of its own",
		err:   fmt.Errorf("create: %w", fmt.Errorf("clone: %w", inner)),
		cli:   `create: clone: --ref "v9": no such branch, tag or commit in /r`,
		mcp:   `create: clone: ref "v9": no such branch, tag or commit in /r`,
		ui:    `create: clone: <a href="#ref">ref</a> &#34;v9&#34;: no such branch, tag or commit in /r`,
		input: Ref,
	}, {
		name:  "two inputs, a literal percent, a width",
		err:   Refusedf("%s %s is not the repository of %5d%%: drop %v, or use another %s", Repo, "/a", 42, Repo, Project),
		cli:   "--repo /a is not the repository of    42%: drop --repo, or use another --project",
		mcp:   "repository /a is not the repository of    42%: drop repository, or use another project",
		ui:    `<a href="#repo">repo</a> /a is not the repository of    42%: drop <a href="#repo">repo</a>, or use another <a href="#project">project</a>`,
		input: Repo,
	}, {
		// What a user typed is text, even when it looks like a flag.
		name:  "an argument that looks like a flag",
		err:   Usagef("%s %q: a branch cannot start with '-'", Branch, "--repo"),
		cli:   `--branch "--repo": a branch cannot start with '-'`,
		mcp:   `branch "--repo": a branch cannot start with '-'`,
		ui:    `<a href="#branch">branch</a> &#34;--repo&#34;: a branch cannot start with &#39;-&#39;`,
		input: Branch,
	}, {
		name:  "an error of fail's wrapping another",
		err:   Failedf("export: %w (see %s)", inner, Branch),
		cli:   `export: --ref "v9": no such branch, tag or commit in /r (see --branch)`,
		mcp:   `export: ref "v9": no such branch, tag or commit in /r (see branch)`,
		ui:    `export: <a href="#ref">ref</a> &#34;v9&#34;: no such branch, tag or commit in /r (see <a href="#branch">branch</a>)`,
		input: Ref,
	}, {
		name: "no input",
		err:  NotFoundf("no session %s", "s_1"),
		cli:  "no session s_1", mcp: "no session s_1", ui: "no session s_1",
	}, {
		name: "explicit argument indexes: text as the CLI says it",
		err:  Usagef("%[2]s %[1]s", "b", Repo),
		cli:  "--repo b", mcp: "--repo b", ui: "--repo b",
	}, {
		name: "not fail's",
		err:  errors.New("plain --repo"),
		cli:  "plain --repo", mcp: "plain --repo", ui: "plain --repo",
	}} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.err.Error(); got != c.cli {
				t.Errorf("Error() = %q, want the CLI's %q", got, c.cli)
			}
			if got := cliWords.Render(c.err); got != c.cli {
				t.Errorf("CLI: %q, want %q", got, c.cli)
			}
			if got := (Words{}).Render(c.err); got != c.cli {
				t.Errorf("Words{}: %q, want %q", got, c.cli)
			}
			if got := mcpWords.Render(c.err); got != c.mcp {
				t.Errorf("MCP: %q, want %q", got, c.mcp)
			}
			if got := uiHTML(c.err); got != c.ui {
				t.Errorf("UI: %q, want %q", got, c.ui)
			}
			if got := InputOf(c.err); got != c.input {
				t.Errorf("InputOf = %q, want %q", got, c.input)
			}
		})
	}
}

// TestInputsAreFlags: each input is the CLI's flag without its dashes,
// listed once.
func TestInputsAreFlags(t *testing.T) {
	seen := map[Input]bool{}
	for _, in := range Inputs() {
		if seen[in] || in == "" || strings.HasPrefix(string(in), "-") || strings.ContainsAny(string(in), " _") {
			t.Errorf("input %q", in)
		}
		seen[in] = true
		if in.String() != "--"+string(in) {
			t.Errorf("%q renders %q on the CLI", in, in.String())
		}
	}
	src, err := os.ReadFile("input.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), " Input = \""); n != len(seen) {
		t.Errorf("input.go declares %d inputs, Inputs lists %d", n, len(seen))
	}
}

// An error rebuilt from its parts (in another process) reads the same and
// names the same inputs; a '%' in its text stays one.
func TestFromParts(t *testing.T) {
	err := fmt.Errorf("start: %w", Usagef("%s %q is 100%% wrong, see %s", Workdir, "a%sb", Repo))
	back := FromParts(KindOf(err), Parts(err))
	if back.Error() != err.Error() || KindOf(back) != Usage || InputOf(back) != Workdir || mcpWords.Render(back) != mcpWords.Render(err) {
		t.Fatalf("rebuilt %q (%s, %q), from %q", back, KindOf(back).Name(), mcpWords.Render(back), err)
	}
}

// An action a message names reads as the CLI's command line in Error()
// and in a front end without words for it, as that front end's words in
// one with them, is its own part, and crosses processes whole.
func TestActions(t *testing.T) {
	extend := Do("sandbox extend", "sbx_1").With(TTL, "1h")
	stop := Do("sandbox stop").With(Force, "").Arg("sbx_1")
	err := fmt.Errorf("exec: %w", Refusedf("session %s expired: extend it with %s, or %s; see %s", "sbx_1", extend, stop, Workdir))
	const cli = "exec: session sbx_1 expired: extend it with `xmode sandbox extend sbx_1 --ttl 1h`, or `xmode sandbox stop --force sbx_1`; see --workdir"
	if err.Error() != cli || mcpWords.Render(err) != strings.Replace(cli, "--workdir", "workdir", 1) {
		t.Fatalf("Error() %q, Render %q", err.Error(), mcpWords.Render(err))
	}
	words := Words{Input: mcpWord, Action: func(a Action) string {
		var b strings.Builder
		b.WriteString(strings.ReplaceAll(a.Command, " ", "_"))
		for _, arg := range a.Args {
			fmt.Fprintf(&b, " %s=%q", string(arg.Input), arg.Value)
		}
		return b.String()
	}}
	const mcp = `exec: session sbx_1 expired: extend it with sandbox_extend ="sbx_1" ttl="1h", or sandbox_stop force="" ="sbx_1"; see workdir`
	if got := words.Render(err); got != mcp {
		t.Fatalf("in words:\n got %s\nwant %s", got, mcp)
	}
	var actions []string
	for _, p := range Parts(err) {
		if p.Action != nil {
			actions = append(actions, p.Action.Command+":"+p.Text)
		}
	}
	if strings.Join(actions, "|") != "sandbox extend:`xmode sandbox extend sbx_1 --ttl 1h`|sandbox stop:`xmode sandbox stop --force sbx_1`" || InputOf(err) != Workdir {
		t.Fatalf("parts: %q, input %q", actions, InputOf(err))
	}
	back := FromParts(KindOf(err), Parts(err))
	if back.Error() != cli || words.Render(back) != mcp {
		t.Fatalf("rebuilt: %q / %q", back.Error(), words.Render(back))
	}

	// Each With is an action of its own, sharing nothing.
	base := Do("sandbox create").Some("ID")
	a, b := base.With(Network, "bridge"), base.With(Image, "x y")
	if a.String() != "`xmode sandbox create ID --network bridge`" || b.String() != "`xmode sandbox create ID --image 'x y'`" {
		t.Fatalf("%s, %s", a, b)
	}
}
