// Package stepshell is the shell both container engines (docker, kubernetes)
// run around every step and to end one: the step's wrapper, which runs its
// command and then KILLs whatever the command left behind; the kill helper,
// which ends a step found by its tag from a separate exec; and the sweep
// both use to tell a step's processes from everything else in the sandbox.
// They use shell builtins only, so they work when the pids limit leaves no
// process to spare, and run in any image with a POSIX /bin/sh.
package stepshell

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/xmode/xmode/engine"
)

// Sweep defines sweep(), which finds what must end when a step ends,
// using shell builtins only (it must work when the pids limit leaves no
// process to spare; docs/docker.md, "When a step ends"). A process is
// spared when it is PID 1 or in its session (the init and the keep-alive),
// a zombie, $me, or of a live exec: an exec root (its parent is outside the
// container: a step's wrapper or one of xmode's helpers) other than the
// ending step's, everything in the session or below such a root, and
// everything carrying a live root's XMODE_EXEC_TAG. sweep sets L to the
// ending step's root ($dead, or else the root carrying $tag) and K to every
// other process: the ending step's, whatever environment or session they
// have, and the leftovers of steps already over. A root's tag is the 16
// characters after XMODE_EXEC_TAG= (read drops the NULs between variables,
// so the next one follows at once): Tag makes every tag that long.
const Sweep = `tagof() {
	t=
	while IFS= read -r l || [ -n "$l" ]; do
		case $l in *"$E="*) t=${l#*"$E="}; t=${t%"${t#????????????????}"}; return;; esac
	done < "$1"
}
tagged() {
	hit=
	while IFS= read -r l || [ -n "$l" ]; do
		for t in $2; do case $l in *"$E=$t"*) hit=1; return;; esac; done
	done < "$1"
}
sweep() {
	L=; K=; live=" "; tags=; rest=
	for d in /proc/[0-9]*; do
		p=${d#/proc/}
		read -r st < "$d/stat" || continue
		set -- ${st##*) }
		[ "$1" = Z ] || [ "$4" = 1 ] && continue
		if [ "$2" != 0 ]; then rest="$rest $p:$2:$4"; continue; fi
		if [ "$p" = "$dead" ]; then L=$p; continue; fi
		if [ -z "$dead" ]; then
			tagged "$d/environ" "$tag"
			if [ -n "$hit" ]; then L=$p; continue; fi
		fi
		live="$live$p "
		tagof "$d/environ"
		[ -n "$t" ] && tags="$tags $t"
	done
	left=
	for e in $rest; do
		p=${e%%:*}; r=${e#*:}
		case $live in *" ${r%%:*} "*|*" ${r#*:} "*) live="$live$p "; continue;; esac
		hit=
		[ -n "$tags" ] && tagged "/proc/$p/environ" "$tags"
		if [ -n "$hit" ]; then live="$live$p "; else left="$left $e"; fi
	done
	more=1
	while [ -n "$more" ]; do
		more=; rest=$left; left=
		for e in $rest; do
			p=${e%%:*}; r=${e#*:}
			case $live in
			*" ${r%%:*} "*|*" ${r#*:} "*) live="$live$p "; more=1;;
			*) left="$left $e";;
			esac
		done
	done
	for e in $left; do K="$K ${e%%:*}"; done
}
`

// Wrapper runs the step's argv in a child and stays as the exec's root
// process: the session leader of the step, tagged, its parent outside the
// container, so the step can always be found. The status is the command's:
// 127/126 for not found/not executable (with the shell's message on
// stderr), 128+N when killed by signal N. exec in a subshell (not a plain
// call) keeps shell builtins and functions out: argv[0] is looked up on PATH.
// Once the command has exited, everything of the step that is left
// (background children, daemons in a session of their own with a cleared
// environment) is KILLed from inside, at no extra cost, before the exec
// ends; the sweep is repeated until it finds nothing, so a child forked
// while it runs is found by the next round.
const Wrapper = `( exec "$@" ); rc=$?
E=` + engine.ExecTagEnv + `; me=$$; dead=$$; tag=
` + Sweep + `n=0
while [ "$n" -lt 50 ]; do
	sweep 2>/dev/null
	[ -n "$K" ] || break
	kill -s KILL $K 2>/dev/null
	n=$((n+1))
done
exit $rc`

// Kill ends one step from a separate exec: $1 the step's tag, $2 the
// grace period in tenths of a second (0: KILL at once), $3 the first signal
// (TERM; INT for Ctrl-C). That signal (and CONT, for stopped processes)
// first, KILL after the grace period, to everything sweep lists: the
// step's processes and any leftover of a step already over. The step's
// wrapper is spared so the step reports how its command ended; it exits by
// itself once its command is gone. Exit 0: nothing of the step is left; 3:
// something survived.
const Kill = `exec 2>/dev/null
E=` + engine.ExecTagEnv + `; tag=$1; grace=$2; sig=${3:-TERM}; me=$$; dead=
` + Sweep + `sweep
if [ "$grace" -gt 0 ] && [ -n "$K" ]; then
	kill -s "$sig" $K
	kill -s CONT $K
	i=0
	while [ "$i" -lt "$grace" ]; do
		alive=
		for p in $K; do
			if read -r st < "/proc/$p/stat"; then
				set -- ${st##*) }
				[ "$1" = Z ] || { alive=1; break; }
			fi
		done
		[ -n "$alive" ] || break
		sleep 0.1 || i=$((i+9))
		i=$((i+1))
	done
fi
n=0
while [ "$n" -lt 50 ]; do
	sweep
	[ -n "$K" ] || break
	kill -s KILL $K
	n=$((n+1))
done
i=0
while [ -n "$L$K" ] && [ "$i" -lt 20 ]; do
	[ -n "$K" ] && kill -s KILL $K
	sleep 0.1 || i=$((i+9))
	i=$((i+1))
	sweep
done
[ -n "$L" ] && kill -s KILL $L
sweep
[ -z "$K$L" ] && exit 0
echo "left:$K$L"
exit 3
`

func newTag() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Tag is the XMODE_EXEC_TAG a step carries in a container: the
// caller's tag when it is 16 lowercase hex digits (sandbox.Exec's are), a
// random one when there is none, else 16 hex digits derived from it, so
// that KillStep finds it by the same tag and the sweep can read it.
func Tag(tag string) string {
	switch {
	case tag == "":
		return newTag()
	case len(tag) == 16 && strings.Trim(tag, "0123456789abcdef") == "":
		return tag
	}
	sum := sha256.Sum256([]byte(tag))
	return hex.EncodeToString(sum[:8])
}
