#!/usr/bin/env python3
"""Compares two --results files of the dflash example (the --device cuda run
against the --device cpu run of the same seed).

A results file has one `<name> <value>` per line (blank lines and lines that
start with '#' are ignored). Names ending in `_f` are floats: equal when
math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6) (a NaN never is). Every other
value is an integer or hex checksum and must be the same text. Both files must
name the same keys, each once, and name at least one.

Exit 0: equal; 1: a value differs or a key is missing; 2: usage error or a
malformed / empty file. The last line printed is one summary line.

usage: compare_results.py EXPECTED ACTUAL   (EXPECTED = cpu, ACTUAL = cuda)
"""
import math
import re
import sys

REL_TOL, ABS_TOL = 1e-5, 1e-6
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
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        expected, actual = load(argv[1]), load(argv[2])
    except Malformed as e:
        print(f"MALFORMED: {e}")
        return 2
    problems = []
    for name in sorted(expected.keys() - actual.keys()):
        problems.append(f"{name}: only in {argv[1]}")
    for name in sorted(actual.keys() - expected.keys()):
        problems.append(f"{name}: only in {argv[2]}")
    ints = floats = 0
    worst_abs = worst_rel = 0.0
    for name in sorted(expected.keys() & actual.keys()):
        a, b = expected[name], actual[name]
        if name.endswith("_f"):
            floats += 1
            x, y = float(a), float(b)
            if not math.isclose(x, y, rel_tol=REL_TOL, abs_tol=ABS_TOL):
                problems.append(f"{name}: {a} vs {b} (float, rel 1e-5 / abs 1e-6)")
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
    if problems:
        print(f"{len(problems)} mismatch(es) among {ints} exact and {floats} float values ({tolerance})")
        return 1
    print(f"{ints} exact values identical, {floats} floats within rel {REL_TOL:g} / abs {ABS_TOL:g} "
          f"(largest diff: abs {worst_abs:.2g}, rel {worst_rel:.2g})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
