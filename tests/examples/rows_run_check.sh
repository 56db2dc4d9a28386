#!/bin/sh
# example_train_rows: runs the profiled example with --hs-link rows and checks
# what its output says of the hs_rows link and the training.
#   $1 the profiled binary   $2 steps
set -eu
out=$("$1" --steps "$2" --seq-len 256 --quiet --hs-link rows --profile-interval 0 2>&1) || {
  echo "$out"
  echo "rows check: the run failed"
  exit 1
}
echo "$out"
echo "$out" | awk '
  /^hs_rows: / { rin = $2; rout = $5; batches = $7; short = substr($9, 2) + 0 }
  /^hs_rows\.push_wait / { push = 1 }
  /^pack_hidden_states / { pack = 1 }
  /^initial loss / { first = $3; last = $6 }
  END {
    bad = ""
    if (rin == "" || rin + 0 == 0) bad = bad " no hs_rows counts;"
    if (rin != rout) bad = bad " " rin " rows in but " rout " out;"
    if (short > 1) bad = bad " " short " short batches with full_batches (at most 1);"
    if (!push) bad = bad " no hs_rows.push_wait row in the profile;"
    if (pack) bad = bad " a pack_hidden_states row: the rows path packs nothing;"
    if (!(first > last)) bad = bad " the loss did not go down (" first " -> " last ");"
    if (bad != "") { print "rows check failed:" bad; exit 1 }
    print "rows check: " rin " rows in and out, " batches " batches, loss " first " -> " last
  }'
