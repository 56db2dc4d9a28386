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
    ("hs_device.depth=1", ["--post-queue-depth", "1"]),
    ("hs_device.depth=2", ["--post-queue-depth", "2"]),
    ("hs_device.depth=8", ["--post-queue-depth", "8"]),
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


def synthetic(build, items):
    exe = str(build / "benchmarks/analysis/synthetic_pipeline")
    common = [exe, "--items", str(items)]

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
    rows = []
    for s, _ in configs:
        m = statistics.median(measured[s])
        rows.append({"config": s or "base (as profiled)", "predicted": pred[s], "measured": m,
                     "runs": measured[s], "error": pred[s] / m - 1})
    errs = [abs(r["error"]) for r in rows]
    return {"name": name, "unit": unit, "rows": rows, "model": adv["model"],
            "limiting": adv["bottleneck"].get("limiting"), "evidence": adv["bottleneck"].get("evidence"),
            "top": adv["what_if"][:3], "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
            "load_before": load0, "load_after": os.getloadavg()[0]}


def write_docs(results, outdir, rounds):
    dat = outdir / "whatif.dat"
    with open(dat, "w") as f:
        for i, res in enumerate(results):
            f.write(f"# {res['name']}\n")
            for r in res["rows"]:
                f.write(f"{r['measured'] / res['model']['measured']:.5f} {r['predicted'] / res['model']['measured']:.5f}\n")
            f.write("\n\n")
    png = pathlib.Path("docs/whatif.png")
    gp = f"""set terminal pngcairo size 720,560 font ',10'
set output '{png}'
set title 'what-if: predicted vs measured throughput (relative to the profiled base run)'
set xlabel 'measured / base'
set ylabel 'predicted / base'
set key top left
set grid
f(x) = x
set xrange [0.3:1.5]
set yrange [0.3:1.5]
plot '{dat}' index 0 using 1:2 with points pt 7 ps 1.2 title '{results[0]['name']}', \\
     '{dat}' index 1 using 1:2 with points pt 5 ps 1.2 title '{results[1]['name']}', \\
     f(x) with lines lc rgb '#888888' title 'exact', 1.1*x with lines dt 2 lc rgb '#bbbbbb' title '±10 %', 0.9*x with lines dt 2 lc rgb '#bbbbbb' notitle
"""
    subprocess.run(["gnuplot"], input=gp, text=True, check=True)
    md = ["# What-if model vs reality",
          "",
          "Generated by `scripts/whatif_validation.py --docs` (do not edit by hand). Each pipeline runs its base",
          "configuration once with the profiler; every prediction below comes from that one profile",
          "(`--what-if`). Then each configuration really runs"
          f" {rounds} times (rounds interleaved and rotated) and the median is kept. Error = predicted / measured − 1.",
          "The base row is the base configuration measured again: its error is this machine's run-to-run noise.",
          "",
          "![predicted vs measured](../whatif.png)",
          ""]
    for res in results:
        m = res["model"]
        md += [f"## {res['name']}",
               "",
               f"Limiting stage from the base profile: **{res['limiting']}** — {res['evidence']}.",
               "",
               f"Model: {m['cores']:.2f} cores shared (the CPU the process got while it had more runnable stage work),"
               f" recorded times / {m['cpu_stretch']:.2f} for CPU contention, simulated base {m['simulated']:.0f} vs"
               f" measured {m['measured']:.0f} {res['unit']} (fit {100 * m['fit']:+.1f} %). Load average"
               f" {res['load_before']:.1f} before, {res['load_after']:.1f} after.",
               "",
               f"| configuration | predicted {res['unit']} | measured (median) | runs | error |",
               "|---|---|---|---|---|"]
        for r in res["rows"]:
            md.append(f"| `{r['config']}` | {r['predicted']:.0f} | {r['measured']:.0f} | "
                      f"{', '.join(f'{x:.0f}' for x in r['runs'])} | {100 * r['error']:+.1f} % |")
        md += ["",
               f"**Median absolute error {100 * res['median_abs_error']:.1f} %, worst {100 * res['max_abs_error']:.1f} %**"
               " (targets: ≤ 10 %, ≤ 25 %).",
               ""]
    allerr = [abs(r["error"]) for res in results for r in res["rows"]]
    md += ["## Both pipelines", "",
           f"{len(allerr)} configurations: median absolute error **{100 * statistics.median(allerr):.1f} %**, worst"
           f" **{100 * max(allerr):.1f} %**.", ""]
    pathlib.Path("docs/bench/whatif.md").write_text("\n".join(md))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200, help="example steps per run")
    ap.add_argument("--items", type=int, default=600, help="synthetic items per run")
    ap.add_argument("--out", default="build/whatif")
    ap.add_argument("--docs", action="store_true", help="write docs/bench/whatif.md and docs/whatif.png")
    ap.add_argument("--only", choices=["example", "synthetic"])
    a = ap.parse_args()
    build, out = pathlib.Path(a.build), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    if a.only in (None, "synthetic"):
        results.append(validate("synthetic_pipeline", SYNTHETIC, *synthetic(build, a.items), a.rounds))
    if a.only in (None, "example"):
        results.append(validate("dflash_train_pipeline", EXAMPLE, *example(build, a.steps), a.rounds))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    for res in results:
        print(f"{res['name']}: limiting {res['limiting']}; model fit {100 * res['model']['fit']:+.1f} %, "
              f"cores {res['model']['cores']:.2f}")
        for r in res["rows"]:
            print(f"  {r['config']:<45} predicted {r['predicted']:9.1f}  measured {r['measured']:9.1f}  "
                  f"error {100 * r['error']:+6.1f} %  runs {[round(x, 1) for x in r['runs']]}")
        print(f"  median |error| {100 * res['median_abs_error']:.1f} %, worst {100 * res['max_abs_error']:.1f} %")
    if a.docs and len(results) == 2:
        write_docs(results, out, a.rounds)
        print("wrote docs/bench/whatif.md, docs/whatif.png")


if __name__ == "__main__":
    main()
