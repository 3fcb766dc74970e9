#!/usr/bin/env bash
# Builds the planner, its unit tests and the planner-only CLI with AddressSanitizer and
# UndefinedBehaviorSanitizer (gcc, LONGCTX_SANITIZE=ON, into build-sanitize/) and runs the
# unit tests there (the CLI tests included, on the sanitized longctx); any sanitizer report
# fails the run.
#   LONGCTX_SANITIZE_BUILD_DIR overrides the build folder; LONGCTX_JOBS the build's jobs (2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${LONGCTX_SANITIZE_BUILD_DIR:-$root/build-sanitize}"

# shellcheck source=scripts/ccache_env.sh
. "$root/scripts/ccache_env.sh"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DLONGCTX_WITH_RUNTIME=OFF -DLONGCTX_SANITIZE=ON >&2
fi
cmake --build "$build" -j "${LONGCTX_JOBS:-2}" --target planner_unit_tests longctx >&2

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
cd "$build"
# What runs under the sanitizers is every unit test but the sweeps: the tests that repeat one
# code path over a grid of models, lengths or search configurations to hold a property (a
# search against brute force, a skipping replay against the whole one, every shorter length
# of a long drawn answer, every order of the search's groups, every preset). Under ASan+UBSan
# they cost three quarters of this step (14 of its 19 minutes of test time) and reach no code
# the other tests here and the fuzzers do not run under the same sanitizers: the search, the
# reserved replay with and without its skipping, and max-context on the H100 and on the
# virtual device all run in the tests that remain.
# The sweeps run in the normal build (scripts/test.sh); LONGCTX_SANITIZE_ALL=1 runs them here.
sweeps='^(Search\.(FindsTheBruteForceOptimum|GroupsSearchedInAnyOrderAnswerAsInOrder|ChoicesJudgedByDominanceAnswerAsRun)'
sweeps+='|ArcticStack\.PlansEveryPresetOnGpus'
sweeps+='|ReservedReplay\.(SkippingRepeatsGivesTheWholeReplaysFigures|SkippingRepeatsHoldsOverDrawnShapes'
sweeps+='|VerdictsAgreeWithFullPredictions)'
sweeps+='|MaxContext\.(ItsPlanFitsAndTheNextLengthDoesNot|ConfigurationsCutUnderTheFloorAnswerAsConfirmed'
sweeps+='|ASearchShortOfItsFloorAnswersAsConfirmed)'
sweeps+='|Properties/MaxContextBounds\.EveryShorterLength/case_2)( |$)'  # the H100 case with every technique
# (a parameterized test's name goes on with "  # GetParam() = ...")
exclude=(-E "$sweeps")
[ "${LONGCTX_SANITIZE_ALL:-0}" = 1 ] && exclude=()
# Per-test limit: the slowest test left here takes under a minute under the sanitizers on two
# cores; a swept one, run with LONGCTX_SANITIZE_ALL=1, up to five.
ctest -L unit "${exclude[@]}" --output-on-failure -j "${LONGCTX_TEST_JOBS:-2}" --timeout 1800
