#!/usr/bin/env python3
"""Compile time of a dflash pipeline TU next to the same pipeline in oneTBB, on this machine.

Subjects, each one g++ -std=c++20 -O2 -c of one TU (no ccache, output discarded):
  dflash    a 3-stage pipeline (source -> 2 parallel workers -> in_order sum), built twice in
            the TU (NullProfiler and AccumulatingProfiler), with the host-core headers
            <dflash/pipeline.hpp> + <dflash/profile.hpp>
  tbb       the same pipeline with tbb::parallel_pipeline (oneTBB, libtbb-dev), built once
  quickstart  examples/quickstart.cpp as it is, with the includes it shows users (compiled with the
              CCCL flags, so an umbrella include would be measured too)
Rounds are interleaved (the order rotates each round); per round the ratios dflash/tbb and
quickstart/tbb are taken, and the median and min..max over rounds reported. The time is the
compiler's CPU time (user + sys of the child: less disturbed by other load than wall time);
wall time is reported next to it. A benchmark, not a test: no thresholds.

usage: scripts/compile_time.py [--rounds 7] [--cxx g++] [--out results.json]
       scripts/compile_time.py --headers [--rounds 5] [HEADER...]   each header alone, -fsyntax-only
       scripts/compile_time.py --explicit-instantiation [--rounds 5]   a 4-TU program
                               (examples/explicit_instantiation) with and without the recipe
       scripts/compile_time.py --probe [--rounds 7]   the pipeline TU on a type-erased engine
                               (scripts/compile_time_probe.cpp), header-only and compiled, next to oneTBB
--out writes the comparison JSON scripts/bench_report.py reads (as benchmarks/compare.hpp does)."""
import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
CCCL = pathlib.Path(os.environ.get("DFLASH_CCCL_INCLUDE", "/usr/local/cuda/include/cccl"))

DFLASH_TU = r"""
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>
#include <cstdio>
#include <optional>

int main() {
  int next = 0;
  long long sum = 0;
  auto numbers = dflash::stage<"numbers">([&]() -> std::optional<int> {
    return next < 20000 ? std::optional(next++) : std::nullopt;
  });
  auto square = dflash::stage<"square">([](int x) { return 1LL * x * x; });
  auto add = dflash::stage<"sum">([&](long long v) { sum += v; });
  auto build = [&](const auto& prof) {
    return dflash::make_pipeline(prof, numbers, dflash::queue_link<"in", 64>{}, dflash::parallel<2>(square),
                                 dflash::queue_link<"out", 64>{}, dflash::in_order(add));
  };
  build(dflash::NullProfiler{}).run_to_completion();
  std::printf("sum %lld\n", sum);
  next = 0, sum = 0;
  dflash::AccumulatingProfiler<dflash::pipeline_keys<decltype(build)>> prof;
  build(prof).run_to_completion();
  std::printf("sum %lld\n%s", sum, prof.summary().c_str());
}
"""

TBB_TU = r"""
#include <oneapi/tbb/parallel_pipeline.h>
#include <cstdio>

int main() {
  int next = 0;
  long long sum = 0;
  oneapi::tbb::parallel_pipeline(
      64,
      oneapi::tbb::make_filter<void, int>(oneapi::tbb::filter_mode::serial_in_order,
                                          [&](oneapi::tbb::flow_control& fc) -> int {
                                            if (next >= 20000) {
                                              fc.stop();
                                              return 0;
                                            }
                                            return next++;
                                          }) &
          oneapi::tbb::make_filter<int, long long>(oneapi::tbb::filter_mode::parallel,
                                                   [](int x) { return 1LL * x * x; }) &
          oneapi::tbb::make_filter<long long, void>(oneapi::tbb::filter_mode::serial_in_order,
                                                    [&](long long v) { sum += v; }));
  std::printf("sum %lld\n", sum);
}
"""


def compile_once(cmd, may_fail=False):
    """(CPU seconds, wall seconds) of one compiler run; a failed compile stops the script
    (with may_fail: None)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode and may_fail:
        return None
    if p.returncode:
        sys.exit(f"compile_time: failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def summarize(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def interleave(subjects, rounds):
    """subjects: [(name, cmd)]; returns {name: {"cpu": [...], "wall": [...]}} with rounds rotated."""
    out = {name: {"cpu": [], "wall": []} for name, _ in subjects}
    for r in range(rounds):
        for k in range(len(subjects)):
            name, cmd = subjects[(k + r) % len(subjects)]
            cpu, wall = compile_once(cmd)
            out[name]["cpu"].append(cpu)
            out[name]["wall"].append(wall)
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {out[n]['cpu'][-1]:.2f} s" for n, _ in subjects),
              flush=True)
    return out


def base_cmd(cxx, extra=()):
    return [cxx, "-std=c++20", "-O2", f"-I{ROOT / 'include'}", *extra, "-c", "-o", os.devnull]


def pipeline_vs_tbb(args):
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="dflash-compile-time-"))
    (tmp / "dflash_pipeline.cpp").write_text(DFLASH_TU)
    (tmp / "tbb_pipeline.cpp").write_text(TBB_TU)
    umbrella = [f"-isystem{CCCL}", "-DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP"]
    subjects = [
        ("dflash", base_cmd(args.cxx) + [str(tmp / "dflash_pipeline.cpp")]),
        ("tbb", base_cmd(args.cxx) + [str(tmp / "tbb_pipeline.cpp")]),
        ("quickstart", base_cmd(args.cxx, umbrella) + [str(ROOT / "examples/quickstart.cpp")]),
    ]
    for name, cmd in subjects:
        print(f"{name}: {' '.join(cmd)}")
    res = interleave(subjects, args.rounds)
    names = {"dflash": "dflash::Pipeline, <dflash/pipeline.hpp> + <dflash/profile.hpp> (Null + Accumulating)",
             "quickstart": "examples/quickstart.cpp as it is (Null + Accumulating)",
             "tbb": "tbb::parallel_pipeline, <oneapi/tbb/parallel_pipeline.h>"}
    rows = []
    print(f"\n{args.cxx} -O2, one TU; CPU s (wall s), median [min .. max] over {args.rounds} interleaved rounds")
    for name in ("dflash", "tbb", "quickstart"):
        c, w = summarize(res[name]["cpu"]), summarize(res[name]["wall"])
        print(f"  {name:<11} {c['median']:6.2f} s [{c['min']:.2f} .. {c['max']:.2f}]   wall {w['median']:.2f} s "
              f"[{w['min']:.2f} .. {w['max']:.2f}]")
    for subject in ("dflash", "quickstart"):
        for kind in ("cpu", "wall"):
            ratio = summarize([s / a for s, a in zip(res[subject][kind], res["tbb"][kind])])
            unit = "s CPU (lower is better)" if kind == "cpu" else "s wall (lower is better)"
            rows.append({"shape": f"{args.cxx} -O2 compile, {'CPU' if kind == 'cpu' else 'wall'} time",
                         "subject": names[subject], "anchor": names["tbb"], "unit": unit, "rounds": args.rounds,
                         "subject_median": statistics.median(res[subject][kind]),
                         "anchor_median": statistics.median(res["tbb"][kind]),
                         "ratio_median": ratio["median"], "ratio_min": ratio["min"], "ratio_max": ratio["max"]})
            print(f"  {subject}/tbb ({kind}): {ratio['median']:.2f} [{ratio['min']:.2f} .. {ratio['max']:.2f}]")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({"comparison": "compile_time", "rows": rows}, indent=1) + "\n")
        print(f"wrote {args.out}")


DEFAULT_HEADERS = [
    "<dflash/pipeline.hpp>", "<dflash/profile.hpp>", "<dflash/dflash.hpp>", "<dflash/ops.hpp>",
    "<dflash/queue.hpp>", "<dflash/analysis.hpp>", "<dflash/device.hpp>",
    "<dflash/profile/key.hpp>", "<dflash/profile/null_profiler.hpp>", "<dflash/profile/accumulating_profiler.hpp>",
    "<dflash/profile/report.hpp>", "<boost/hana.hpp>", "<oneapi/tbb/parallel_pipeline.h>",
    "<thrust/device_vector.h>", "<cuda/std/atomic>", "<map>", "<thread>", "<chrono>", "<format>",
    "<iostream>", "<string>", "<vector>", "<functional>", "<optional>", "<atomic>", "<mutex>",
    "<condition_variable>", "<algorithm>", "<sstream>",
]


def headers_alone(args):
    """Each header alone in a TU, -fsyntax-only: what including it costs (front end only)."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="dflash-compile-time-"))
    extra = [f"-isystem{CCCL}", "-DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP"]
    subjects = [("(empty TU)", [args.cxx, "-std=c++20", "-fsyntax-only", str(tmp / "empty.cpp")])]
    (tmp / "empty.cpp").write_text("\n")
    for i, h in enumerate(args.header or DEFAULT_HEADERS):
        tu = tmp / f"h{i}.cpp"
        tu.write_text(f"#include {h}\n")
        subjects.append((h, [args.cxx, "-std=c++20", "-fsyntax-only", f"-I{ROOT / 'include'}", *extra, str(tu)]))
    missing = [name for name, cmd in subjects if compile_once(cmd, may_fail=True) is None]
    for name in missing:
        print(f"skipped: {name} does not compile alone here (not in this standard library, or its dependency missing)")
    subjects = [s for s in subjects if s[0] not in missing]
    res = interleave(subjects, args.rounds)
    print(f"\n{args.cxx} -std=c++20 -fsyntax-only, one header per TU; CPU s, median [min .. max] over "
          f"{args.rounds} interleaved rounds")
    print("| header | CPU s, median [min .. max] |\n|---|---:|")
    for name, _ in subjects:
        c = summarize(res[name]["cpu"])
        print(f"| `{name}` | {c['median']:.2f} [{c['min']:.2f} .. {c['max']:.2f}] |")


def explicit_instantiation(args):
    """examples/explicit_instantiation: four TUs using one pipeline type (two profiler builds),
    compiled with the recipe (extern template in the header, the engine instantiated in
    sum_pipeline.cpp) and without it. Per round: the whole program (every TU, one after another)
    and the rebuild after an edit of one user TU (part_b.cpp, the profiled one)."""
    d = ROOT / "examples" / "explicit_instantiation"
    parts = ["main.cpp", "part_a.cpp", "part_b.cpp", "part_c.cpp"]
    def tus(variant):
        files = parts + (["sum_pipeline.cpp"] if variant == "with" else [])
        return [base_cmd(args.cxx, [f"-I{d / variant}"]) + [str(d / f)] for f in files]
    programs = {v: tus(v) for v in ("with", "without")}
    out = {k: [] for k in ("program with", "program without", "part_b with", "part_b without")}
    for r in range(args.rounds):
        order = ("with", "without") if r % 2 == 0 else ("without", "with")
        for v in order:
            total = 0.0
            for cmd in programs[v]:
                cpu, _ = compile_once(cmd)
                total += cpu
                if cmd[-1].endswith("part_b.cpp"):
                    out[f"part_b {v}"].append(cpu)
            out[f"program {v}"].append(total)
    print(f"\n{args.cxx} -O2; CPU s, median [min .. max] over {args.rounds} rounds (order alternating)")
    for k, v in out.items():
        c = summarize(v)
        print(f"  {k:<16} {c['median']:6.2f} s [{c['min']:.2f} .. {c['max']:.2f}]")
    for what in ("program", "part_b"):
        ratio = summarize([w / o for w, o in zip(out[f"{what} with"], out[f"{what} without"])])
        print(f"  {what} with/without: {ratio['median']:.2f} [{ratio['min']:.2f} .. {ratio['max']:.2f}]")


def erased_engine_probe(args):
    """scripts/compile_time_probe.cpp (the pipeline TU on a minimal type-erased engine) built
    header-only and with the engine left to a library, next to the oneTBB TU and the dflash TU.
    The header-only probe is linked and run once first: its sums must be right."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="dflash-compile-time-"))
    (tmp / "dflash_pipeline.cpp").write_text(DFLASH_TU)
    (tmp / "tbb_pipeline.cpp").write_text(TBB_TU)
    probe = ROOT / "scripts" / "compile_time_probe.cpp"
    exe = tmp / "probe"
    compile_once([args.cxx, "-std=c++20", "-O2", f"-I{ROOT / 'include'}", str(probe), "-o", str(exe), "-pthread"])
    run = subprocess.run([str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode:
        sys.exit(f"compile_time: the probe ran wrong ({run.returncode}):\n{run.stdout}")
    subjects = [
        ("tbb", base_cmd(args.cxx) + [str(tmp / "tbb_pipeline.cpp")]),
        ("dflash", base_cmd(args.cxx) + [str(tmp / "dflash_pipeline.cpp")]),
        ("erased, header-only", base_cmd(args.cxx) + [str(probe)]),
        ("erased, compiled", base_cmd(args.cxx, ["-DPROBE_ENGINE_COMPILED"]) + [str(probe)]),
    ]
    res = interleave(subjects, args.rounds)
    print(f"\n{args.cxx} -O2, one TU; CPU s and ratio to tbb, median [min .. max] over {args.rounds} interleaved rounds")
    for name, _ in subjects:
        c = summarize(res[name]["cpu"])
        r = summarize([s / a for s, a in zip(res[name]["cpu"], res["tbb"]["cpu"])])
        print(f"  {name:<20} {c['median']:5.2f} s [{c['min']:.2f} .. {c['max']:.2f}]   /tbb {r['median']:.2f} "
              f"[{r['min']:.2f} .. {r['max']:.2f}]")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cxx", default="g++")
    ap.add_argument("--out", help="write the comparison JSON here")
    ap.add_argument("--headers", action="store_true", help="cost of each header alone instead")
    ap.add_argument("--probe", action="store_true", help="the pipeline TU on a type-erased engine instead")
    ap.add_argument("--explicit-instantiation", action="store_true",
                    help="a 4-TU program with and without explicit instantiation instead")
    ap.add_argument("header", nargs="*", help="with --headers: the headers, as <x> or \"x\"")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.header and not args.headers:
        ap.error("HEADER arguments need --headers")
    if sum((args.headers, args.probe, args.explicit_instantiation)) > 1:
        ap.error("--headers, --probe and --explicit-instantiation are separate measurements: pick one")
    if args.out and (args.headers or args.probe or args.explicit_instantiation):
        ap.error("--out writes the pipeline comparison's JSON; --headers, --probe and --explicit-instantiation only print")
    if args.headers:
        headers_alone(args)
    elif args.explicit_instantiation:
        explicit_instantiation(args)
    elif args.probe:
        erased_engine_probe(args)
    else:
        pipeline_vs_tbb(args)


if __name__ == "__main__":
    main()
