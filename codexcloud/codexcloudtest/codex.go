package codexcloudtest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// What codex 0.171 prints, as observed (docs/codex-cloud.md).
const (
	version       = "codex-cli 0.171.0"
	notSignedIn   = "Not signed in. Please run 'codex login' to sign in with ChatGPT, then re-run 'codex cloud'."
	backend       = "https://chatgpt.com/backend-api"
	taskURLPrefix = "https://chatgpt.com/codex/tasks/"
)

// probeEnv, set to 1, makes the stand-in's --version also print standInMark,
// so RealCodex can tell it from the real CLI (which ignores the variable):
// testscript.Main puts the stand-in on every test's PATH as "codex".
const (
	probeEnv    = "XMODE_CODEXCLOUDTEST_PROBE"
	standInMark = "codexcloudtest stand-in"
)

// Main is the stand-in `codex`: `codex cloud exec|status|list|diff` and
// `codex --version`, with codex 0.171's output and exit codes. It returns the
// exit code.
func Main() int {
	return run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}

type cli struct {
	st             state
	cfg            Config
	stdin          io.Reader
	stdout, stderr io.Writer
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// codex warns on every run when its home is under a temporary directory
	// (seen with HOME=/tmp/…), before anything else.
	if home := os.Getenv("HOME"); strings.HasPrefix(home, "/tmp/") {
		fmt.Fprintf(stderr, "WARNING: proceeding, even though we could not create PATH aliases: Refusing to create helper binaries under temporary dir \"/tmp\" (codex_home: AbsolutePathBuf(%q))\n", home+"/.codex")
	}
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-V") {
		fmt.Fprintln(stdout, version)
		if os.Getenv(probeEnv) == "1" {
			fmt.Fprintln(stdout, standInMark)
		}
		return 0
	}
	dir := os.Getenv(DirEnv)
	if dir == "" {
		fmt.Fprintf(stderr, "codex stand-in: %s is not set\n", DirEnv)
		return 2
	}
	c := &cli{st: state{dir}, stdin: stdin, stdout: stdout, stderr: stderr}
	if err := c.st.ensure(); err != nil {
		fmt.Fprintf(stderr, "codex stand-in: %v\n", err)
		return 2
	}
	cfg, err := c.st.config()
	if err != nil {
		fmt.Fprintf(stderr, "codex stand-in: %v\n", err)
		return 2
	}
	c.cfg = cfg
	if len(args) < 2 || args[0] != "cloud" {
		fmt.Fprintf(stderr, "codex stand-in: only `codex cloud exec|status|list|diff` and --version, not %q\n", args)
		return 2
	}
	switch args[1] {
	case "exec":
		return c.exec(args[2:])
	case "status":
		return c.status(args[2:])
	case "list":
		return c.list(args[2:])
	case "diff":
		return c.diff(args[2:])
	}
	fmt.Fprintf(stderr, "error: unrecognized subcommand '%s'\n\nUsage: codex cloud [OPTIONS] [COMMAND]\n\nFor more information, try '--help'.\n", args[1])
	return 2
}

// anyhowError prints an error the way codex's main does (anyhow, with a
// backtrace) and returns its exit code.
func (c *cli) anyhowError(msg string, causes ...string) int {
	fmt.Fprintf(c.stderr, "Error: %s\n", msg)
	if len(causes) > 0 {
		fmt.Fprintf(c.stderr, "\nCaused by:\n")
		for i, cause := range causes {
			fmt.Fprintf(c.stderr, "    %d: %s\n", i, cause)
		}
	}
	fmt.Fprintf(c.stderr, "\nStack backtrace:\n")
	for i := range 4 {
		fmt.Fprintf(c.stderr, "  %2d: <unknown>\n", i)
	}
	return 1
}

func (c *cli) usage(msg, usage string) int {
	fmt.Fprintf(c.stderr, "error: %s\n\n", msg)
	if usage != "" {
		fmt.Fprintf(c.stderr, "Usage: %s\n\n", usage)
	}
	fmt.Fprintf(c.stderr, "For more information, try '--help'.\n")
	return 2
}

// signedIn is codex's first check, before any network.
func (c *cli) signedIn() bool {
	if !c.cfg.SignedIn {
		fmt.Fprintln(c.stderr, notSignedIn)
		return false
	}
	return true
}

func (c *cli) exec(args []string) int {
	logCall(c.st.dir, "start", "exec", "-")
	defer logCall(c.st.dir, "end", "exec", "-")
	var env, branch, query string
	attempts, haveQuery := 1, false
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func(name string) (string, bool) {
			if v, ok := strings.CutPrefix(a, name+"="); ok {
				return v, true
			}
			if a == name && i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		switch {
		case a == "--env" || strings.HasPrefix(a, "--env="):
			env, _ = val("--env")
		case a == "--branch" || strings.HasPrefix(a, "--branch="):
			branch, _ = val("--branch")
		case a == "--attempts" || strings.HasPrefix(a, "--attempts="):
			v, _ := val("--attempts")
			n, err := strconv.Atoi(v)
			if err != nil {
				return c.usage(fmt.Sprintf("invalid value '%s' for '--attempts <ATTEMPTS>': attempts must be an integer between 1 and 4", v), "")
			}
			if n < 1 || n > 4 {
				return c.usage(fmt.Sprintf("invalid value '%s' for '--attempts <ATTEMPTS>': attempts must be between 1 and 4", v), "")
			}
			attempts = n
		case strings.HasPrefix(a, "-") && a != "-":
			return c.usage(fmt.Sprintf("unexpected argument '%s' found", a), "codex cloud exec [OPTIONS] --env <ENV_ID> [QUERY]")
		default:
			query, haveQuery = a, true
		}
	}
	if env == "" {
		return c.usage("the following required arguments were not provided:\n  --env <ENV_ID>", "codex cloud exec --env <ENV_ID> [QUERY]")
	}
	if !c.signedIn() {
		return 1
	}
	if !haveQuery || query == "-" {
		b, _ := io.ReadAll(c.stdin)
		if strings.TrimSpace(string(b)) == "" {
			return c.anyhowError("no query provided via stdin (received empty input).")
		}
		query = string(b)
	}
	if c.cfg.Unreachable {
		return c.anyhowError("error sending request for url ("+backend+"/wham/environments)",
			"client error (Connect)", "tcp connect error", "Connection refused (os error 111)")
	}
	known := false
	for _, e := range c.cfg.Environments {
		known = known || e == env
	}
	if !known {
		return c.anyhowError(fmt.Sprintf("environment '%s' not found; run `codex cloud` to list available environments", env))
	}
	if branch == "" {
		branch = "main" // codex takes the current branch of its directory
	}
	title, _, _ := strings.Cut(strings.TrimSpace(query), "\n")
	t := Task{ID: NewTaskID(), Title: title, Status: StatusPending, Env: env, Branch: branch, Attempts: attempts,
		Prompt: query, UpdatedAt: time.Now()}
	if err := c.st.put(t); err != nil {
		return c.anyhowError(err.Error())
	}
	fmt.Fprintln(c.stdout, taskURLPrefix+t.ID)
	return 0
}

// taskArg takes TASK_ID from the arguments (a URL works too, as in codex).
func (c *cli) taskArg(args []string, usage string) (string, int, bool) {
	var id string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		id = a
	}
	if id == "" {
		return "", c.usage("the following required arguments were not provided:\n  <TASK_ID>", usage), false
	}
	if i := strings.LastIndex(id, "/"); i >= 0 {
		id = id[i+1:]
	}
	return id, 0, true
}

// taskDetails is the backend's get_task_details call that status and diff
// both make; on failure it prints the real CLI's error and returns its exit code.
func (c *cli) taskDetails(id string) (Task, int, bool) {
	if c.cfg.Unreachable {
		return Task{}, c.anyhowError("http error: get_task_details failed: error sending request for url (" + backend + "/wham/tasks/" + id + ")"), false
	}
	t, err := c.st.task(id)
	if err != nil {
		// Not observed against the real backend: an HTTP error naming the call.
		return Task{}, c.anyhowError("http error: get_task_details failed: 404 Not Found; body: {\"detail\":\"Not Found\"}"), false
	}
	return t, 0, true
}

func (c *cli) status(args []string) int {
	id, code, ok := c.taskArg(args, "codex cloud status <TASK_ID>")
	if !ok {
		return code
	}
	logCall(c.st.dir, "start", "status", id)
	defer logCall(c.st.dir, "end", "status", id)
	if !c.signedIn() {
		return 1
	}
	time.Sleep(c.cfg.StatusDelay)
	t, code, ok := c.taskDetails(id)
	if !ok {
		return code
	}
	label := map[string]string{StatusPending: "PENDING", StatusRunning: "PENDING", StatusReady: "READY",
		StatusError: "ERROR", StatusApplied: "APPLIED"}[t.Status]
	fmt.Fprintf(c.stdout, "[%s] %s\n", label, t.Title)
	fmt.Fprintf(c.stdout, "%s  •  %s\n", t.Env, relative(time.Since(t.UpdatedAt), t.UpdatedAt))
	fmt.Fprintln(c.stdout, diffSummary(t))
	if label != "READY" {
		return 1
	}
	return 0
}

func relative(d time.Duration, at time.Time) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(max(d, 0).Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return at.Local().Format("Jan 2 15:04")
}

func diffSummary(t Task) string {
	if t.Files == 0 && t.Added == 0 && t.Removed == 0 {
		return "no diff"
	}
	plural := "s"
	if t.Files == 1 {
		plural = ""
	}
	return fmt.Sprintf("+%d/-%d • %d file%s", t.Added, t.Removed, t.Files, plural)
}

func (c *cli) list(args []string) int {
	logCall(c.st.dir, "start", "list", "-")
	defer logCall(c.st.dir, "end", "list", "-")
	asJSON, env := false, ""
	for i, a := range args {
		switch {
		case a == "--json":
			asJSON = true
		case a == "--env" && i+1 < len(args):
			env = args[i+1]
		}
	}
	if !c.signedIn() {
		return 1
	}
	if c.cfg.Unreachable {
		return c.anyhowError("http error: list_tasks failed: error sending request for url (" + backend + "/wham/tasks/list?limit=20&task_filter=current)")
	}
	ts, err := c.st.tasks()
	if err != nil {
		return c.anyhowError(err.Error())
	}
	type summary struct {
		FilesChanged int `json:"files_changed"`
		LinesAdded   int `json:"lines_added"`
		LinesRemoved int `json:"lines_removed"`
	}
	type item struct {
		ID           string  `json:"id"`
		URL          string  `json:"url"`
		Title        string  `json:"title"`
		Status       string  `json:"status"`
		UpdatedAt    string  `json:"updated_at"`
		EnvID        string  `json:"environment_id"`
		EnvLabel     *string `json:"environment_label"`
		Summary      summary `json:"summary"`
		IsReview     bool    `json:"is_review"`
		AttemptTotal int     `json:"attempt_total"`
	}
	out := struct {
		Tasks  []item  `json:"tasks"`
		Cursor *string `json:"cursor"`
	}{Tasks: []item{}}
	for i := len(ts) - 1; i >= 0 && len(out.Tasks) < 20; i-- {
		t := ts[i]
		if env != "" && t.Env != env {
			continue
		}
		status := t.Status
		if status == StatusRunning {
			status = StatusPending
		}
		out.Tasks = append(out.Tasks, item{ID: t.ID, URL: taskURLPrefix + t.ID, Title: t.Title, Status: status,
			UpdatedAt: t.UpdatedAt.UTC().Format(time.RFC3339), EnvID: t.Env,
			Summary: summary{t.Files, t.Added, t.Removed}, AttemptTotal: t.Attempts})
	}
	if !asJSON {
		for _, t := range out.Tasks {
			fmt.Fprintf(c.stdout, "%s  [%s] %s\n", t.ID, strings.ToUpper(t.Status), t.Title)
		}
		return 0
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Fprintln(c.stdout, string(b))
	return 0
}

func (c *cli) diff(args []string) int {
	id, code, ok := c.taskArg(args, "codex cloud diff <TASK_ID>")
	if !ok {
		return code
	}
	logCall(c.st.dir, "start", "diff", id)
	defer logCall(c.st.dir, "end", "diff", id)
	if !c.signedIn() {
		return 1
	}
	time.Sleep(c.cfg.DiffDelay)
	t, code, ok := c.taskDetails(id)
	if !ok {
		return code
	}
	if (t.Status != StatusReady && t.Status != StatusApplied) || t.Diff == "" {
		return c.anyhowError(fmt.Sprintf("No diff available for task %s; it may still be running.", id))
	}
	fmt.Fprint(c.stdout, t.Diff)
	return 0
}
