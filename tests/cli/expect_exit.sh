#!/usr/bin/env bash
# Runs one `longctx` command line and checks its exit status and what it prints.
#   expect_exit.sh LONGCTX STATUS REGEX [--] ARGS...
# Passes when the exit status is STATUS and stdout+stderr match the extended regular
# expression REGEX (grep -E); otherwise prints what came instead and fails. In ARGS,
# @TMP@ is replaced by a fresh temporary folder, for config files written with WRITE=, and an
# argument @EMPTY@ by an empty one (CMake drops empty list elements).
#   WRITE='name=contents' (environment): writes @TMP@/name before the run.
#   FIFO='name' (environment): makes @TMP@/name a named pipe before the run.
#   REJECT='regex' (environment): fails when the output matches it too (what must not be
#   printed, such as the progress of work a refusal should have come before).
set -uo pipefail
longctx="$1"; want="$2"; regex="$3"; shift 3
[ "${1:-}" = "--" ] && shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${WRITE:-}" ]; then
  printf '%s' "${WRITE#*=}" >"$tmp/${WRITE%%=*}"
fi
if [ -n "${FIFO:-}" ]; then
  mkfifo "$tmp/$FIFO"
fi
args=()
for a in "$@"; do
  if [ "$a" = "@EMPTY@" ]; then args+=(""); else args+=("${a//@TMP@/$tmp}"); fi
done
out=$("$longctx" "${args[@]}" 2>&1)
got=$?
ok=1
if [ "$got" -ne "$want" ]; then
  echo "FAIL: exit status $got, expected $want"; ok=0
fi
if ! grep -qE -- "$regex" <<<"$out"; then
  echo "FAIL: output does not match /$regex/"; ok=0
fi
if [ -n "${REJECT:-}" ] && grep -qE -- "$REJECT" <<<"$out"; then
  echo "FAIL: output matches /$REJECT/, which it must not"; ok=0
fi
if [ "$ok" -eq 0 ]; then
  echo "command: longctx ${args[*]}"
  echo "output:"; echo "$out"
  exit 1
fi
echo "ok: longctx ${args[*]} -> $got"
