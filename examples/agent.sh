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
#
# What the loop tells it (docs/agents.md, "What the agent sees"): an
# attempt of `xmode run --attempts N` (XMODE_ATTEMPT=i) also writes i lines
# of its own, so attempts differ, the first the smallest; a continued run
# (XMODE_VERSION above 1) answers each "Comment on PATH:LINE: TEXT" of its
# prompt by appending TEXT to that line, and only does that when there are
# such comments.
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
has_git() { command -v git >/dev/null 2>&1 && git rev-parse --git-dir >/dev/null 2>&1; }
commit() {
	has_git || return 0
	run git add "$@" &&
		run git -c user.name=xmode-standin -c user.email=standin@xmode.invalid commit -q -m "$msg"
}

comment_re='^Comment on .*:[0-9][0-9]*: '
if [ "${XMODE_VERSION:-1}" -gt 1 ] && grep -q "$comment_re" "$prompt_file"; then
	# a review to answer: each comment's text goes at the end of its line
	answered=
	tmp=$(mktemp -d) || exit 1
	grep "$comment_re" "$prompt_file" >"$tmp/comments" || exit 1
	while IFS= read -r c; do
		rest=${c#Comment on }
		line=$(printf '%s\n' "$rest" | sed 's/^.*:\([0-9][0-9]*\): .*$/\1/')
		path=$(printf '%s\n' "$rest" | sed 's/^\(.*\):[0-9][0-9]*: .*$/\1/')
		text=${rest#"$path:$line: "}
		[ -f "$path" ] || continue
		T=$text awk -v n="$line" 'NR == n { $0 = $0 " " ENVIRON["T"] } { print }' "$path" >"$tmp/edit" &&
			cat "$tmp/edit" >"$path" || exit 1
		n=$((n + 1))
		event "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_$n\",\"type\":\"file_change\",\"changes\":[{\"path\":\"$path\",\"kind\":\"update\"}],\"status\":\"completed\"}}"
		answered="$answered $path"
	done <"$tmp/comments"
	rm -rf "$tmp"
	msg="answer the review of version $((XMODE_VERSION - 1))"
	# shellcheck disable=SC2086 # the paths were split on purpose
	[ -z "$answered" ] || commit $answered
else
	kind=update
	[ -e "$notes" ] || kind=add
	cat "$prompt_file" >>"$notes" || exit 1
	i=0
	if [ "${XMODE_ATTEMPT:-0}" -gt 0 ] && [ -n "$(tail -c 1 "$notes")" ]; then
		echo >>"$notes"
	fi
	while [ "$i" -lt "${XMODE_ATTEMPT:-0}" ]; do
		i=$((i + 1))
		echo "attempt $XMODE_ATTEMPT, line $i" >>"$notes"
	done
	n=$((n + 1))
	event "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_$n\",\"type\":\"file_change\",\"changes\":[{\"path\":\"$notes\",\"kind\":\"$kind\"}],\"status\":\"completed\"}}"
	msg="$notes: the objective"
	commit "$notes"
fi

n=$((n + 1))
event "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_$n\",\"type\":\"agent_message\",\"text\":\"Wrote the objective to $notes.\"}}"
words=$(wc -w <"$prompt_file")
event "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":$((words + 0)),\"cached_input_tokens\":0,\"output_tokens\":7}}"
