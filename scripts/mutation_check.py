#!/usr/bin/env python3
"""Plants known bugs in a scratch copy of dflash, one at a time, and checks that
the test meant to catch each one fails (within its time limit).

    scripts/mutation_check.py                 # every mutant
    scripts/mutation_check.py --list          # names, files, the tests expected to catch them
    scripts/mutation_check.py lost_wakeup_pop max_as_min

A test suite is only as good as the bugs it catches; this keeps the claim
checkable. It is not part of CI (each mutant rebuilds a test: minutes in all).
The scratch copy is `git archive HEAD` plus the working tree's uncommitted
changes, built in its own folder (ccache makes the unchanged parts cheap).
Exit status: 0 when every mutant was caught, 1 otherwise.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Mutant:
    name: str
    why: str        # the bug, in terms of behaviour
    file: str       # relative to the repository root
    old: str        # exact text replaced (must occur exactly once)
    new: str
    target: str     # the test target to rebuild
    command: list   # run from the build folder; must fail on the mutant
    timeout: int = 120


# One planted bug, two tests: a pop and a push each meet the other side's claim in flight.
IGNORE_CLAIM_IN_FLIGHT = ("include/dflash/queue/bounded_queue.hpp",
                          "      if (in_flight) {\n", "      if (false && in_flight) {\n")

MUTANTS = [
    Mutant("lost_wakeup_pop",
           "a parker ignores a claim already in flight and sleeps through the publish that will not wake it",
           *IGNORE_CLAIM_IN_FLIGHT,
           "test_bounded_queue", ["tests/queue/test_bounded_queue", "pop() meeting*"]),
    Mutant("lost_wakeup_push",
           "the same lost wake-up seen from a push on a full queue",
           *IGNORE_CLAIM_IN_FLIGHT,
           "test_bounded_queue", ["tests/queue/test_bounded_queue", "push() meeting*"]),
    Mutant("dropped_notify",
           "a wake-up clears the parked bit but notifies nobody",
           "include/dflash/queue/bounded_queue.hpp",
           "    cv.notify_all();\n  }\n", "    (void)cv;\n  }\n",
           "test_bounded_queue", ["tests/queue/test_bounded_queue", "~[stress]"]),
    Mutant("max_as_min",
           "the batch fold keeps the batch minimum as the key's maximum",
           "include/dflash/profile/accumulating_profiler.hpp",
           "    c.max.store(mx, std::memory_order_relaxed);", "    c.max.store(mn, std::memory_order_relaxed);",
           "test_accumulating_profiler", ["tests/profile/test_accumulating_profiler", "batch fold*"]),
    Mutant("staged_value_not_binned",
           "the batch fold leaves one staged value out of the histogram",
           "include/dflash/profile/accumulating_profiler.hpp",
           "      auto& bucket = c.buckets[histogram::bucket_of(v)];\n",
           "      if (&x == &c.staged[5]) continue;\n      auto& bucket = c.buckets[histogram::bucket_of(v)];\n",
           "test_accumulating_profiler", ["tests/profile/test_accumulating_profiler", "batch fold*"]),
    Mutant("in_order_per_worker_numbers",
           "each source worker numbers its items from 0, so an in_order stage sees repeated numbers",
           "include/dflash/pipeline/pipeline.hpp",
           "seq = source_seq_.fetch_add(1, std::memory_order_relaxed);",
           "seq = local_seq++;",
           "test_make_pipeline", ["tests/pipeline/test_make_pipeline", "in_order behind a source with several workers*"]),
    Mutant("abandon_without_event",
           "a slot given back unpublished is recycled without an event on its producer's stream",
           "include/dflash/device/device_channel.hpp",
           "    b_.record(slots_[i].consumed, s.native());\n    (void)free_.push(i);",
           "    if (false) b_.record(slots_[i].consumed, s.native());\n    (void)free_.push(i);",
           "test_device_channel", ["tests/device/test_device_channel", "*given back unpublished*"]),
    Mutant("pending_stream_wait_only",
           "a device stage reading a host value waits only on its stream, not on the host",
           "include/dflash/pipeline/pipeline.hpp",
           "return pop_pending<I>([&](auto ev) { b.host_wait(ev); });",
           "return pop_pending<I>([&](auto ev) { b.wait(native, ev); });",
           "test_device_pipeline", ["tests/device/test_device_pipeline", "*host value that device work*"]),
    Mutant("credit_batch_as_one",
           "a consumer returns one credit for a batch of n items taken",
           "include/dflash/mpi/link_credits.hpp",
           "      out_.post_copy(&n, sizeof n, r, tag_, c,\n",
           "      const std::uint64_t one = 1;\n      out_.post_copy(&one, sizeof one, r, tag_, c,\n",
           "test_mpi", ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "3", "tests/mpi/test_mpi",
                        "credit_batches"]),
]

# A second edit a mutant needs, in the same file (restored with it).
EXTRA = {
    "in_order_per_worker_numbers": ("      if constexpr (I == 0) {\n        while (",
                                    "      if constexpr (I == 0) {\n        std::uint64_t local_seq = 0;\n        while ("),
}


def run(cmd, cwd, timeout=None):
    return subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)


def replace_once(path, old, new):
    with open(path) as f:
        text = f.read()
    if text.count(old) != 1:
        raise SystemExit(f"mutation_check: {os.path.relpath(path)}: the text to replace occurs "
                         f"{text.count(old)} times (expected once); update the mutant")
    with open(path, "w") as f:
        f.write(text.replace(old, new))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="mutants to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    a = ap.parse_args()
    chosen = [m for m in MUTANTS if not a.names or m.name in a.names]
    unknown = set(a.names) - {m.name for m in MUTANTS}
    if unknown:
        print(f"mutation_check: unknown mutant(s): {', '.join(sorted(unknown))} (see --list)", file=sys.stderr)
        return 2
    if a.list:
        for m in chosen:
            print(f"{m.name:30} {m.file}\n{'':30} {m.why}\n{'':30} caught by: {' '.join(m.command)}")
        return 0

    scratch = tempfile.mkdtemp(prefix="dflash-mutants-")
    try:
        src = os.path.join(scratch, "src")
        os.makedirs(src)
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE, check=True).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        diff = subprocess.run(["git", "diff", "HEAD", "--binary"], cwd=ROOT, stdout=subprocess.PIPE, check=True).stdout
        if diff:
            subprocess.run(["git", "apply", "--whitespace=nowarn"], cwd=src, input=diff, check=True)
        build = os.path.join(scratch, "build")
        env_path = "/usr/local/cuda/bin:" + os.environ.get("PATH", "")
        os.environ["PATH"] = env_path
        r = run(["cmake", "-S", src, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 "-DDFLASH_ENABLE_CUDA=OFF", "-DDFLASH_BUILD_BENCHMARKS=OFF", "-DDFLASH_BUILD_ZERO_COST=OFF",
                 "-DDFLASH_CHECK_HEADER_WARNINGS=OFF"], ROOT)
        if r.returncode:
            print(r.stdout)
            return 1
        missed = []
        for m in chosen:
            path = os.path.join(src, m.file)
            with open(path) as f:
                original = f.read()
            try:
                if m.name in EXTRA:
                    replace_once(path, *EXTRA[m.name])
                replace_once(path, m.old, m.new)
                b = run(["cmake", "--build", build, "--target", m.target, "-j2"], ROOT)
                if b.returncode:
                    print(f"{m.name:30} BUILD FAILED (fix the mutant):\n{b.stdout[-2000:]}")
                    missed.append(m.name)
                    continue
                t0 = time.monotonic()
                try:
                    t = run(m.command, build, timeout=m.timeout)
                    caught, how = t.returncode != 0, f"exit {t.returncode}"
                except subprocess.TimeoutExpired:
                    caught, how = True, f"hung past {m.timeout} s (no watchdog fired)"
                dt = time.monotonic() - t0
                print(f"{m.name:30} {'caught' if caught else 'MISSED'} in {dt:5.1f} s ({how}) by {' '.join(m.command)}")
                if not caught:
                    missed.append(m.name)
            finally:
                with open(path, "w") as f:
                    f.write(original)
        if missed:
            print(f"mutation_check: {len(missed)} mutant(s) not caught: {', '.join(missed)}")
            return 1
        print(f"mutation_check: all {len(chosen)} mutant(s) caught")
        return 0
    finally:
        if a.keep:
            print(f"scratch copy kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
