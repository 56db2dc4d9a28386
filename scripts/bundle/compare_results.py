#!/usr/bin/env python3
"""Compares two --results files of the dflash example (the --device cuda run
against the --device cpu run of the same seed).

A results file has one `<name> <value>` per line (blank lines and lines that
start with '#' are ignored). Names ending in `_f` are floats: equal when
math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6) (a NaN never is). Every other
value is an integer or hex checksum and must be the same text. Both files must
name the same keys, each once, and name at least one.

--across-backends: the two runs computed the target forward differently
(--device cuda with cuBLAS, --device cpu with the CPU model), so their hidden
states agree in value, not in bits:
  *_digest                hashes of the hidden states' bits: not compared;
  *_layout                every integer field of a step: exact, as ever;
  *_hidden_abs_f / *_hidden_sq_f   sum |h|, sum h^2 of a step: rel 1e-4;
  loss<i>_f, initial_loss_f, final_loss_f   the loss curve: rel 1e-4;
  other *_f               rel 1e-5 / abs 1e-6.
Why 1e-4: the GPU forward is within 1e-4 of the CPU model per element
(tests/examples/test_target_forward_gpu.cpp, typically ~5e-6); on the CPU,
adding noise of 1e-4 to every hidden state moved the 300-step loss curve of
seed 7 by at most 1.6e-5 relative (1e-5 noise: 1.8e-6; the drafter does not
amplify it), and sum |h| by 1e-6. A wrong row or document shifts these by
1e-2 and more. Files without *_layout lines are malformed here (a binary that
writes no cross-backend results would otherwise compare nothing).

Exit 0: equal; 1: a value differs or a key is missing; 2: usage error or a
malformed / empty file. The last line printed is one summary line.

usage: compare_results.py [--across-backends] EXPECTED ACTUAL   (EXPECTED = cpu, ACTUAL = cuda)
"""
import math
import re
import sys

REL_TOL, ABS_TOL = 1e-5, 1e-6
ACROSS_REL_TOL = 1e-4  # --across-backends: hidden-state sums and the loss curve
ACROSS_CLOSE = re.compile(r"(_hidden_(abs|sq)_f|^loss[0-9]+_f|^(initial|final)_loss_f)$")
INTEGER = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|[0-9a-fA-F]+)$")


class Malformed(Exception):
    pass


def load(path):
    values = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise Malformed(f"{path}: {e.strerror}")
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = text.split()
        if len(parts) != 2:
            raise Malformed(f"{path}:{number}: expected '<name> <value>', got {line!r}")
        name, value = parts
        if name in values:
            raise Malformed(f"{path}:{number}: {name} appears twice")
        if name.endswith("_f"):
            try:
                float(value)
            except ValueError:
                raise Malformed(f"{path}:{number}: {name} is not a float: {value!r}")
        elif not INTEGER.match(value):
            raise Malformed(f"{path}:{number}: {name} is not an integer or hex checksum: {value!r}")
        values[name] = value
    if not values:
        raise Malformed(f"{path}: no results in the file")
    return values


def main(argv):
    across = len(argv) == 4 and argv[1] == "--across-backends"
    if across:
        argv = argv[:1] + argv[2:]
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        expected, actual = load(argv[1]), load(argv[2])
        if across:
            for path, values in ((argv[1], expected), (argv[2], actual)):
                if not any(k.endswith("_layout") for k in values):
                    raise Malformed(f"{path}: no step<N>_layout lines to compare across backends")
    except Malformed as e:
        print(f"MALFORMED: {e}")
        return 2
    problems = []
    for name in sorted(expected.keys() - actual.keys()):
        problems.append(f"{name}: only in {argv[1]}")
    for name in sorted(actual.keys() - expected.keys()):
        problems.append(f"{name}: only in {argv[2]}")
    ints = floats = skipped = 0
    worst_abs = worst_rel = 0.0
    for name in sorted(expected.keys() & actual.keys()):
        a, b = expected[name], actual[name]
        if across and name.endswith("_digest"):
            skipped += 1
            continue
        if name.endswith("_f"):
            floats += 1
            x, y = float(a), float(b)
            rel = ACROSS_REL_TOL if across and ACROSS_CLOSE.search(name) else REL_TOL
            if not math.isclose(x, y, rel_tol=rel, abs_tol=ABS_TOL):
                problems.append(f"{name}: {a} vs {b} (float, rel {rel:g} / abs {ABS_TOL:g})")
            elif x != y:
                worst_abs = max(worst_abs, abs(x - y))
                worst_rel = max(worst_rel, abs(x - y) / max(abs(x), abs(y)))
        else:
            ints += 1
            if a != b:
                problems.append(f"{name}: {a} vs {b} (exact)")
    for p in problems:
        print(f"MISMATCH {p}")
    tolerance = f"floats: rel {REL_TOL:g} / abs {ABS_TOL:g}"
    within = f"rel {REL_TOL:g} / abs {ABS_TOL:g}"
    if across:
        tolerance = f"across backends: hidden sums and losses rel {ACROSS_REL_TOL:g}, other floats rel {REL_TOL:g} / abs {ABS_TOL:g}"
        within = f"rel {ACROSS_REL_TOL:g} (hidden sums, losses) / {REL_TOL:g} (others)"
    if problems:
        print(f"{len(problems)} mismatch(es) among {ints} exact and {floats} float values ({tolerance})")
        return 1
    not_compared = f", {skipped} bitwise digests not compared" if across else ""
    print(f"{ints} exact values identical, {floats} floats within {within} "
          f"(largest diff: abs {worst_abs:.2g}, rel {worst_rel:.2g}){not_compared}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
