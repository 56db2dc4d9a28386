#!/usr/bin/env bash
# A real signal to the running example (tests/examples/CMakeLists.txt):
#   signal_test.sh EXE SIGNAL EXPECTED_EXIT [TRACE]
# SIGNAL: INT or TERM, sent to the process;
#   GROUP-INT / GROUP-TERM: sent as GNU timeout sends it (Slurm and mpirun
#     forward signals the same way): to the process and then to its process
#     group — here the copy comes once the first was acknowledged (the
#     "stopping" line), while the run is stopping (a copy that finds the
#     process gone is no test: the fixed program passes either way);
#   AT-ONCE: the process is stopped (SIGSTOP), gets SIGINT, SIGTERM and SIGINT
#     to its group, and is continued.
# Each is one stop request: one clean stop. (A second request, after the
# first was acknowledged, exits at once: tests/examples/test_signals.cpp.)
# Starts EXE on a long run in its own process group, waits for its first
# progress line, sends SIGNAL and checks: the exit code is EXPECTED_EXIT (128 + signal), the
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
set -m  # job control: the background job gets its own process group (id = $pid), as under timeout
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
case $sig in
  GROUP-*)
    sig=${sig#GROUP-}
    kill -"$sig" "$pid"
    for _ in $(seq 2000); do grep -q 'stopping the pipeline' "$tmp/err" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.005; done
    kill -"$sig" -- -"$pid" 2>/dev/null || echo "note: the run ended before the copy of SIG$sig arrived"
    ;;
  AT-ONCE) sig=INT; kill -STOP "$pid" && kill -INT "$pid" && kill -TERM "$pid" && kill -INT -- -"$pid" && kill -CONT "$pid" ;;
  *) kill -"$sig" "$pid" ;;
esac
for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "still running 60 s after SIG$sig"
wait "$pid"
rc=$?
pid=
[[ $rc == "$want" ]] || fail "exit code $rc after SIG$sig, expected $want"
grep -q "again: exiting now" "$tmp/err" && fail "a copy of the stop request was taken for a second one"
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
