package egress

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Ctl puts and reads only the directory's own files, whole, and refuses
// a path that leaves it or names anything else.
func TestCtlPutAndCat(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	if err := Ctl(ctx, dir, []string{"put", "secrets/sbx_a/0-KEY"}, strings.NewReader("s3cret"), nil); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "secrets", "sbx_a", "0-KEY"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the secret's file: %v %v", st, err)
	}
	var out bytes.Buffer
	if err := Ctl(ctx, dir, []string{"cat", "secrets/sbx_a/0-KEY"}, nil, &out); err != nil || out.String() != "s3cret" {
		t.Fatalf("cat: %q %v", out.String(), err)
	}
	for _, bad := range []string{"../x", "/etc/passwd", "other/file", "", "policies/../../x"} {
		if err := Ctl(ctx, dir, []string{"put", bad}, strings.NewReader("x"), nil); err == nil {
			t.Errorf("put %q was taken", bad)
		}
	}
	// A link is not followed.
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "logs")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	os.Symlink("/etc/passwd", filepath.Join(dir, "state", "x.json"))
	if err := Ctl(ctx, dir, []string{"cat", "state/x.json"}, nil, &out); err == nil {
		t.Error("cat followed a link")
	}
	big := strings.NewReader(strings.Repeat("x", ctlMaxPut+1))
	if err := Ctl(ctx, dir, []string{"put", "policies/sbx_a.json"}, big, nil); err == nil {
		t.Error("put took more than its bound")
	}
	if err := Ctl(ctx, dir, []string{"rm", "x"}, nil, nil); err == nil || !strings.Contains(err.Error(), "the actions are") {
		t.Errorf("an unknown action: %v", err)
	}
}

// Canary passes only when the open address answers and the shut one does
// not; a shut one that answers is named as a policy not enforced.
func TestCanary(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	also, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	shut := closed.Addr().String()
	closed.Close()
	ctx := context.Background()
	if err := Canary(ctx, open.Addr().String(), shut, time.Second); err != nil {
		t.Fatalf("a held policy: %v", err)
	}
	err = Canary(ctx, open.Addr().String(), also.Addr().String(), 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "does not enforce NetworkPolicy") {
		t.Fatalf("a policy not enforced: %v", err)
	}
	also.Close()
	if err := Canary(ctx, shut, shut, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "cannot be reached") {
		t.Fatalf("no proxy: %v", err)
	}
}
