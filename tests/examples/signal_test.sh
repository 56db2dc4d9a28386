#!/usr/bin/env bash
# A real signal to the running example (tests/examples/CMakeLists.txt):
#   signal_test.sh EXE SIGNAL EXPECTED_EXIT [TRACE]
#   signal_test.sh EXE TWICE 143
# TWICE: the process is stopped (SIGSTOP), gets SIGINT and SIGTERM, and is
# continued, so the second signal arrives while the first is being handled:
# it must exit at once (128 + SIGTERM) without the final report.
# Starts EXE on a long run, waits for its first progress line, sends SIGNAL
# (INT or TERM) and checks: the exit code is EXPECTED_EXIT (128 + signal), the
# result lines are printed and, for the profiled build (TRACE given), the
# final profile table too and TRACE is valid trace JSON — and TRACE, an
# existing file, was left untouched until the run wrote it.
set -uo pipefail
exe=$1 sig=$2 want=$3 trace=${4:-}
tmp=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$tmp/out"; echo "--- stderr"; cat "$tmp/err"; exit 1; }

args=(--steps 1000000 --seq-len 256 --progress-interval 0.05)
old='an older trace: untouched until the run writes its own'
if [[ -n $trace ]]; then
  printf '%s\n' "$old" >"$trace"
  args+=(--profile-interval 0 --trace "$trace")
fi
"$exe" "${args[@]}" >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 1200); do  # up to 120 s (TSan builds are slow to start)
  grep -q '^step ' "$tmp/out" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
grep -q '^step ' "$tmp/out" || fail "no progress line before the signal"
if [[ -n $trace && $(cat "$trace") != "$old" ]]; then
  fail "--trace changed the existing $trace before the run wrote it"
fi
if [[ $sig == TWICE ]]; then
  kill -STOP "$pid" && kill -INT "$pid" && kill -TERM "$pid" && kill -CONT "$pid"
else
  kill -"$sig" "$pid"
fi
for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "still running 60 s after SIG$sig"
wait "$pid"
rc=$?
pid=
[[ $rc == "$want" ]] || fail "exit code $rc after SIG$sig, expected $want"
if [[ $sig == TWICE ]]; then
  grep -q "SIGTERM again: exiting now" "$tmp/err" || fail "no 'again: exiting now' message after the second signal"
  grep -q '^throughput:' "$tmp/out" && fail "the second signal did not exit at once (the result was printed)"
  echo "second signal: exit $rc at once"
  exit 0
fi
grep -q "SIG$sig: stopping the pipeline" "$tmp/err" || fail "no 'stopping' message on stderr"
grep -Eq '^throughput: [0-9]+ tokens/s' "$tmp/out" || fail "no result line after SIG$sig"
if [[ -n $trace ]]; then
  grep -q 'final profile (whole run)' "$tmp/out" || fail "no final profile after SIG$sig"
  python3 - "$trace" <<'PY' || fail "$trace is not a valid trace"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
assert any(e.get("name") == "drafter_step" for e in events), "no drafter_step events"
print(f"trace: {len(events)} events")
PY
fi
echo "SIG$sig: exit $rc, final report printed"
