#!/usr/bin/env bash
# scripts/gpu-bundle.sh from a fresh clone (no build/ folder, nothing left by
# an earlier build). A full bundle is minutes of nvcc, so the script stops
# after configuring (DFLASH_BUNDLE_STOP_AFTER=configure): the part a fresh
# clone can break (paths, logs, the GPU test manifests CMake writes).
#   fresh_clone_test.sh SOURCE_DIR
# The clone is of SOURCE_DIR's HEAD, with its uncommitted changes and its new
# files (those git does not ignore) applied, so an edit is tested before it is
# committed. Exit 77 (skipped)
# when SOURCE_DIR is not a git checkout.
set -uo pipefail
src=$1
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || { echo "skipped: $src is not a git checkout"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
clone=$work/clone
git clone --quiet "$src" "$clone" || { echo "FAIL: git clone $src"; exit 1; }
git -C "$clone" checkout --quiet --detach "$(git -C "$src" rev-parse HEAD)" || exit 1
git -C "$src" diff --binary HEAD | git -C "$clone" apply --allow-empty || { echo "FAIL: cannot apply the uncommitted changes"; exit 1; }
# New files not yet added (git ignores none of them) come too: what the next commit could hold.
git -C "$src" ls-files -z --others --exclude-standard | tar -C "$src" --null -T - -cf - | tar -C "$clone" -xf - ||
  { echo "FAIL: cannot copy the untracked files"; exit 1; }
[[ ! -e $clone/build ]] || { echo "FAIL: the clone has a build/ folder: not a fresh clone"; exit 1; }

# Defaults only (no DFLASH_BUNDLE_BUILD_DIR): the build goes where a user's would.
env -u DFLASH_BUNDLE_BUILD_DIR DFLASH_BUNDLE_STOP_AFTER=configure \
  "$clone/scripts/gpu-bundle.sh" "$work/out" >"$work/log" 2>&1
rc=$?
cat "$work/log"
fail=0
((rc == 0)) || { echo "FAIL: scripts/gpu-bundle.sh exit $rc in a fresh clone"; fail=1; }
grep -q '^gpu-bundle: configured .*stopping' "$work/log" || { echo "FAIL: it did not stop after configure"; fail=1; }
for f in build/gpu-bundle.configure.log build/gpu-bundle/dflash-gpu-tests.txt; do
  [[ -s $clone/$f ]] || { echo "FAIL: $f missing or empty"; fail=1; }
done
[[ ! -e $work/out ]] || { echo "FAIL: OUT was written although the build was not run"; fail=1; }
((fail == 0)) && echo "gpu-bundle.sh in a fresh clone: configured, as expected"
exit $fail
