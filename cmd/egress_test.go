package cmd

import (
	"os"
	"path/filepath"
	"testing"
)

// `xmode __egress` refuses a configuration it cannot serve with exit 2,
// naming the directory and what is wrong, before it listens on anything.
func TestEgressRefusesABadConfiguration(t *testing.T) {
	c := newTestCLI(t)
	c.fails(2, "--dir: the egress configuration directory is needed", EgressCommand)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "policies"), 0o700)
	os.WriteFile(filepath.Join(dir, "policies", "sbx_a.json"),
		[]byte(`{"version":1,"sandbox":"sbx_a","mode":"allow","listen":"127.0.0.1:0","allow":[{"rule":"*.com","source":"--allow"}]}`), 0o600)
	c.fails(2, `rule "*.com" (from --allow): *.com would allow a whole top-level domain`, EgressCommand, "--dir", dir)
	if _, err := os.Stat(filepath.Join(dir, "state", "sbx_a.json")); !os.IsNotExist(err) {
		t.Fatalf("a refused configuration left a state file: %v", err)
	}
}

// `xmode __egress --config-json` writes egress.json (and extra-ca.pem)
// before it starts, refusing content that is not a configuration; and
// `xmode __egress-ctl` refuses what it does not know, with exit 2 or 1.
func TestEgressConfigJSONAndCtl(t *testing.T) {
	c := newTestCLI(t)
	dir := t.TempDir()
	c.fails(2, "--config-json: egress.json", EgressCommand, "--dir", dir, "--config-json", `{"nonsense":1}`)
	c.fails(2, "holds no PEM certificate", EgressCommand, "--dir", dir, "--config-json", `{"log_max_bytes":10}`, "--extra-ca-pem", "junk")
	c.fails(2, "--dir: the egress configuration directory is needed", EgressCtlCommand, "put", "egress.json")
	c.fails(1, "is not a path inside the egress directory", EgressCtlCommand, "--dir", dir, "put", "../x")
	if _, err := os.Stat(filepath.Join(dir, "..", "x")); !os.IsNotExist(err) {
		t.Fatalf("put wrote outside the directory: %v", err)
	}
}
