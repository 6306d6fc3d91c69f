#!/usr/bin/env bash
# The mutation campaign of issue 27: applies each planted bug of mutants/NN-*.patch in turn,
# builds, runs the test binaries in a fixed order until one fails, records caught / missed and
# the failing tests, reverts the plant, and prints a table. See mutants/README.md.
#
#   bash mutants/run.sh                 every plant
#   bash mutants/run.sh --only 07       one plant (repeat --only, or give 07,12)
#   bash mutants/run.sh --baseline      the same test sequence on the unplanted tree (must pass)
#   bash mutants/run.sh --list          the plants and the test order
#
# Not part of CI (a full run takes about an hour on two cores).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# A target directory of its own, and a profile that rebuilds quickly after a one-line change
# (incremental, many codegen units, no debug info): the first build is full, each plant then
# recompiles incrementally.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/mutants}"
export CARGO_PROFILE_RELEASE_DEBUG=0
export CARGO_PROFILE_RELEASE_INCREMENTAL=true
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=64
# Seconds one test binary may run before the plant counts as caught by a timeout (a hang is a
# failure, but it is reported as such so that it can be told from a wrong answer).
TIMEOUT="${MUTANTS_TIMEOUT:-900}"

# The test binaries in the order they run: the likely catchers first, then the rest of the
# suite; `lib` is the library's unit tests (`cargo test --lib`), `bin` the CLI's. The native-code tests
# (rustc per program) run only for plants in src/ir or the native backend.
ORDER=(mutation_survivors conventions ad_oracles oracles ad modes_agree simplify engine linear_laws linear_terms
  transpose dual_reverse logical_relations agreement wrt nested custom_derivatives linearize
  recursion target optimize builtins language api examples cli generators roundtrip readme deep
  bench_suite reliability lib bin)
NATIVE=(ir native_emit native gradbench)

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

ONLY=()
BASELINE=0
LIST=0
while [ $# -gt 0 ]; do
  case "$1" in
    --only) shift; [ $# -gt 0 ] || usage; IFS=, read -ra xs <<<"$1"; ONLY+=("${xs[@]}") ;;
    --baseline) BASELINE=1 ;;
    --list) LIST=1 ;;
    -h|--help) usage ;;
    *) usage ;;
  esac
  shift
done

PATCHES=()
for p in mutants/[0-9][0-9]-*.patch; do
  id=$(basename "$p" | cut -c1-2)
  if [ ${#ONLY[@]} -gt 0 ]; then
    keep=0
    for o in "${ONLY[@]}"; do [ "$(printf '%02d' "$((10#$o))")" = "$id" ] && keep=1; done
    [ $keep = 1 ] || continue
  fi
  PATCHES+=("$p")
done

if [ $LIST = 1 ]; then
  for p in "${PATCHES[@]}"; do
    printf '%s  %s\n' "$(basename "$p" .patch)" "$(grep -m1 '^+++ b/' "$p" | cut -c7-)"
  done
  echo "order: ${ORDER[*]} (+ ${NATIVE[*]} for src/ir, src/native.rs)"
  exit 0
fi

if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "run.sh: the work tree has uncommitted changes; commit or stash them first" >&2
  git status --short --untracked-files=no >&2
  exit 1
fi

LOGS="$CARGO_TARGET_DIR/mutant-logs"
mkdir -p "$LOGS"
RESULTS="$CARGO_TARGET_DIR/mutant-results.tsv"
: >"$RESULTS"

APPLIED=""
revert() {
  if [ -n "$APPLIED" ]; then
    git apply -R "$APPLIED" || { echo "run.sh: could not revert $APPLIED" >&2; exit 3; }
    APPLIED=""
  fi
}
trap 'revert' EXIT
trap 'revert; exit 130' INT TERM

# The selector of one test binary for cargo.
sel() {
  case "$1" in
    lib) echo --lib ;;
    bin) echo "--bin chad" ;;
    *) echo "--test $1" ;;
  esac
}

# Runs the ordered test binaries; sets STATUS, WHERE, TESTS. $1 = label for logs, $2 = 1 to
# include the native tests.
run_suite() {
  local label=$1 native=$2 targets=("${ORDER[@]}")
  [ "$native" = 1 ] && targets=("${NATIVE[@]}" "${ORDER[@]}")
  STATUS=missed WHERE=- TESTS=-
  for t in "${targets[@]}"; do
    local log="$LOGS/$label.$t.log"
    # shellcheck disable=SC2046
    if ! cargo test --release $(sel "$t") --no-run >"$log" 2>&1; then
      STATUS=build-error WHERE=$t TESTS=$(grep -m1 '^error' "$log" || echo '?')
      return
    fi
    # shellcheck disable=SC2046
    timeout "$TIMEOUT" cargo test --release $(sel "$t") >>"$log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
      WHERE=$t
      if [ $rc -eq 124 ]; then
        STATUS=timeout TESTS="(no result after ${TIMEOUT}s)"
      else
        STATUS=caught
        TESTS=$(grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' |
          head -4 | paste -sd, -)
        [ -n "$TESTS" ] || TESTS="(exit $rc: $(grep -m1 -E 'panicked|error' "$log" | cut -c1-80))"
      fi
      return
    fi
  done
}

if [ $BASELINE = 1 ]; then
  start=$(date +%s)
  run_suite baseline 1
  echo "baseline (no plant): $STATUS ${WHERE} ${TESTS} in $(($(date +%s) - start)) s"
  [ "$STATUS" = missed ] # "missed" = every test passed
  exit
fi

for p in "${PATCHES[@]}"; do
  name=$(basename "$p" .patch)
  files=$(grep '^+++ b/' "$p" | cut -c7- | paste -sd, -)
  native=0
  case "$files" in *src/ir/*|*src/native.rs*) native=1 ;; esac
  if ! git apply --check "$p" 2>/dev/null; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$files" "stale-patch" - - 0 | tee -a "$RESULTS"
    continue
  fi
  git apply "$p" && APPLIED=$p
  start=$(date +%s)
  run_suite "$name" "$native"
  secs=$(($(date +%s) - start))
  revert
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$files" "$STATUS" "$WHERE" "$TESTS" "$secs" | tee -a "$RESULTS"
done

echo
echo "| plant | file | result | test binary | failing tests | seconds |"
echo "| --- | --- | --- | --- | --- | --- |"
awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 }' "$RESULTS"
caught=$(awk -F'\t' '$3 == "caught" || $3 == "timeout"' "$RESULTS" | wc -l)
total=$(wc -l <"$RESULTS")
echo
echo "$caught of $total plants caught (results in $RESULTS, logs in $LOGS)"
[ "$caught" = "$total" ]
