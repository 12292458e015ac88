package codexcloudtest

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Ctl is the `fakecodex` command that testscript scripts drive the stand-in
// with (state in $FAKE_CODEX_DIR, made on first use):
//
//	fakecodex login | logout          signed in or not
//	fakecodex net up | down           backend reachable or not
//	fakecodex delay status|diff DUR   slow calls
//	fakecodex env ENV...              the environments that exist
//	fakecodex set TASK KEY=VALUE...   status, title, error, added, removed,
//	                                  files, diff (diff=@FILE reads a file)
//	fakecodex say TASK LINE...        append transcript lines
//	fakecodex last                    print the newest task's ID
//	fakecodex show TASK               print a task as JSON
//	fakecodex calls OP                print how many OP calls were made
//	fakecodex result TASK             print the task as the JSON
//	                                  Result (a status command a deploy host
//	                                  could configure); exits 1 unless ready
func Ctl() int {
	if err := ctl(os.Args[1:]); err != nil {
		if e, ok := err.(exitCode); ok {
			return int(e)
		}
		fmt.Fprintln(os.Stderr, "fakecodex:", err)
		return 2
	}
	return 0
}

type exitCode int

func (e exitCode) Error() string { return "exit " + strconv.Itoa(int(e)) }

func ctl(args []string) error {
	dir := os.Getenv(DirEnv)
	if dir == "" {
		return fmt.Errorf("%s is not set", DirEnv)
	}
	st := state{dir}
	if err := st.ensure(); err != nil {
		return err
	}
	if len(args) == 0 {
		return fmt.Errorf("usage: fakecodex login|logout|net|delay|env|set|say|last|show|calls|result …")
	}
	configure := func(f func(*Config)) error {
		c, err := st.config()
		if err != nil {
			return err
		}
		f(&c)
		return writeJSON(dir+"/config.json", c)
	}
	update := func(id string, f func(*Task) error) error {
		t, err := st.task(id)
		if err != nil {
			return fmt.Errorf("task %s: %w", id, err)
		}
		if err := f(&t); err != nil {
			return err
		}
		t.UpdatedAt = time.Now()
		return st.put(t)
	}
	switch args[0] {
	case "login", "logout":
		return configure(func(c *Config) { c.SignedIn = args[0] == "login" })
	case "net":
		if len(args) != 2 || (args[1] != "up" && args[1] != "down") {
			return fmt.Errorf("usage: fakecodex net up|down")
		}
		return configure(func(c *Config) { c.Unreachable = args[1] == "down" })
	case "delay":
		if len(args) != 3 {
			return fmt.Errorf("usage: fakecodex delay status|diff DURATION")
		}
		d, err := time.ParseDuration(args[2])
		if err != nil {
			return err
		}
		return configure(func(c *Config) {
			if args[1] == "diff" {
				c.DiffDelay = d
			} else {
				c.StatusDelay = d
			}
		})
	case "env":
		return configure(func(c *Config) { c.Environments = args[1:] })
	case "set":
		if len(args) < 3 {
			return fmt.Errorf("usage: fakecodex set TASK KEY=VALUE...")
		}
		return update(args[1], func(t *Task) error {
			for _, kv := range args[2:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("%q is not KEY=VALUE", kv)
				}
				var err error
				switch k {
				case "status":
					t.Status = v
				case "title":
					t.Title = v
				case "error":
					t.Error = v
				case "diff":
					if f, ok := strings.CutPrefix(v, "@"); ok {
						b, rerr := os.ReadFile(f)
						v, err = string(b), rerr
					}
					t.Diff = v
				case "added":
					t.Added, err = strconv.Atoi(v)
				case "removed":
					t.Removed, err = strconv.Atoi(v)
				case "files":
					t.Files, err = strconv.Atoi(v)
				default:
					return fmt.Errorf("unknown key %q", k)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	case "say":
		if len(args) < 3 {
			return fmt.Errorf("usage: fakecodex say TASK LINE...")
		}
		return update(args[1], func(t *Task) error {
			t.Transcript = append(t.Transcript, args[2:]...)
			if t.Status == StatusPending {
				t.Status = StatusRunning
			}
			return nil
		})
	case "last":
		ts, err := st.tasks()
		if err != nil || len(ts) == 0 {
			return fmt.Errorf("no tasks: %v", err)
		}
		fmt.Println(ts[len(ts)-1].ID)
		return nil
	case "show":
		if len(args) != 2 {
			return fmt.Errorf("usage: fakecodex show TASK")
		}
		t, err := st.task(args[1])
		if err != nil {
			return err
		}
		b, _ := json.MarshalIndent(t, "", "  ")
		fmt.Println(string(b))
		return nil
	case "calls":
		cs, err := readCalls(dir)
		if err != nil {
			return err
		}
		n := 0
		for _, c := range cs {
			if len(args) < 2 || c.Op == args[1] {
				n++
			}
		}
		fmt.Println(n)
		return nil
	case "result":
		return result(st, args[1:])
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// result prints a task as the JSON Result (docs/codex-cloud.md), like a status
// command a deploy host could write around a newer CLI.
func result(st state, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: fakecodex result TASK")
	}
	logCall(st.dir, "start", "result", args[0])
	defer logCall(st.dir, "end", "result", args[0])
	c, err := st.config()
	if err != nil {
		return err
	}
	time.Sleep(c.StatusDelay)
	if !c.SignedIn {
		fmt.Fprintln(os.Stderr, notSignedIn)
		return exitCode(1)
	}
	t, err := st.task(args[0])
	if err != nil {
		return err
	}
	state := map[string]string{StatusPending: "pending", StatusRunning: "running", StatusReady: "ready",
		StatusApplied: "ready", StatusError: "failed"}[t.Status]
	r := map[string]any{"state": state, "title": t.Title, "summary": diffSummary(t), "transcript": nonNil(t.Transcript), "error": t.Error}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	if state != "ready" {
		return exitCode(1)
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
