#!/usr/bin/env python3
"""Reads the Google Benchmark JSON files of one run.sh run and prints one line
per benchmark, "STATUS<TAB>NAME<TAB>FIGURES": FIGURES for what a benchmark
measured (a benchmark has no threshold, so it never "passes"), FAIL for a
benchmark that errored or a bandwidth with nothing to compare it with. Bandwidth benchmarks
(a bytes_per_second counter) are given as a fraction of the device-to-device
copy bandwidth measured in the same run (the benchmark named BM_d2d*, taken
from the same file when it has one). Exit 1 when a benchmark reported an
error or no D2D reference was measured; 2 on unreadable input.

usage: bench_fractions.py FILE.json...
"""
import json
import sys


def gbs(x):
    return f"{x / 1e9:.1f} GB/s"


def main(paths):
    if not paths:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    runs = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                runs.append((path, json.load(f).get("benchmarks", [])))
        except (OSError, ValueError) as e:
            print(f"FAIL\t{path}\tunreadable benchmark output: {e}")
            return 2
    def d2d_of(benchmarks):
        for b in benchmarks:
            if b.get("name", "").startswith("BM_d2d") and b.get("bytes_per_second") and not b.get("error_occurred"):
                return b["bytes_per_second"]
        return None
    run_ref = next((r for r in (d2d_of(bs) for _, bs in runs) if r), None)
    failed = False
    if run_ref is None:
        print("FAIL\td2d reference\tno device-to-device copy (BM_d2d*) measured in this run: no fractions")
        failed = True
    for path, benchmarks in runs:
        ref = d2d_of(benchmarks) or run_ref
        if not benchmarks:
            print(f"FAIL\t{path}\tno benchmark ran")
            failed = True
        for b in benchmarks:
            name = b.get("name", "?")
            if b.get("error_occurred"):
                print(f"FAIL\t{name}\terror: {b.get('error_message', '?')}")
                failed = True
                continue
            t = f"{b.get('real_time', 0):.1f} {b.get('time_unit', '')}/iter"
            bw = b.get("bytes_per_second")
            if bw and name.startswith("BM_d2d"):
                print(f"FIGURES\t{name}\t{t}, {gbs(bw)} = the D2D copy reference")
            elif bw and ref:
                print(f"FIGURES\t{name}\t{t}, {gbs(bw)} = {bw / ref:.2f} of D2D copy ({gbs(ref)})")
            elif bw:
                print(f"FAIL\t{name}\t{t}, {gbs(bw)}, no D2D reference to compare with")
                failed = True
            else:
                print(f"FIGURES\t{name}\t{t} (latency: no byte count)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
