#!/usr/bin/env python3
"""Turn Google Benchmark JSON files (from scripts/bench.sh) into docs/benchmarks.md
and a gnuplot data file. Tooling only: the library itself needs no Python.

usage: bench_report.py RESULTS_DIR OUT_MD
Every ratio is computed from numbers measured in the same binary run."""
import json
import pathlib
import platform
import re
import sys


def load(path):
    data = json.loads(path.read_text())
    # Plain runs, and the median of benchmarks that report aggregates only.
    rows = [b for b in data.get("benchmarks", [])
            if b.get("run_type", "iteration") == "iteration" or b.get("aggregate_name") == "median"]
    return data.get("context", {}), rows


def ns(b, key="cpu_time"):
    unit = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
    return b[key] * unit


def fmt(x):
    return f"{x:,.3f}" if x < 100 else f"{x:,.0f}"


def table(rows):
    """Generic table: name, real time, CPU time, and every user counter."""
    skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
            "real_time", "cpu_time", "time_unit", "family_index", "per_family_instance_index",
            "aggregate_name", "aggregate_unit", "label", "error_occurred", "error_message"}
    counters = []
    for b in rows:
        for k in b:
            if k not in skip and k not in counters and isinstance(b[k], (int, float)):
                counters.append(k)
    head = "".join(f" {c} |" for c in counters)
    out = ["| benchmark | real ns | CPU ns |" + head, "|---|---:|---:|" + "---:|" * len(counters)]
    for b in rows:
        cells = [fmt(b[c]) if c in b else "" for c in counters]
        out.append(f"| `{b['name']}` | {fmt(ns(b, 'real_time'))} | {fmt(ns(b))} |" + "".join(f" {c} |" for c in cells))
    return "\n".join(out)


def profiler_ratios(rows, plot):
    """ns per scoped timer, as a ratio to a bare pair of reads of the same clock."""
    by = {b["name"]: b for b in rows}
    out = ["| policy | threads | CPU ns per timer | bare clock pair ns | ratio to clock pair |",
           "|---|---:|---:|---:|---:|"]
    for threads in (1, 2):
        for name, clock in (("baseline", "steady"), ("null_profiler", "steady"),
                            ("accumulating_steady", "steady"), ("accumulating_tsc", "tsc")):
            b = by.get(f"{name}/threads:{threads}")
            ref = by.get(f"bare_clock_pair/{clock}/threads:{threads}")
            if not b or not ref:
                continue
            r = ns(b) / ns(ref)
            out.append(f"| {name} | {threads} | {fmt(ns(b))} | {fmt(ns(ref))} ({clock}) | {r:.2f} |")
            plot.append((f"{name}/{threads}t", r))
    return "\n".join(out)


def queue_ratios(rows):
    """Host queue throughput next to the std::mutex + std::deque baseline of the same shape."""
    by = {}
    for b in rows:
        name, shape = b["name"].split("/")[0], b["name"].split("/")[1]
        by[(name, shape)] = b.get("items_per_second", 0.0)
    out = ["| queue | shape | M items/s | × mutex+deque |", "|---|---|---:|---:|"]
    for (name, shape), v in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        base = by.get(("mutex_deque", shape))
        if base:
            out.append(f"| {name} | {shape} | {v / 1e6:.2f} | {v / base:.2f} |")
    return "\n".join(out)


def cpu_cell(row, key):
    """A CPU column's cell: rows that measure something else (flow on/off, idle share) have none."""
    return f"{row[key]:.2f}" if key in row else "—"


def comparison_table(data):
    """compare_* binaries: interleaved rounds, ratio per round, median and spread."""
    rows = data.get("rows", [])
    cpu = any("subject_cpu_us_per_item" in r for r in rows)
    out = [f"Interleaved rounds in one process; ratio = dflash / anchor per round "
           f"({rows[0]['unit'] if rows else ''}), median [min .. max]:", "",
           "| shape | dflash | anchor | dflash median | anchor median | ratio median | ratio spread | rounds |"
           + (" CPU µs/item dflash | CPU µs/item anchor |" if cpu else ""),
           "|---|---|---|---:|---:|---:|---|---:|" + ("---:|---:|" if cpu else "")]
    for r in rows:
        out.append(f"| {r['shape']} | {r['subject']} | {r['anchor']} | {r['subject_median']:.3f} | "
                   f"{r['anchor_median']:.3f} | **{r['ratio_median']:.2f}** | "
                   f"{r['ratio_min']:.2f} .. {r['ratio_max']:.2f} | {r['rounds']} |"
                   + (f" {cpu_cell(r, 'subject_cpu_us_per_item')} | {cpu_cell(r, 'anchor_cpu_us_per_item')} |"
                      if cpu else ""))
    for sk in data.get("skipped", []):
        out.append(f"\nSkipped: {sk}")
    return "\n".join(out)


# The performance targets: (what, plot label, comparison file, shape, subject substring, anchor substring, target,
# higher is better); target None: a reference row shown next to a target's row, with no target of its own
TARGETS = [
    ("Pipeline (direct_link) / tbb::parallel_pipeline, 50/20 µs, depth 2", "direct/TBB 50us d2", "pipeline_vs_tbb",
     "50/20 us work, depth 2", "direct_link", "tbb", 0.95, True),
    ("Pipeline (direct_link) / tbb::parallel_pipeline, 50/20 µs, depth 8", "direct/TBB 50us", "pipeline_vs_tbb",
     "50/20 us work, depth 8", "direct_link", "tbb", 0.95, True),
    ("Pipeline (queue_link) / tbb::parallel_pipeline, 50/20 µs, depth 2", "queue/TBB 50us d2", "pipeline_vs_tbb",
     "50/20 us work, depth 2", "queue_link", "tbb", 0.95, True),
    ("Pipeline (queue_link) / tbb::parallel_pipeline, 50/20 µs, depth 8", "queue/TBB 50us", "pipeline_vs_tbb",
     "50/20 us work, depth 8", "queue_link", "tbb", 0.95, True),
    ("Pipeline (direct_link) / TBB, zero-cost stages, depth 8", "direct/TBB 0us", "pipeline_vs_tbb",
     "zero-cost stages, depth 8", "direct_link", "tbb", 0.5, True),
    ("Pipeline (queue_link) / TBB, zero-cost stages, depth 2", "queue/TBB 0us d2", "pipeline_vs_tbb",
     "zero-cost stages, depth 2", "queue_link", "tbb", 0.3, True),
    ("Pipeline (queue_link) / TBB, zero-cost stages, depth 8", "queue/TBB 0us", "pipeline_vs_tbb",
     "zero-cost stages, depth 8", "queue_link", "tbb", 0.5, True),
    ("Idle queue-linked pipeline: process CPU / one core, 1 s", "idle queue", "pipeline_vs_tbb",
     "idle 1 s", "queue_link", "one busy core", 0.01, False),
    ("Idle direct-linked pipeline: process CPU / one core, 1 s", "idle direct", "pipeline_vs_tbb",
     "idle 1 s", "direct_link", "one busy core", 0.01, False),
    ("bounded_queue / mutex+condvar+deque, 1P1C cap 1024", "1P1C/mutex", "compare_queue", "1P1C cap 1024", "bounded_queue",
     "mutex", 2.0, True),
    ("bounded_queue / mutex+condvar+deque, 4P4C cap 1024", "4P4C/mutex", "compare_queue", "4P4C cap 1024", "bounded_queue",
     "mutex", 1.5, True),
    ("bounded_queue / moodycamel BlockingConcurrentQueue, 1P1C cap 1024 (within 2×)", "1P1C/moodycamel", "compare_queue",
     "1P1C cap 1024", "bounded_queue", "moodycamel", 0.5, True),
    # Header-only by decision (the engine is instantiated for the policy): compile time is held to
    # 3x oneTBB's for the host pipeline TU and for the quickstart, the same program as users write it.
    # MPI link: against raw MPI cycling through as many buffers as the link's items do (like for like);
    # the one-buffer row is MPI's best case (one buffer stays in cache), shown so nothing is hidden.
    ("mpi_link / raw MPI_Send/MPI_Recv (2×depth buffers, like for like), 64 B items, depth 8", "MPI 64B d8",
     "bench_mpi_link", "64 B items, depth 8", "mpi_link", "like for like", 0.5, True),
    ("mpi_link / raw MPI, one buffer again and again (MPI best case), 64 B items, depth 8", "MPI 64B d8 best",
     "bench_mpi_link", "64 B items, depth 8", "mpi_link", "MPI best case", None, True),
    ("mpi_link / credit-window bound (8 items per MPI round trip), 64 B items, depth 8", "MPI 64B d8 bound",
     "bench_mpi_link", "64 B items, depth 8", "mpi_link", "credit-window bound", None, True),
    ("mpi_link / raw MPI_Send/MPI_Recv (like for like), 1 MiB items, depth 8", "MPI 1MiB", "bench_mpi_link",
     "1 MiB items, depth 8", "mpi_link", "like for like", 0.9, True),
    ("mpi_link / raw MPI, one buffer (MPI best case), 1 MiB items, depth 8", "MPI 1MiB best", "bench_mpi_link",
     "1 MiB items, depth 8", "mpi_link", "MPI best case", None, True),
    ("mpi_link / raw MPI_Send/MPI_Recv (like for like), 64 MiB items, depth 8", "MPI 64MiB", "bench_mpi_link",
     "64 MiB items, depth 8", "mpi_link", "like for like", 0.9, True),
    ("mpi_link / raw MPI, one buffer (MPI best case), 64 MiB items, depth 8", "MPI 64MiB best", "bench_mpi_link",
     "64 MiB items, depth 8", "mpi_link", "MPI best case", None, True),
    ("Idle MPI job (links attached), producer rank: process CPU / one core, 1 s", "idle MPI r0", "bench_mpi_link",
     "idle job 1 s", "rank 0", "one busy core", 0.01, False),
    ("Idle MPI job (links attached), consumer rank: process CPU / one core, 1 s", "idle MPI r1", "bench_mpi_link",
     "idle job 1 s", "rank 1", "one busy core", 0.01, False),
    ("AccumulatingProfiler<tsc_clock> zone / bare TSC pair (cost)", "zone/TSC pair", "compare_profiler", "TSC clock",
     "AccumulatingProfiler", "bare", 1.10, False),
    ("Flow tracking on / off (AccumulatingProfiler), process CPU per item, 50/20 µs, queue_link", "flow on/off queue",
     "flow_overhead", "50/20 us work, 2000 items, queue_link", "flow tracking on", "off", 1.05, False),
    ("Flow tracking on / off (AccumulatingProfiler), process CPU per item, 50/20 µs, direct_link", "flow on/off direct",
     "flow_overhead", "50/20 us work, 2000 items, direct_link", "flow tracking on", "off", 1.05, False),
    ("Compile time, pipeline TU (pipeline.hpp + profile.hpp) / the same in oneTBB (g++ -O2, CPU)", "compile/TBB",
     "compile_time", "g++ -O2 compile, CPU time", "dflash::Pipeline", "tbb", 3.0, False),
    ("Compile time, examples/quickstart.cpp as it is / the pipeline in oneTBB (g++ -O2, CPU)", "quickstart/TBB",
     "compile_time", "g++ -O2 compile, CPU time", "quickstart", "tbb", 3.0, False),
]


def targets_table(comparisons, plot):
    out = ["| what | measured ratio, median [min .. max] | target | met |", "|---|---|---|---|"]
    for what, label, file, shape, subject, anchor, target, higher in TARGETS:
        data = comparisons.get(file)
        row = next((r for r in (data or {}).get("rows", []) if r["shape"] == shape and subject in r["subject"]
                    and anchor in r["anchor"]), None)
        if row is None:
            out.append(f"| {what} | not measured ({file} missing or anchor skipped) | "
                       f"{'none (reference)' if target is None else ('≥' if higher else '≤') + ' ' + str(target)} | — |")
            continue
        r = row["ratio_median"]
        if target is None:
            out.append(f"| {what} | {r:.3f} [{row['ratio_min']:.2f} .. {row['ratio_max']:.2f}] | none (reference) | — |")
            plot.append((label, r))
            continue
        met = r >= target if higher else r <= target
        out.append(f"| {what} | **{r:.3f}** [{row['ratio_min']:.2f} .. {row['ratio_max']:.2f}] | "
                   f"{'≥' if higher else '≤'} {target} | {'yes' if met else '**no**'} |")
        plot.append((label, r))
    return "\n".join(out)


def naive_ratios(rows):
    """Each op next to its naive reference (BM_x vs BM_x_naive, same arguments)."""
    by = {b["name"]: b for b in rows}
    out = ["| op | CPU ns | naive CPU ns | speed-up |", "|---|---:|---:|---:|"]
    for name, b in by.items():
        m = re.match(r"(BM_[a-z_]+?)_(naive|dense_reference)(.*)$", name)
        if not m:
            continue
        ours = by.get(m.group(1) + m.group(3)) or by.get(m.group(1) + "_sparse" + m.group(3))
        if ours:
            out.append(f"| `{ours['name']}` | {fmt(ns(ours))} | {fmt(ns(b))} | {ns(b) / ns(ours):.2f} |")
    return "\n".join(out)


def main():
    results, out_md = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    plot, pipe_plot, target_plot = [], [], []
    md = ["# Benchmarks", "",
          "Generated by `scripts/bench.sh` — do not edit by hand; commentary lives in `docs/bench/*.md`",
          "and is appended below. Timings are CPU timings of the machine named here; ratios compare",
          "numbers measured side by side in one run of one binary. Benchmarks are not tests.", "",
          "![profiler overhead and pipeline efficiency](benchmarks.png)", ""]
    all_files = sorted(results.glob("*.json"))
    comparisons = [f for f in all_files if "comparison" in json.loads(f.read_text())]
    files = [f for f in all_files if f not in comparisons]
    md += ["## Performance targets (this run)", "",
           "Each a ratio measured side by side in one process, rounds interleaved; the sections below have",
           "every row. A target not met is shown as measured.", "",
           targets_table({f.stem: json.loads(f.read_text()) for f in comparisons}, target_plot), ""]
    if files:
        ctx, _ = load(files[0])
        md += [f"Machine: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz, "
               f"{platform.machine()}, run {ctx.get('date', '?')}.", ""]
    for f in files:
        ctx, rows = load(f)
        name = f.stem
        md += [f"## {name}", "", f"`{ctx.get('executable', name)}`", ""]
        if name == "profiler_overhead":
            md += ["Cost of one scoped timer (begin + end + record) next to a bare pair of clock reads:", "",
                   profiler_ratios(rows, plot), ""]
        if name == "policy_overhead":
            ref = next((b for b in rows if b["name"] == "bare_clock_pair"), None)
            if ref:
                md += ["Every policy's scoped timer as a ratio to a bare pair of `steady_clock` reads, same run:", "",
                       "| policy | CPU ns | ratio to clock pair |", "|---|---:|---:|"]
                md += [f"| `{b['name'].split('/')[0]}` | {fmt(ns(b))} | {ns(b) / ns(ref):.2f} |" for b in rows]
                md += [""]
        if name == "bench_pipeline":
            for b in rows:
                if "efficiency" in b:
                    policy = "NullProfiler" if "NullProfiler" in b["name"] else "Accumulating"
                    pipe_plot.append((f"synthetic pipeline/{policy}", b["efficiency"]))
        if name == "pipeline_variants":
            for b in rows:
                if "profiled/plain" in b:
                    pipe_plot.append(("example profiled/plain tok/s", b["profiled/plain"]))
        if name == "bench_queue":
            md += ["Throughput next to a plain `std::mutex` + `std::deque` queue, same run:", "",
                   queue_ratios(rows), ""]
        if name == "ops_host":
            md += ["Host twins next to the naive reference implementations, same run:", "",
                   naive_ratios(rows), ""]
        md += [table(rows), ""]
    for f in comparisons:
        data = json.loads(f.read_text())
        md += [f"## {f.stem} (against the anchors)", "", comparison_table(data), ""]
    mpi = results / "bench_mpi_link.txt"
    if mpi.exists():
        md += ["## bench_mpi_link (against raw MPI)", "",
               "`mpirun --oversubscribe --allow-run-as-root -np 2 bench_mpi_link 9`:", "",
               "```", mpi.read_text().strip(), "```", ""]
    for note in sorted(pathlib.Path("docs/bench").glob("*.md")):
        md += [f"## Notes: {note.stem}", "", note.read_text().strip(), ""]
    out_md.write_text("\n".join(md) + "\n")
    (results / "plot.dat").write_text("".join(f'"{label}" {value:.4f}\n' for label, value in plot))
    (results / "plot_targets.dat").write_text("".join(f'"{label}" {value:.4f}\n' for label, value in target_plot))
    (results / "plot_pipeline.dat").write_text("".join(f'"{label}" {value:.4f}\n' for label, value in pipe_plot))


if __name__ == "__main__":
    main()
