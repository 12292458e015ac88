package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xmode/xmode/internal/testenv"
)

// `xmode completion bash` works in a bash without the bash-completion
// package (nothing sourced: --norc), as a minimal container or macOS has
// it: cobra's script took the line's words from that package's
// _get_comp_words_by_ref and completed nothing without it. Commands, a
// flag's value after "=", and session IDs complete.
func TestBashCompletionWithoutBashCompletion(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		testenv.Skip(t, "no bash on PATH")
	}
	root, id := newSession(t)
	bin := t.TempDir()
	// The script runs `xmode __complete …`: this test binary, as xmode.
	wrapper := "#!/bin/sh\nXMODE_TEST_AS_MAIN=1 XMODE_STORAGE_ROOT=" + root + " exec " + os.Args[0] + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "xmode"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	complete := func(line string) []string {
		t.Helper()
		script := `source <(xmode completion bash)
compopt() { :; }  # not inside a real completion
COMP_LINE=$1 COMP_POINT=${#1}
# bash splits words at COMP_WORDBREAKS (= and : among them)
read -r -a COMP_WORDS <<<"${1//[=:]/ & }"
[[ $1 == *' ' ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
__start_xmode xmode "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
`
		c := exec.Command(bash, "--norc", "--noprofile", "-c", script, "bash", line)
		c.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "BASH_COMPLETION_VERSINFO=", "COLUMNS=200")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", line, err, out)
		}
		if strings.Contains(string(out), "command not found") {
			t.Fatalf("%q: %s", line, out)
		}
		return strings.Fields(strings.TrimSpace(string(out)))
	}
	if got := complete("xmode sandbox cre"); strings.Join(got, " ") != "create" {
		t.Errorf("xmode sandbox cre<TAB>: %q, want create", got)
	}
	if got := strings.Join(complete("xmode sandbox create --runner-mode=cloud_"), " "); !strings.Contains(got, "cloud_worker") || !strings.Contains(got, "cloud_subscription") || strings.Contains(got, "--runner-mode") {
		t.Errorf("--runner-mode=cloud_<TAB>: %q, want the two cloud modes", got)
	}
	if got := complete("xmode sandbox exec "); len(got) == 0 || got[0] != id {
		t.Errorf("xmode sandbox exec <TAB>: %q, want %s first", got, id)
	}
}
