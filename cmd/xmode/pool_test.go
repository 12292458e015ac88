package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// poolShow is the part of `machine show --json` about the pool.
type poolShow struct {
	Commit string `json:"commit"`
	Pool   struct {
		Size    int `json:"size"`
		Ready   int `json:"ready"`
		Entries []struct {
			ID          string `json:"id"`
			RunID       string `json:"run_id"`
			State       string `json:"state"`
			Commit      string `json:"commit"`
			ContainerID string `json:"container_id"`
			Worktree    string `json:"worktree_path"`
			User        string `json:"user"`
		} `json:"entries"`
	} `json:"pool"`
}

func (p poolShow) ids() []string {
	var ids []string
	for _, e := range p.Pool.Entries {
		ids = append(ids, e.ID)
	}
	return ids
}

// racing runs the commands at once, as separate xmode processes, and
// returns the stdout of each (in order); any failure fails the test.
func racing(t *testing.T, root string, cmds [][]string) []string {
	t.Helper()
	out := make([]string, len(cmds))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for i, args := range cmds {
		wg.Go(func() {
			c := mx(t, root, args...)
			var stderr bytes.Buffer
			c.Stderr = &stderr
			b, err := c.Output()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("%v: %v: %s", args, err, stderr.String()))
			}
			out[i] = strings.TrimSpace(string(b))
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("racing commands failed:\n%s", strings.Join(errs, "\n"))
	}
	return out
}

// Racing creates, as separate processes, never get the same pool entry:
// eight creates on a pool of four claim exactly the four and make four;
// then creates racing reaps that refill the pool all get sandboxes of
// their own, and the machine stays sound.
func TestPoolRacingCreates(t *testing.T) {
	t.Parallel()
	root, _, machine := warmMachine(t, 200)
	mustRun(t, mx(t, root, "machine", "warm", "demo", "--pool", "4", "-q"))
	var before poolShow
	json.Unmarshal([]byte(mustRun(t, mx(t, root, "machine", "show", "demo", "--json"))), &before)
	if before.Pool.Ready != 4 {
		t.Fatalf("pool before the race: %+v", before.Pool)
	}
	create := []string{"sandbox", "create", "--project", "demo", "-q"}
	ids := racing(t, root, slices.Repeat([][]string{create}, 8))
	claimed := 0
	for _, id := range ids {
		if slices.Contains(before.ids(), id) {
			claimed++
		}
	}
	sorted := slices.Sorted(slices.Values(ids))
	if len(slices.Compact(sorted)) != 8 || claimed != 4 {
		t.Fatalf("8 racing creates on a pool of 4: %v (%d from the pool, want 4, all distinct)", ids, claimed)
	}
	checkMachine(t, root, machine, ids)

	// With reaps refilling meanwhile (cron while users create).
	reap := []string{"reap"}
	more := racing(t, root, [][]string{create, reap, create, create, reap, create, create, create})
	for _, id := range more {
		if id != "" {
			ids = append(ids, id)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ids)))) != 14 {
		t.Fatalf("sessions %v are not 14 distinct ones", ids)
	}
	var after poolShow
	json.Unmarshal([]byte(mustRun(t, mx(t, root, "machine", "show", "demo", "--json"))), &after)
	for _, e := range after.Pool.Entries {
		if slices.Contains(ids, e.ID) {
			t.Fatalf("pool entry %s is also a session", e.ID)
		}
	}
	mustRun(t, mx(t, root, "machine", "warm", "demo", "--pool", "0", "-q"))
	checkMachine(t, root, machine, ids)
}
