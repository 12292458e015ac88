package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/xmode/xmode/internal/testenv"
)

// initLine is one line of GODEBUG=inittrace=1: a package's initialisation.
var initLine = regexp.MustCompile(`(?m)^init (\S+) @\S+ ms, \S+ ms clock, (\d+) bytes, \d+ allocs$`)

// TestPackageInitBudget: every xmode command, `--version` and `sandbox exec`
// included, first initialises every package linked into the binary. What
// that allocates (each fresh page a page fault, several times dearer on the
// VMs xmode runs on than here) stays within a budget, per package and in
// all: a dependency's regular expressions compiled at start-up took 404 KB
// of it (distribution/reference, patched to compile them on first use: see
// docs/architecture.md, "Start-up" and "Dependencies"), xmode's own 16 KB in
// one package.
func TestPackageInitBudget(t *testing.T) {
	// xmode's own packages build nothing at start-up (a regexp, a table:
	// on first use), a dependency's packages little. Smaller savings no
	// longer pay for a fork: upstream's jsonschema-go (the MCP SDK's)
	// builds its field tables, 80 KB, chroma's regexp2 its Unicode tables
	// (37 KB) and chroma its token maps (11 KB), which took the total from
	// 227 to 351 KB. The egress proxy's goproxy (issue 28) parses its
	// built-in MITM CA at init (61 KB, ~0.7 ms: an RSA key), which xmode
	// never uses but cannot skip without a fork; miekg/dns builds its type
	// tables (22 KB); the Kubernetes engine's standard-library and x/net
	// packages outside client-go's own list add a few KB more (461 KB in
	// all). The budgets sit just above those figures.
	const onFirstUse, perPackage, total = 4 << 10, 48 << 10, 472 << 10
	budgets := map[string]int{
		"github.com/google/jsonschema-go/jsonschema": 84 << 10,
		"github.com/elazarl/goproxy":                 64 << 10,
	}
	// client-go and what it links, for the kubernetes engine, have a budget
	// of their own, just above what they were measured to take when the
	// engine came in (525 KB, k8s.io/api/core/v1 the largest at 98 KB: its
	// API documentation maps and its scheme; docs/architecture.md,
	// "Dependencies"): every module is upstream's, unpatched.
	const clientGoPerPackage, clientGoTotal = 100 << 10, 544 << 10
	clientGo := []string{"k8s.io/", "sigs.k8s.io/", "github.com/json-iterator/", "github.com/modern-go/", "github.com/davecgh/go-spew/",
		"go.yaml.in/yaml/v2", "gopkg.in/inf", "github.com/fxamacker/cbor/", "github.com/x448/", "github.com/gorilla/websocket", "github.com/moby/spdystream"}
	clientGoSum := 0
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Skip(t, "no go command to build xmode with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "xmode")
	build := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := exec.Command(bin, "--version")
	run.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("xmode --version: %v\n%s", err, out)
	}
	inits := initLine.FindAllStringSubmatch(string(out), -1)
	if len(inits) < 50 {
		t.Fatalf("only %d init lines in GODEBUG=inittrace=1 output:\n%s", len(inits), out)
	}
	sum := 0
	for _, m := range inits {
		n, _ := strconv.Atoi(m[2])
		budget, ok := budgets[m[1]]
		if !ok {
			budget = perPackage
		}
		if strings.HasPrefix(m[1], "github.com/xmode/xmode/") {
			budget = onFirstUse
		}
		if slices.ContainsFunc(clientGo, func(prefix string) bool { return strings.HasPrefix(m[1], prefix) }) {
			budget = clientGoPerPackage
			clientGoSum += n
		} else {
			sum += n
		}
		if n > budget {
			t.Errorf("package %s allocates %d KB when xmode starts (budget: %d KB): compile or build it on first use", m[1], n>>10, budget>>10)
		}
	}
	t.Logf("%d packages initialised, %d KB allocated, and %d KB by client-go", len(inits), sum>>10, clientGoSum>>10)
	if clientGoSum > clientGoTotal {
		t.Errorf("client-go's packages allocate %d KB when xmode starts (budget: %d KB)", clientGoSum>>10, clientGoTotal>>10)
	}
	if sum > total {
		t.Errorf("package initialisation allocates %d KB when xmode starts (budget: %d KB)", sum>>10, total>>10)
	}
}
