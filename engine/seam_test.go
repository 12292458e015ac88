package engine_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the import path of the repository's module.
const module = "github.com/xmode/xmode"

// engineNames are the names of the built-in engines, and of the host
// provider's package: what no code above the seam may compare a value with.
var engineNames = []string{"docker", "host", "kubernetes", "local"}

// providerImportAllowed is the one place above the seam that may import a
// provider: cmd/root.go links the providers into the binary with blank
// imports, which run their engine.Register and nothing else.
var providerImportAllowed = "cmd/root.go"

// TestSeamHolds parses every non-test Go file of every package above the
// engine seam — everything in the module but engine itself, its
// conformance suite, the providers and the packages engine is built on —
// and fails when one imports a provider or decides by an engine's name.
// Engine-specific decisions belong behind the seam: a capability in
// engine/capabilities.go, or a method of the provider. An engine is opened
// by a name that comes from engine.Choose, engine.Configured or a
// session's record, never from a literal.
func TestSeamHolds(t *testing.T) {
	root := moduleRoot(t)
	below := enginesDeps(t, root)
	fset := token.NewFileSet()
	var checked int
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(must(filepath.Rel(root, p)))
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if rel == "engine" || strings.HasPrefix(rel, "engine/") || rel == "providers" || below[rel] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		for _, v := range checkFile(fset, rel, f) {
			t.Error(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A walk that found nothing would pass without checking anything.
	if checked < 50 {
		t.Fatalf("checked only %d files above the seam: the walk from %s is wrong", checked, root)
	}
}

// checkFile returns what in f breaks the seam.
func checkFile(fset *token.FileSet, rel string, f *ast.File) []string {
	var out []string
	at := func(n ast.Node) string { return fmt.Sprintf("%s:%d", rel, fset.Position(n.Pos()).Line) }
	engineName := "" // the name the file imports package engine by
	for _, imp := range f.Imports {
		ip, _ := strconv.Unquote(imp.Path.Value)
		switch {
		case ip == module+"/engine":
			engineName = "engine"
			if imp.Name != nil {
				engineName = imp.Name.Name
			}
		case ip == module+"/providers" || strings.HasPrefix(ip, module+"/providers/"):
			if rel == providerImportAllowed && imp.Name != nil && imp.Name.Name == "_" {
				continue
			}
			out = append(out, fmt.Sprintf("%s imports %s: nothing above the seam imports a provider (ask engine for a capability; only %s links them in, with blank imports)", at(imp), ip, providerImportAllowed))
		}
	}
	named := func(e ast.Expr) (string, bool) {
		lit, ok := ast.Unparen(e).(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(lit.Value)
		return s, err == nil && slices.Contains(engineNames, s)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				return true
			}
			for _, pair := range [][2]ast.Expr{{n.X, n.Y}, {n.Y, n.X}} {
				if s, ok := named(pair[0]); ok {
					out = append(out, fmt.Sprintf("%s compares with the engine name %q (%s): ask the provider through a capability in engine/capabilities.go instead", at(n), s, n.Op))
				}
			}
		case *ast.CaseClause:
			for _, e := range n.List {
				if s, ok := named(e); ok {
					out = append(out, fmt.Sprintf("%s has `case %q`: an engine-specific decision above the seam; ask the provider through a capability instead", at(e), s))
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || engineName == "" || sel.Sel.Name != "Open" || len(n.Args) == 0 {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); !ok || id.Name != engineName {
				return true
			}
			if lit, ok := ast.Unparen(n.Args[0]).(*ast.BasicLit); ok {
				out = append(out, fmt.Sprintf("%s opens the engine %s by name: an engine comes from the configuration (engine.Choose, engine.Configured) or a session's record", at(n), lit.Value))
			}
		}
		return true
	})
	return out
}

// moduleRoot is the repository's root, the parent of this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatalf("no go.mod above package engine: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "module "); ok {
			if strings.TrimSpace(m) != module {
				t.Fatalf("%s is module %s, not %s", root, m, module)
			}
			return root
		}
	}
	t.Fatalf("%s/go.mod names no module", root)
	return ""
}

// enginesDeps returns the module's packages engine is built on (its
// imports, and theirs, as directories relative to root): they lie below
// the seam — config parses XMODE_SANDBOX_ENGINE, so it knows the names.
func enginesDeps(t *testing.T, root string) map[string]bool {
	t.Helper()
	below := map[string]bool{}
	queue := []string{"engine"}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(root, dir, e.Name()), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				ip, _ := strconv.Unquote(imp.Path.Value)
				rel, ok := strings.CutPrefix(ip, module+"/")
				if !ok || below[rel] {
					continue
				}
				below[rel] = true
				queue = append(queue, path.Clean(rel))
			}
		}
	}
	if len(below) == 0 {
		t.Fatal("engine imports nothing of the module: the walk is wrong")
	}
	return below
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
