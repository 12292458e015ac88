#!/bin/sh
# A stand-in coding agent for xmode's `command` agent kind: no account, no
# network, POSIX sh only (it runs in a busybox image too).
#
#   export XMODE_AGENT_COMMAND_TEMPLATE="sh '$(xmode examples)/agent.sh' {prompt_file}"
#
# (`xmode examples` prints where `make install` put it.)
#
# It runs in the worktree (xmode starts every step there), appends the
# prompt to AGENT_NOTES.md, commits that when git is available, and reports
# what it did as `codex exec --json` does (JSONL on stdout), so xmode's
# result.json summarises it like a real agent's run. The prompt is only
# ever read as data (cat): nothing in it is run.
set -u
prompt_file=${1:?usage: agent.sh PROMPT_FILE}
notes=AGENT_NOTES.md

event() { printf '%s\n' "$1"; }

# run CMD...: runs a command and reports it as a command_execution item.
n=0
run() {
	n=$((n + 1))
	"$@" >/dev/null 2>&1
	rc=$?
	status=completed
	[ "$rc" -eq 0 ] || status=failed
	event "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_$n\",\"type\":\"command_execution\",\"command\":\"$*\",\"aggregated_output\":\"\",\"exit_code\":$rc,\"status\":\"$status\"}}"
	return "$rc"
}

event '{"type":"thread.started","thread_id":"standin-0000"}'
event '{"type":"turn.started"}'

if ! [ -r "$prompt_file" ]; then
	event "{\"type\":\"turn.failed\",\"error\":{\"message\":\"cannot read the prompt file\"}}"
	exit 1
fi
kind=update
[ -e "$notes" ] || kind=add
cat "$prompt_file" >>"$notes" || exit 1
n=$((n + 1))
event "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_$n\",\"type\":\"file_change\",\"changes\":[{\"path\":\"$notes\",\"kind\":\"$kind\"}],\"status\":\"completed\"}}"

if command -v git >/dev/null 2>&1 && git rev-parse --git-dir >/dev/null 2>&1; then
	run git add "$notes" &&
		run git -c user.name=xmode-standin -c user.email=standin@xmode.invalid commit -q -m "$notes: the objective"
fi

n=$((n + 1))
event "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_$n\",\"type\":\"agent_message\",\"text\":\"Wrote the objective to $notes.\"}}"
words=$(wc -w <"$prompt_file")
event "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":$((words + 0)),\"cached_input_tokens\":0,\"output_tokens\":7}}"
