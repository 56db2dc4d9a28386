#!/usr/bin/env python3
"""Checks the what-if model against reality (docs/bench/whatif.md, docs/whatif.png).

For each of two pipelines — the example (dflash_train_pipeline_profiled) and
benchmarks/analysis/synthetic_pipeline (known per-stage CPU costs) — it runs the
base configuration once with the profiler, takes every prediction from that one
profile (--what-if), then really runs each predicted configuration (rounds
interleaved, the median kept) and reports predicted vs measured throughput.
The base configuration is measured again in the rounds: its error is the
run-to-run noise of this machine. Tooling only; a benchmark, not a test.

  scripts/whatif_validation.py [--build build/release] [--rounds 2] [--docs]
"""
import argparse, json, os, pathlib, re, statistics, subprocess, sys, time

EXAMPLE = [  # (what-if, extra args for the real run)
    ("", []),
    ("target_forward.workers=1", ["--target-workers", "1"]),
    ("target_forward.workers=3", ["--target-workers", "3"]),
    ("target_forward.workers=4", ["--target-workers", "4"]),
    ("hs_queue.depth=2", ["--hs-queue-depth", "2"]),
    ("hs_queue.depth=8", ["--hs-queue-depth", "8"]),
    ("hs_device.depth=1", ["--post-link-depth", "1"]),
    ("hs_device.depth=2", ["--post-link-depth", "2"]),
    ("hs_device.depth=8", ["--post-link-depth", "8"]),
    ("drafter.speed=0.6667", ["--slow-drafter", "1.5"]),
    ("drafter.speed=0.5", ["--slow-drafter", "2"]),
]
SYNTHETIC = [
    ("", []),
    ("decode.workers=2", ["--decode-workers", "2"]),
    ("decode.workers=3", ["--decode-workers", "3"]),
    ("decode.workers=4", ["--decode-workers", "4"]),
    ("q_mid.depth=1", ["--q-mid", "1"]),
    ("q_in.depth=1,q_mid.depth=1,q_out.depth=1", ["--q-in", "1", "--q-mid", "1", "--q-out", "1"]),
    ("q_mid.depth=60", ["--q-mid", "60"]),
    ("transform.speed=0.5", ["--slow", "2"]),
    ("transform.speed=0.3333", ["--slow", "3"]),
    ("decode.workers=2,transform.speed=0.3333", ["--decode-workers", "2", "--slow", "3"]),
]

# The base slowed: a stage really made faster (a virtual speedup checked against a real one).
SYNTHETIC_SLOW = [
    ("", []),
    ("transform.speed=3", ["--slow", "1"]),
    ("transform.speed=1.5", ["--slow", "2"]),
    ("decode.workers=2", ["--decode-workers", "2"]),
    ("transform.speed=3,decode.workers=2", ["--slow", "1", "--decode-workers", "2"]),
]


def naive_ratio(spec, stages):
    """min over stages of workers / mean service — the formula that ignores buffers and cores."""
    w = {s["name"]: s["workers"] for s in stages}
    t = {s["name"]: s["mean_service_ns"] for s in stages}
    base = min(w[n] / t[n] for n in w)
    for part in filter(None, spec.split(",")):
        target, value = part.split("=")
        name, field = target.rsplit(".", 1)
        if field == "workers":
            w[name] = int(value)
        elif field == "speed":
            t[name] /= float(value)
    return min(w[n] / t[n] for n in w) / base


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p.stdout


def example(build, steps):
    exe = str(build / "examples/dflash_train_pipeline/dflash_train_pipeline_profiled")
    common = [exe, "--steps", str(steps), "--quiet", "--profile-interval", "0"]

    def base(specs):
        out = run(common + ["--profile-format", "json"] + sum((["--what-if", s] for s in specs), []))
        adv = next(json.loads(l)["advice"] for l in out.splitlines() if l.startswith('{"advice"'))
        return adv, measure_out(out)

    def measure_out(out):
        return float(re.search(r"throughput: ([0-9.]+) tokens/s", out).group(1))

    return base, lambda args: measure_out(run(common + args)), "tokens/s"


def synthetic(build, items, base_args=()):
    exe = str(build / "benchmarks/analysis/synthetic_pipeline")
    common = [exe, "--items", str(items), *base_args]  # a configuration's flags come later and win

    def base(specs):
        j = json.loads(run(common + sum((["--what-if", s] for s in specs), [])).strip().splitlines()[-1])
        return j["advice"], j["items_per_s"]

    return base, lambda args: json.loads(run(common + args).strip().splitlines()[-1])["items_per_s"], "items/s"


def validate(name, configs, base, measure, unit, rounds):
    specs = [s for s, _ in configs if s]
    load0 = os.getloadavg()[0]
    adv, base_measured = base(specs)
    if not adv["model"]["ok"]:
        sys.exit(f"{name}: the base profile gave no model: {adv['model']}")
    pred = {p["change"]: p["predicted"] for p in adv["requested"]}
    pred[""] = adv["model"]["measured"]
    measured = {s: [] for s, _ in configs}
    for r in range(rounds):  # interleaved, rotated: drift of the machine hits every configuration alike
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for s, args in order:
            measured[s].append(measure(args))
    # Relative: predicted / predicted base vs measured / base re-measured in the same rounds. On a
    # machine shared with other work the CPU this process gets drifts between the profiled run and
    # the rounds; the ratio asks what the model claims (what a change buys) without that drift.
    base_rerun = statistics.median(measured[""])
    rows = []
    for s, _ in configs:
        m = statistics.median(measured[s])
        rows.append({"config": s or "base (as profiled)", "predicted": pred[s], "measured": m,
                     "runs": measured[s], "error": pred[s] / m - 1,
                     "predicted_ratio": pred[s] / pred[""], "measured_ratio": m / base_rerun,
                     "rel_error": (pred[s] / pred[""]) / (m / base_rerun) - 1,
                     "naive_ratio": naive_ratio(s, adv["bottleneck"]["stages"])})
    errs = [abs(r["error"]) for r in rows]
    rel = [abs(r["rel_error"]) for r in rows if r["config"] != "base (as profiled)"]
    runs = measured[""]
    return {"name": name, "unit": unit, "rows": rows, "model": adv["model"],
            "limiting": adv["bottleneck"].get("limiting"), "evidence": adv["bottleneck"].get("evidence"),
            "top": adv["what_if"][:3], "stages": adv["bottleneck"]["stages"], "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
            "median_rel_error": statistics.median(rel), "max_rel_error": max(rel),
            "base_spread": max(runs) / min(runs) - 1, "profiled_vs_rerun": pred[""] / base_rerun - 1,
            "load_before": load0, "load_after": os.getloadavg()[0]}


def write_docs(results, outdir, rounds):
    dat = outdir / "whatif.dat"
    with open(dat, "w") as f:
        for i, res in enumerate(results):
            f.write(f"# {res['name']}\n")
            for r in res["rows"]:
                f.write(f"{r['measured_ratio']:.5f} {r['predicted_ratio']:.5f}\n")
            f.write("\n\n")
    png = pathlib.Path("docs/whatif.png")
    series = ", ".join(f"'{dat}' index {i} using 1:2 with points pt {(7, 5, 9, 11)[i % 4]} ps 1.2 title '{r['name']}'"
                       for i, r in enumerate(results))
    gp = f"""set terminal pngcairo size 720,560 font ',10' noenhanced
set output '{png}'
set title 'what-if: predicted vs measured throughput, each relative to its base'
set xlabel 'measured / base (re-measured in the same rounds)'
set ylabel 'predicted / base (from the one profile)'
set key top left
set grid
f(x) = x
set xrange [0.3:1.9]
set yrange [0.3:1.9]
plot {series}, \\
     f(x) with lines lc rgb '#888888' title 'exact', 1.1*x with lines dt 2 lc rgb '#bbbbbb' title '±10 %', 0.9*x with lines dt 2 lc rgb '#bbbbbb' notitle
"""
    subprocess.run(["gnuplot"], input=gp, text=True, check=True)
    md = ["Generated by `scripts/whatif_validation.py --docs` (do not edit by hand). Each pipeline runs its base",
          "configuration once with the profiler; every prediction below comes from that one profile",
          "(`--what-if`). Then each configuration really runs"
          f" {rounds} times (rounds interleaved and rotated) and the median is kept. Error = predicted / measured − 1.",
          "The base row is the base configuration measured again: its error is this machine's run-to-run noise.",
          "",
          "Two errors per configuration. **Relative** (the model's claim: what a change buys) = (predicted /",
          "predicted base) / (measured / base re-measured in the same rounds) − 1. **Absolute** = predicted /",
          "measured − 1; it also carries the drift of the CPU this process got between the profiled run and the",
          "rounds (the build machine is shared: see the load averages), which no model of the pipeline can know.",
          "The last column is what min over stages of workers / mean service time would predict (no buffers,",
          "no shared cores): it is what the simulation's CPU and blocking model must beat.",
          "",
          "![predicted vs measured](whatif.png)",
          "",
          "(The plot is docs/whatif.png; this note is appended to docs/benchmarks.md, whose folder the path is relative to.)",
          ""]
    for res in results:
        m = res["model"]
        md += [f"### {res['name']}",
               "",
               f"**Relative error: median {100 * res['median_rel_error']:.1f} %, worst {100 * res['max_rel_error']:.1f} %**"
               f" (targets: ≤ 10 %, ≤ 25 %); absolute: median {100 * res['median_abs_error']:.1f} %, worst"
               f" {100 * res['max_abs_error']:.1f} %. Noise: the base runs spread {100 * res['base_spread']:.0f} %"
               f" (max / min − 1); the profiled base run was {100 * res['profiled_vs_rerun']:+.1f} % off their median.",
               "",
               f"Limiting stage from the base profile: **{res['limiting']}** — {res['evidence']}.",
               "",
               f"Model: {m['cores']:.2f} cores shared (the CPU the process got while it had more runnable stage work),"
               f" recorded times / {m['cpu_stretch']:.2f} for CPU contention, simulated base {m['simulated']:.0f} vs"
               f" measured {m['measured']:.0f} {res['unit']} (fit {100 * m['fit']:+.1f} %). Load average"
               f" {res['load_before']:.1f} before, {res['load_after']:.1f} after.",
               "",
               f"| configuration | predicted {res['unit']} | measured (median) | runs | predicted / base | measured / base | relative error | absolute error | naive formula / base |",
               "|---|---|---|---|---|---|---|---|---|"]
        for r in res["rows"]:
            md.append(f"| `{r['config']}` | {r['predicted']:.0f} | {r['measured']:.0f} | "
                      f"{', '.join(f'{x:.0f}' for x in r['runs'])} | {r['predicted_ratio']:.3f} | {r['measured_ratio']:.3f} | "
                      f"{100 * r['rel_error']:+.1f} % | {100 * r['error']:+.1f} % | {r['naive_ratio']:.3f} |")
        md.append("")
    rel = [abs(r["rel_error"]) for res in results for r in res["rows"] if r["config"] != "base (as profiled)"]
    allerr = [abs(r["error"]) for res in results for r in res["rows"]]
    md += ["### Reading it", "",
           "On this shared machine each pipeline was CPU-bound: the process got fewer cores than it had runnable",
           "stage threads (the model line of each pipeline). The model predicts — and the runs agree within their",
           "noise — that more workers and deeper or shallower queues buy nothing there, where the naive bound",
           "(last column) promises up to the worker ratio; what moves throughput is CPU work per item (the speed",
           "rows, including a stage really made 1.5× and 3× faster). The largest relative errors are slowdowns of",
           "the busiest stage, under-predicted: the model applies one CPU-stretch factor to every stage, while the",
           "scheduler stretches a stage that never sleeps more than one that wakes per item (guide, section 3d,",
           "Limits). Absolute errors are dominated by the CPU drift between the one profiled run and the rounds,",
           "visible in each base row.", ""]
    md += ["### All pipelines", "",
           f"{len(rel)} changed configurations: relative error median **{100 * statistics.median(rel):.1f} %**, worst"
           f" **{100 * max(rel):.1f} %**; absolute error (all {len(allerr)} rows) median"
           f" {100 * statistics.median(allerr):.1f} %, worst {100 * max(allerr):.1f} %.", ""]
    pathlib.Path("docs/bench/whatif.md").write_text("\n".join(md))
    # docs/benchmarks.md ends with the notes, as scripts/bench_report.py appends them: replace ours there.
    bm = pathlib.Path("docs/benchmarks.md")
    if bm.exists():
        text = bm.read_text()
        head = text.split("\n## Notes: whatif\n")[0].rstrip("\n")
        bm.write_text(head + "\n\n## Notes: whatif\n\n" + "\n".join(md).strip() + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200, help="example steps per run")
    ap.add_argument("--items", type=int, default=600, help="synthetic items per run")
    ap.add_argument("--out", default="build/whatif")
    ap.add_argument("--docs", action="store_true", help="write docs/bench/whatif.md and docs/whatif.png")
    ap.add_argument("--only", choices=["example", "synthetic", "synthetic_slow"])
    ap.add_argument("--report-only", action="store_true", help="write the docs from OUT/results.json (same --rounds)")
    a = ap.parse_args()
    build, out = pathlib.Path(a.build), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.report_only:  # redraw the docs from the last run's results
        write_docs(json.loads((out / "results.json").read_text()), out, a.rounds)
        return
    results = []
    if a.only in (None, "synthetic"):
        results.append(validate("synthetic_pipeline", SYNTHETIC, *synthetic(build, a.items), a.rounds))
    if a.only in (None, "synthetic_slow"):
        results.append(validate("synthetic_pipeline, base --slow 3", SYNTHETIC_SLOW,
                                *synthetic(build, a.items, ["--slow", "3"]), a.rounds))
    if a.only in (None, "example"):
        results.append(validate("dflash_train_pipeline", EXAMPLE, *example(build, a.steps), a.rounds))
    if a.only and (out / "results.json").exists():  # keep the other pipelines' last results
        old = [r for r in json.loads((out / "results.json").read_text()) if r["name"] != results[0]["name"]]
        results = old + results
    (out / "results.json").write_text(json.dumps(results, indent=1))
    for res in results:
        print(f"{res['name']}: limiting {res['limiting']}; model fit {100 * res['model']['fit']:+.1f} %, "
              f"cores {res['model']['cores']:.2f}")
        for r in res["rows"]:
            print(f"  {r['config']:<45} predicted {r['predicted']:9.1f}  measured {r['measured']:9.1f}  "
                  f"ratio {r['predicted_ratio']:.3f} vs {r['measured_ratio']:.3f}  rel {100 * r['rel_error']:+6.1f} %  "
                  f"abs {100 * r['error']:+6.1f} %  runs {[round(x, 1) for x in r['runs']]}")
        print(f"  relative |error| median {100 * res['median_rel_error']:.1f} %, worst {100 * res['max_rel_error']:.1f} %; "
              f"absolute median {100 * res['median_abs_error']:.1f} %, worst {100 * res['max_abs_error']:.1f} %; "
              f"base spread {100 * res['base_spread']:.0f} %")
    if a.docs:
        write_docs(results, out, a.rounds)
        print("wrote docs/bench/whatif.md, docs/whatif.png")


if __name__ == "__main__":
    main()
