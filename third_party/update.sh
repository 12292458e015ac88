#!/bin/sh
# Re-creates each patched module in third_party/ (see README.md): the
# release go.mod requires, from the module cache (downloaded and verified
# by go if it is not there yet), gofmt'ed, plus third_party/<dir>.patch.
#
#   third_party/update.sh          re-create every third_party/<dir>
#   third_party/update.sh -o OUT   write them to OUT/<dir> instead (the
#                                  check in forks_test.go)
#   third_party/update.sh -diff    rewrite each <dir>.patch from the
#                                  directory as edited
#
# The modules are those go.mod replaces with ./third_party/<dir>. It prints
# one line per module: <dir> <module>@<version>.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
mode=apply
out=$here
case "${1:-}" in
"") ;;
-o) [ $# -eq 2 ] || { echo "usage: $0 [-o OUT | -diff]" >&2; exit 2; }
    mode=out; out=$(cd "$2" && pwd) ;;
-diff) [ $# -eq 1 ] || { echo "usage: $0 [-o OUT | -diff]" >&2; exit 2; }
    mode=diff ;;
*) echo "usage: $0 [-o OUT | -diff]" >&2; exit 2 ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cd "$here/.."
go list -m -f '{{.Path}} {{.Version}}{{with .Replace}} {{.Path}}{{end}}' all |
	awk '$3 ~ /^\.\/third_party\//' >"$tmp/modules"
[ -s "$tmp/modules" ] || { echo "$0: go.mod replaces no module with ./third_party/<dir>" >&2; exit 1; }

while read -r path version replacement; do
	dir=${replacement#./third_party/}
	patch=$here/$dir.patch
	echo "$dir $path@$version"
	src=$(go mod download -json "$path@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -n "$src" ] && [ -d "$src" ] || { echo "$0: go mod download $path@$version gave no directory" >&2; exit 1; }

	# Upstream's tree as released, writable and gofmt'ed (only comments'
	# layout changes in old releases; the lint checks every .go file).
	up=$tmp/a
	rm -rf "$up"
	cp -R "$src" "$up"
	chmod -R u+w "$up"
	gofmt -w "$up"

	if [ "$mode" = diff ]; then
		rm -rf "$tmp/b"
		cp -R "$here/$dir" "$tmp/b"
		# git diff exits 1 when the trees differ, which is the point.
		(cd "$tmp" && git -c core.quotepath=off diff --no-index --no-prefix --no-color \
			--no-ext-diff --no-renames --binary a b) >"$tmp/patch" || [ $? -eq 1 ]
		{
			echo "xmode's change to $path $version: third_party/update.sh applies it"
			echo "to the release (gofmt'ed) to make third_party/$dir."
			echo
			cat "$tmp/patch"
		} >"$patch"
		continue
	fi

	[ -f "$patch" ] || { echo "$0: $patch is missing" >&2; exit 1; }
	# git apply works on the tree of the repository it is run in: give it
	# one of its own, outside xmode's.
	git init -q "$up"
	if ! git -C "$up" apply --whitespace=nowarn "$patch"; then
		[ "$mode" = apply ] || exit 1
		# A new release the patch no longer fits: leave it in place with
		# what applied and the rest in *.rej, to finish by hand.
		git -C "$up" apply --whitespace=nowarn --reject "$patch" || true
		rm -rf "$up/.git" "${out:?}/$dir"
		mv "$up" "$out/$dir"
		echo "$0: $dir.patch does not apply to $path $version: finish the *.rej files in third_party/$dir by hand, delete them, then run $0 -diff" >&2
		exit 1
	fi
	rm -rf "$up/.git"
	rm -rf "${out:?}/$dir"
	mv "$up" "$out/$dir"
done <"$tmp/modules"
