#!/usr/bin/env bash
# One query of tests/answers/queries.txt held to its recorded answer: the command's stdout and
# exit status as text, then again with --json, byte for byte against tests/answers/NAME.txt.
# stderr (progress lines) is not part of an answer.
#
# usage: check_answer.sh LONGCTX NAME ARGS...   (LONGCTX_UPDATE_ANSWERS=1 rewrites the file)
set -uo pipefail
longctx=$1 name=$2
shift 2
golden="$(cd "$(dirname "$0")" && pwd)/$name.txt"
actual=$(mktemp)
trap 'rm -f "$actual" "$actual.new"' EXIT
for json in "" --json; do
  printf '$ longctx %s%s\n' "$*" "${json:+ $json}" >>"$actual"
  # shellcheck disable=SC2086
  "$longctx" "$@" $json >>"$actual" 2>/dev/null
  printf '[exit %d]\n' $? >>"$actual"
done
if [ "${LONGCTX_UPDATE_ANSWERS:-0}" = 1 ]; then
  # Put in place whole: a stopped update never leaves half a file.
  cp "$actual" "$actual.new" && mv "$actual.new" "$golden"
  echo "rewrote $golden"
  exit 0
fi
if [ ! -f "$golden" ]; then
  echo "no recorded answer $golden: run scripts/update_answers.sh and commit it" >&2
  exit 1
fi
if ! diff -u "$golden" "$actual"; then
  echo "the answer to '$*' changed (above: - recorded, + now). If the change is meant," >&2
  echo "run scripts/update_answers.sh and commit the rewritten tests/answers/$name.txt" >&2
  exit 1
fi
