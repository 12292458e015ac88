package progress

import (
	"bytes"
	"strings"
	"testing"
)

// git's own progress lines, as `git clone --progress` prints them.
const gitStderr = "Cloning into '/x/worktree'...\n" +
	"remote: Counting objects:  40% (2/5)\rremote: Counting objects: 100% (5/5), done.\n" +
	"warning: redirecting to https://example.com/repo.git/\n" +
	"Receiving objects:  10% (10/100)\rReceiving objects:  50% (50/100), 1.00 MiB | 2.00 MiB/s\r" +
	"Receiving objects: 100% (100/100), 2.00 MiB | 2.00 MiB/s, done.\n" +
	"Resolving deltas: 100% (7/7), done.\n"

func TestGitDrawsAPhaseABar(t *testing.T) {
	var out bytes.Buffer
	g := NewGit(&out)
	// In pieces, as a pipe delivers them.
	for i := 0; i < len(gitStderr); i += 7 {
		g.Write([]byte(gitStderr[i:min(i+7, len(gitStderr))]))
	}
	g.Close()
	got := out.String()
	for _, want := range []string{"Counting objects", "Receiving objects", "100/100", "Resolving deltas", "7/7", "warning: redirecting", "100%"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress lacks %q:\n%q", want, got)
		}
	}
	if strings.Contains(got, "Cloning into") || strings.Contains(got, "MiB/s") {
		t.Errorf("git's own lines leaked through instead of the bars:\n%q", got)
	}
	if NewGit(nil).Writer() != nil {
		t.Error("NewGit(nil) must give no writer: gitcli then asks for no progress")
	}
}

func TestPullDrawsTheBytesOfAllLayers(t *testing.T) {
	stream := `{"status":"Pulling from library/busybox","id":"latest"}
{"status":"Pulling fs layer","id":"a"}
{"status":"Downloading","progressDetail":{"current":100,"total":1000},"id":"a"}
{"status":"Downloading","progressDetail":{"current":500,"total":1000},"id":"b"}
{"status":"Download complete","id":"a"}
{"status":"Pull complete","id":"b"}
{"status":"Digest: sha256:abc"}
`
	var out bytes.Buffer
	if err := Pull(strings.NewReader(stream), &out, "busybox:latest"); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "Pulling busybox:latest") || !strings.Contains(got, "100%") {
		t.Errorf("pull progress: %q", got)
	}
	err := Pull(strings.NewReader(`{"status":"Pulling"}`+"\n"+`{"errorDetail":{"message":"pull access denied"},"error":"pull access denied"}`), nil, "x")
	if err == nil || err.Error() != "pull access denied" {
		t.Errorf("the stream's error: %v", err)
	}
}

func TestCountOnNil(t *testing.T) {
	var c *Counter = Count(nil, 3, "x")
	c.Add()
	c.Done()
	var out bytes.Buffer
	c = Count(&out, 2, "reaping")
	c.Add()
	c.Add()
	c.Done()
	if !strings.Contains(out.String(), "reaping") || !strings.Contains(out.String(), "2/2") {
		t.Errorf("counter: %q", out.String())
	}
}
