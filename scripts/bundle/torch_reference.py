#!/usr/bin/env python3
"""dflash ops against a reference nobody here wrote: PyTorch, from the same inputs.

   torch_reference.py --driver BIN --device cuda|cpu [--seed N] [--cases N]
   torch_reference.py --driver BIN --reference python [--seed N]   (no torch: the
                      same checks against a plain-Python reference)
   torch_reference.py --driver BIN --self-test   (plants wrong outputs; each must be caught)

BIN is an ops driver (tests/torch_reference/ops_driver.hpp: dflash_ops_driver runs the
host twins, dflash_ops_driver_gpu dflash::ops::gpu). Random cases, seeded (the seed is
printed; --seed repeats a run), plus fixed edge cases: empty documents, one-token
documents, lengths that end exactly at the sequence end, and the int32 limits the ops
accept (block sizes and tiles of INT32_MAX, a window of INT32_MAX, seq = 2^20 - 1, a
64-bit seed). The reference computes what a DFlash training script computes with torch:

  doc ids     torch.repeat_interleave(arange(D), lengths); pos = arange(T) -
              repeat_interleave(starts, lengths)
  packing     padded[arange(seq) < lengths[:, None]] (boolean-mask indexing); unpacking
              the inverse scatter into zeros; cu_seqlens = pad(cumsum(lengths), (1, 0))
  anchors     the draw is random, so its deterministic parts: the candidate set
              (p + block <= seq_len, loss_mask[p], doc[p + block - 1] == doc[p]),
              keep = min(num_anchors, candidates) ones then zeros, chosen anchors
              strictly increasing and all candidates, unused slots 0
  block mask  given the anchors the op chose: the dense mask from its definition
              (docs/dflash-reference: kv < anchor, same document, within the window;
              own block bidirectional; nothing for invalid blocks), tiles classified
              from it (flex-attention BlockMask: kv_num_blocks, kv_indices, full_*), and
              the op's mask expanded to dense by its own rule, element for element
  read-back   .item() of each scalar (lengths.sum(), packed.sum(), keep.sum(),
              (mask != 0).sum(), kv_num_blocks.sum(), ...) against the driver's ONE
              batched read-back per case
  weights     exp(-(k-1)/7) for slots k >= 1, 0 for slot 0

Exact: every integer, every bit of packed/unpacked f32 and bf16 (packing is a copy).
Stated tolerances: packed_sum (an f32 sum, order differs) |d - r| <= 1e-5 * sum|x| + 1e-30;
slot weights |d - r| <= 1e-6 * |r|.
Exit 0: every check passed; 1: a mismatch or a driver failure; 77: skipped (torch not
importable: "skipped: torch not importable", or the driver found no device and strict
mode is off). Never a pass for what did not run.
"""
import argparse
import math
import os
import random
import struct
import subprocess
import sys
import time

INT32_MAX = 2**31 - 1
ANCHOR_MAX_SEQ = (1 << 20) - 1
F32_SUM_REL = 1e-5
WEIGHT_REL = 1e-6
GAMMA = 7.0


# ---- cases ------------------------------------------------------------------------------
def f32_bits(rng):
    """A finite float32 (sign, exponent 100..140: about 1e-8 .. 1e4, any mantissa)."""
    return (rng.getrandbits(1) << 31) | (rng.randint(100, 140) << 23) | rng.getrandbits(23)


def bf16_bits(rng):
    return (rng.getrandbits(1) << 15) | (rng.randint(100, 140) << 7) | rng.getrandbits(7)


def rand_lengths(rng, n, hi):
    """n lengths in [0, hi], with empty and one-token documents and the full length common."""
    out = []
    for _ in range(n):
        r = rng.random()
        out.append(0 if r < 0.15 else min(1, hi) if r < 0.3 else hi if r < 0.4 else rng.randint(0, hi))
    return out


def rand_mask(rng, n, density=None):
    d = rng.choice([0.0, 0.3, 0.8, 1.0]) if density is None else density
    return [1 if rng.random() < d else 0 for _ in range(n)]


def pack_case(cid, dtype, batch, seq, hidden, lengths, rng):
    gen = f32_bits if dtype == "f32" else bf16_bits
    return {"kind": "pack", "id": cid, "dtype": dtype, "batch": batch, "seq": seq, "hidden": hidden,
            "lengths": lengths, "padded": [gen(rng) for _ in range(batch * seq * hidden)]}


def anchors_case(cid, batch, seq, block, k, seed, seq_lens, mask, docs):
    return {"kind": "anchors", "id": cid, "batch": batch, "seq": seq, "block": block, "k": k, "seed": seed,
            "seq_lens": seq_lens, "mask": mask, "docs": docs}


def chain_case(cid, lengths, block, k, seed, window, tile, mask):
    return {"kind": "chain", "id": cid, "lengths": lengths, "block": block, "k": k, "seed": seed,
            "window": window, "tile": tile, "mask": mask}


def padded_docs(rng, batch, seq, seq_lens):
    """Per row: non-decreasing ids over the valid prefix (documents of random lengths), padding
    repeats the last id."""
    docs = []
    for b in range(batch):
        row, d = [], rng.randint(0, 3)
        for s in range(seq):
            if s < seq_lens[b] and s > 0 and rng.random() < 0.08:
                d += rng.randint(1, 2)
            row.append(d)
        docs += row
    return docs


def make_cases(seed, n_random):
    rng = random.Random(seed)
    cases = []
    nid = iter(range(10**9))

    def cid(tag):
        return "%s%d" % (tag, next(nid))

    # Fixed edge cases.
    cases.append(pack_case(cid("p"), "f32", 0, 5, 3, [], rng))                       # no sequence
    cases.append(pack_case(cid("p"), "f32", 3, 4, 1, [0, 0, 0], rng))                # nothing valid
    cases.append(pack_case(cid("p"), "bf16", 3, 4, 2, [4, 1, 4], rng))               # rows end at seq
    cases.append(pack_case(cid("p"), "f32", 1, 2, 1 << 15, [1], rng))                # wide hidden
    cases.append(pack_case(cid("p"), "bf16", 2, 3, 5, [3, 0], rng))                  # odd, 2-byte rows
    cases.append(anchors_case(cid("a"), 2, 40, INT32_MAX, 3, 2**64 - 1, [40, 7], [1] * 80, []))
    cases.append(anchors_case(cid("a"), 1, 40, INT32_MAX - 1, 3, 5, [40], [1] * 40, [0] * 40))
    cases.append(anchors_case(cid("a"), 1, 16, 16, 4, 9, [16], [1] * 16, []))        # one block, at the end
    cases.append(anchors_case(cid("a"), 3, 20, 4, 50, 3, [20, 0, 4], [1] * 60, []))  # more slots than candidates
    cases.append(anchors_case(cid("a"), 2, 10, 3, 0, 1, [10, 10], [1] * 20, []))     # no slots
    cases.append(anchors_case(cid("a"), 0, 10, 3, 4, 1, [], [], []))                 # no rows
    m = rand_mask(rng, ANCHOR_MAX_SEQ, 0.5)
    m[ANCHOR_MAX_SEQ - 16] = 1
    cases.append(anchors_case(cid("a"), 1, ANCHOR_MAX_SEQ, 16, 512, 2**63 + 1, [ANCHOR_MAX_SEQ], m, []))
    lens = [0, 1, 0, 17, 1, 16, 0]
    cases.append(chain_case(cid("c"), lens, 16, 4, 7, 0, (INT32_MAX, INT32_MAX), [1] * sum(lens)))
    cases.append(chain_case(cid("c"), lens, 16, 4, 7, INT32_MAX, (INT32_MAX - 1, 7), [1] * sum(lens)))
    cases.append(chain_case(cid("c"), [1, 1, 1], 1, 5, 2, 1, (1, 1), [1, 0, 1]))    # one-token documents
    cases.append(chain_case(cid("c"), [], 4, 3, 1, 0, (16, 16), []))                 # no tokens at all
    cases.append(chain_case(cid("c"), [0, 0], 4, 0, 1, 0, (16, 16), []))             # no blocks

    for i in range(n_random):
        kind = i % 3
        if kind == 0:
            batch = rng.randint(0, 6)
            seq = rng.randint(0, 40)
            hidden = rng.choice([1, 2, 3, 4, 8, 16, 33])
            cases.append(pack_case(cid("p"), rng.choice(["f32", "bf16"]), batch, seq, hidden,
                                   rand_lengths(rng, batch, seq), rng))
        elif kind == 1:
            batch = rng.randint(1, 4)
            seq = rng.randint(0, 300)
            block = rng.choice([1, 2, 4, 8, 16, rng.randint(1, 40)])
            seq_lens = rand_lengths(rng, batch, seq)
            docs = padded_docs(rng, batch, seq, seq_lens) if rng.random() < 0.6 else []
            cases.append(anchors_case(cid("a"), batch, seq, block, rng.randint(0, 40), rng.getrandbits(64),
                                      seq_lens, rand_mask(rng, batch * seq), docs))
        else:
            lens = rand_lengths(rng, rng.randint(0, 10), rng.choice([1, 8, 40, 120]))
            block = rng.choice([1, 2, 4, 8, 16])
            k = rng.randint(0, 24)
            window = rng.choice([0, 0, 1, 5, 64, INT32_MAX])
            tile = rng.choice([(128, 128), (16, 64), (1, 1), (5, 300), (INT32_MAX, INT32_MAX), (INT32_MAX - 1, 7)])
            cases.append(chain_case(cid("c"), lens, block, k, rng.getrandbits(64), window, tile,
                                    rand_mask(rng, sum(lens))))
    return cases


def driver_input(cases):
    out = []
    for c in cases:
        if c["kind"] == "pack":
            head = ["pack", c["id"], c["dtype"], c["batch"], c["seq"], c["hidden"]]
            out.append(" ".join(map(str, head + c["lengths"] + c["padded"])))
        elif c["kind"] == "anchors":
            head = ["anchors", c["id"], c["batch"], c["seq"], c["block"], c["k"], c["seed"], 1 if c["docs"] else 0]
            out.append(" ".join(map(str, head + c["seq_lens"] + c["mask"] + c["docs"])))
        else:
            head = ["chain", c["id"], len(c["lengths"]), c["block"], c["k"], c["seed"], c["window"],
                    c["tile"][0], c["tile"][1]]
            out.append(" ".join(map(str, head + c["lengths"] + c["mask"])))
    return "\n".join(out) + "\n"


def parse_driver_output(text):
    """{case id: {name: value}}; arrays are lists, dense is (rows, cols, str), readback is
    {name: (type, value)}, error is the message. Raises ValueError on a malformed line."""
    res, done = {}, None
    for n, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        parts = line.split(" ")
        if parts[0] == "done":
            done = int(parts[1])
            continue
        if len(parts) < 3:
            raise ValueError("line %d: %r" % (n, line[:80]))
        cid, name = parts[0], parts[1]
        r = res.setdefault(cid, {})
        if name == "error":
            r["error"] = " ".join(parts[2:])
        elif name == "dense":
            r["dense"] = (int(parts[2]), int(parts[3]), "" if parts[4] == "-" else parts[4])
        elif name == "readback":
            t, v = parts[3], parts[4]
            r.setdefault("readback", {})[parts[2]] = (t, float(v) if t == "f32" else int(v))
        else:
            count = int(parts[2])
            vals = [int(x) for x in parts[3:]]
            if len(vals) != count:
                raise ValueError("line %d: %s %s says %d values, has %d" % (n, cid, name, count, len(vals)))
            r[name] = vals
    if done is None:
        raise ValueError("no 'done' line: the driver stopped early")
    return res, done


# ---- the two references: torch, and plain Python for the self-check ------------------------
def to_f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def tiles_from_dense(dense_rows, q, kvn, tq, tkv):
    """Plain Python: tile kinds from a dense 0/1 matrix given as a list of row strings."""
    nqt = -(-q // tq) if q else 0
    nkt = -(-kvn // tkv) if kvn else 0
    cnt = [[0] * nkt for _ in range(nqt)]
    for r in range(q):
        row = dense_rows[r]
        cr = cnt[r // tq]
        for c in range(kvn):
            if row[c] == "1":
                cr[c // tkv] += 1
    return tile_lists(cnt, q, kvn, tq, tkv)


def tile_lists(cnt, q, kvn, tq, tkv):
    nqt, nkt = len(cnt), (len(cnt[0]) if cnt else (-(-kvn // tkv) if kvn else 0))
    part_n, part_i, full_n, full_i = [], [], [], []
    for qt in range(nqt):
        rows = min(q, (qt + 1) * tq) - qt * tq
        p, f = [], []
        for kt in range(nkt):
            cols = min(kvn, (kt + 1) * tkv) - kt * tkv
            c = cnt[qt][kt]
            if c == rows * cols and c > 0:
                f.append(kt)
            elif c > 0:
                p.append(kt)
        part_n.append(len(p))
        full_n.append(len(f))
        part_i += p + [0] * (nkt - len(p))
        full_i += f + [0] * (nkt - len(f))
    return part_n, part_i, full_n, full_i


class PythonRef:
    """The same definitions in plain Python: used where torch is absent, to check the
    comparison, the driver's I/O and the case generator (never as the torch reference)."""
    name = "python"

    def doc_ids(self, lengths):
        doc, pos = [], []
        for d, n in enumerate(lengths):
            doc += [d] * n
            pos += list(range(n))
        return doc, pos

    def pack(self, c):
        batch, seq, h = c["batch"], c["seq"], c["hidden"]
        x, packed, cu = c["padded"], [], [0]
        unpacked = [0] * len(x)
        for b in range(batch):
            n = c["lengths"][b] * h
            packed += x[b * seq * h: b * seq * h + n]
            unpacked[b * seq * h: b * seq * h + n] = x[b * seq * h: b * seq * h + n]
            cu.append(cu[-1] + c["lengths"][b])
        s = None
        if c["dtype"] == "f32":
            s = (struct.unpack("<f", struct.pack("<f", math.fsum(to_f32(v) for v in packed)))[0],
                 math.fsum(abs(to_f32(v)) for v in packed))
        return cu, packed, unpacked, cu[-1], s

    def candidates(self, batch, seq, block, seq_lens, mask, docs):
        out = []
        for b in range(batch):
            row = []
            for p in range(seq):
                if p + block <= seq_lens[b] and mask[b * seq + p] and (
                        not docs or docs[b * seq + p + block - 1] == docs[b * seq + p]):
                    row.append(p)
            out.append(row)
        return out, sum(1 for v in mask if v)

    def dense_mask(self, S, N, B, window, doc, anchors, keep):
        rows = []
        for q in range(N * B):
            i = q // B
            row = ["0"] * (S + N * B)
            if keep[i]:
                a = anchors[i]
                for kv in range(S):
                    if kv < a and doc[kv] == doc[a] and (window == 0 or kv >= a - window):
                        row[kv] = "1"
                for kv in range(S + i * B, S + (i + 1) * B):
                    row[kv] = "1"
            rows.append("".join(row))
        return rows

    def tiles(self, rows, q, kvn, tile):
        return tiles_from_dense(rows, q, kvn, tile[0], tile[1])

    def slot_weights(self, B):
        return [0.0] + [struct.unpack("<f", struct.pack("<f", math.exp(-(k - 1) / GAMMA)))[0] for k in range(1, B)]

    def item_sum(self, v):
        return sum(v)


class TorchRef:
    name = "torch"

    def __init__(self, torch, device):
        self.t, self.dev = torch, device

    def tensor(self, v, dtype=None):
        return self.t.tensor(v, dtype=dtype or self.t.int64, device=self.dev)

    def doc_ids(self, lengths):
        t = self.t
        L = self.tensor(lengths)
        doc = t.repeat_interleave(t.arange(len(lengths), device=self.dev), L)
        starts = t.cumsum(L, 0) - L
        pos = t.arange(int(L.sum().item()), device=self.dev) - t.repeat_interleave(starts, L)
        return doc.tolist(), pos.tolist()

    def pack(self, c):
        t = self.t
        batch, seq, h = c["batch"], c["seq"], c["hidden"]
        if c["dtype"] == "f32":
            ibits, fdt, wrap = t.int32, t.float32, 1 << 32
        else:
            ibits, fdt, wrap = t.int16, t.bfloat16, 1 << 16
        signed = [v - wrap if v >= wrap // 2 else v for v in c["padded"]]
        padded = self.tensor(signed, ibits).view(fdt).reshape(batch, seq, h)
        L = self.tensor(c["lengths"])
        valid = t.arange(seq, device=self.dev)[None, :] < L[:, None]
        packed = padded[valid]                                   # [tokens, hidden]
        unpacked = t.zeros_like(padded)
        unpacked[valid] = packed
        cu = t.cat([t.zeros(1, dtype=t.int64, device=self.dev), t.cumsum(L, 0)])
        bits = lambda x: [v % wrap for v in x.reshape(-1).view(ibits).tolist()]
        s = None
        if c["dtype"] == "f32":
            s = (packed.sum().item(), packed.abs().double().sum().item())
        return cu.tolist(), bits(packed), bits(unpacked), L.sum().item(), s

    def candidates(self, batch, seq, block, seq_lens, mask, docs):
        t = self.t
        if batch == 0 or seq == 0:
            return [[] for _ in range(batch)], 0
        p = t.arange(seq, device=self.dev)
        m = self.tensor(mask, t.uint8).reshape(batch, seq) != 0
        cand = ((p[None, :] + block) <= self.tensor(seq_lens)[:, None]) & m
        if docs:
            d = self.tensor(docs).reshape(batch, seq)
            end = (p + block - 1).clamp(max=seq - 1)[None, :].expand(batch, seq).contiguous()
            cand &= d.gather(1, end) == d
        return [t.nonzero(cand[b]).flatten().tolist() for b in range(batch)], m.sum().item()

    def dense_mask(self, S, N, B, window, doc, anchors, keep):
        t = self.t
        Q, KV = N * B, S + N * B
        if Q == 0:
            return []
        q = t.arange(Q, device=self.dev)
        i = q // B
        k = self.tensor(keep)[i] != 0
        kv = t.arange(KV, device=self.dev)
        own = (kv[None, :] >= S) & (t.div(kv[None, :] - S, B, rounding_mode="floor") == i[:, None])
        if S > 0:
            a = self.tensor(anchors)[i].clamp(0, S - 1)
            d = self.tensor(doc)
            dkv = d[kv.clamp(max=S - 1)]
            ctx = (kv[None, :] < S) & (kv[None, :] < a[:, None]) & (dkv[None, :] == d[a][:, None])
            if window > 0:
                ctx &= kv[None, :] >= (a - window)[:, None]
            allowed = (ctx | own) & k[:, None]
        else:
            allowed = own & k[:, None]
        self._dense = allowed
        return ["".join("1" if v else "0" for v in row) for row in allowed.to(t.uint8).tolist()]

    def tiles(self, rows, q, kvn, tile):
        """Tile counts from the dense torch tensor of dense_mask (index_add over tile ids)."""
        t = self.t
        tq, tkv = tile
        nqt = -(-q // tq) if q else 0
        nkt = -(-kvn // tkv) if kvn else 0
        if nqt == 0:
            return [], [], [], []
        dense = self._dense.to(t.float64)
        col_tile = t.arange(kvn, device=self.dev) // tkv
        row_tile = t.arange(q, device=self.dev) // tq
        per_row = t.zeros(q, nkt, dtype=t.float64, device=self.dev).index_add_(1, col_tile, dense)
        cnt = t.zeros(nqt, nkt, dtype=t.float64, device=self.dev).index_add_(0, row_tile, per_row)
        return tile_lists([[int(v) for v in r] for r in cnt.tolist()], q, kvn, tq, tkv)

    def slot_weights(self, B):
        t = self.t
        k = t.arange(B, device=self.dev, dtype=t.float32)
        w = t.exp(-(k - 1) / GAMMA)
        w[0] = 0
        return w.tolist()

    def item_sum(self, v):
        return self.tensor(v).sum().item() if v else 0


# ---- comparison ---------------------------------------------------------------------------
class Checker:
    def __init__(self):
        self.mismatches = []
        self.counts = {}

    def bad(self, cid, what, msg):
        self.mismatches.append("%s %s: %s" % (cid, what, msg))

    def ok(self, op):
        self.counts[op] = self.counts.get(op, 0) + 1

    def exact(self, cid, name, got, want):
        if got is None:
            self.bad(cid, name, "missing from the driver's output")
            return False
        if len(got) != len(want):
            self.bad(cid, name, "%d values, reference has %d" % (len(got), len(want)))
            return False
        for j, (g, w) in enumerate(zip(got, want)):
            if g != w:
                self.bad(cid, name, "[%d] driver %r vs reference %r" % (j, g, w))
                return False
        return True

    def readback(self, cid, out, name, want, tol=None):
        rb = out.get("readback", {})
        if name not in rb:
            self.bad(cid, "readback " + name, "missing from the driver's output")
            return False
        got = rb[name][1]
        if tol is None:
            if got != want:
                self.bad(cid, "readback " + name, "driver %r vs reference .item() %r" % (got, want))
                return False
        elif not abs(got - want) <= tol:
            self.bad(cid, "readback " + name, "driver %r vs reference .item() %r (tolerance %.3g)" % (got, want, tol))
            return False
        return True

    def anchors(self, cid, got_a, got_k, cands, k):
        """The deterministic parts of a random draw, row by row."""
        if got_a is None or got_k is None:
            self.bad(cid, "anchors", "missing from the driver's output")
            return False
        rows = len(cands)
        if len(got_a) != rows * k or len(got_k) != rows * k:
            self.bad(cid, "anchors", "%d anchors / %d keep, want %d each" % (len(got_a), len(got_k), rows * k))
            return False
        for b, cand in enumerate(cands):
            n = min(k, len(cand))
            a, kp = got_a[b * k:(b + 1) * k], got_k[b * k:(b + 1) * k]
            if kp != [1] * n + [0] * (k - n):
                self.bad(cid, "keep", "row %d: %s..., want %d ones then zeros (%d candidates)" % (b, kp[:12], n, len(cand)))
                return False
            if any(x != 0 for x in a[n:]):
                self.bad(cid, "anchors", "row %d: an unused slot is not 0: %s" % (b, a[n:][:12]))
                return False
            if any(a[j] >= a[j + 1] for j in range(n - 1)):
                self.bad(cid, "anchors", "row %d: not strictly increasing: %s" % (b, a[:n][:12]))
                return False
            cs = set(cand)
            wrong = [x for x in a[:n] if x not in cs]
            if wrong:
                self.bad(cid, "anchors", "row %d: %s are not candidates" % (b, wrong[:8]))
                return False
        return True

    def dense(self, cid, got, rows, cols, want_rows):
        if got is None:
            self.bad(cid, "dense", "missing from the driver's output")
            return False
        gr, gc, s = got
        if (gr, gc) != (rows, cols):
            self.bad(cid, "dense", "%d x %d, want %d x %d" % (gr, gc, rows, cols))
            return False
        want = "".join(want_rows)
        if s != want:
            j = next(j for j in range(min(len(s), len(want)) + 1) if j >= len(s) or j >= len(want) or s[j] != want[j])
            self.bad(cid, "dense", "q %d kv %d: driver %s vs reference %s" % (
                j // max(cols, 1), j % max(cols, 1), s[j:j + 1] or "end", want[j:j + 1] or "end"))
            return False
        return True


def check_case(ck, ref, c, out):
    cid = c["id"]
    if out is None:
        ck.bad(cid, c["kind"], "no output for this case")
        return
    if "error" in out:
        ck.bad(cid, c["kind"], "the op threw: " + out["error"])
        return
    if c["kind"] == "pack":
        cu, packed, unpacked, tokens, s = ref.pack(c)
        op = "pack " + c["dtype"]
        good = ck.exact(cid, "cu_seqlens", out.get("cu_seqlens"), cu)
        good &= ck.exact(cid, "packed", out.get("packed"), packed)
        good &= ck.exact(cid, "unpacked", out.get("unpacked"), unpacked)
        good &= ck.readback(cid, out, "tokens", tokens)
        if s is not None:
            good &= ck.readback(cid, out, "packed_sum", s[0], F32_SUM_REL * s[1] + 1e-30)
        if good:
            ck.ok(op)
    elif c["kind"] == "anchors":
        cands, loss = ref.candidates(c["batch"], c["seq"], c["block"], c["seq_lens"], c["mask"], c["docs"])
        good = ck.anchors(cid, out.get("anchors"), out.get("keep"), cands, c["k"])
        if good:
            good &= ck.readback(cid, out, "kept", ref.item_sum(out["keep"]))
        good &= ck.readback(cid, out, "loss_tokens", loss)
        if good:
            ck.ok("anchors (batch)")
    else:
        doc, pos = ref.doc_ids(c["lengths"])
        good = ck.exact(cid, "doc_id", out.get("doc_id"), doc) & ck.exact(cid, "pos", out.get("pos"), pos)
        if good:
            ck.ok("doc_ids")
        S, k, B = len(doc), c["k"], c["block"]
        cands, loss = ref.candidates(1, S, B, [S], c["mask"], doc)
        if ck.anchors(cid, out.get("anchors"), out.get("keep"), cands, k) & ck.readback(cid, out, "loss_tokens", loss) \
                & ck.readback(cid, out, "kept", sum(min(k, len(r)) for r in cands)):
            ck.ok("anchors (packed)")
        else:
            return  # the mask is defined by valid anchors
        rows = ref.dense_mask(S, k, B, c["window"], doc, out["anchors"], out["keep"])
        pn, pi, fn, fi = ref.tiles(rows, k * B, S + k * B, c["tile"])
        good = ck.exact(cid, "kv_num_blocks", out.get("kv_num_blocks"), pn)
        good &= ck.exact(cid, "kv_indices", out.get("kv_indices"), pi)
        good &= ck.exact(cid, "full_kv_num_blocks", out.get("full_kv_num_blocks"), fn)
        good &= ck.exact(cid, "full_kv_indices", out.get("full_kv_indices"), fi)
        good &= ck.readback(cid, out, "partial_tiles", sum(pn)) & ck.readback(cid, out, "full_tiles", sum(fn))
        if good:
            ck.ok("block mask (tiles)")
        if ck.dense(cid, out.get("dense"), k * B, S + k * B, rows):
            ck.ok("block mask (dense)")
        w = ref.slot_weights(B)
        got = [to_f32(v) for v in out.get("slot_weights", [])]
        if len(got) != len(w):
            ck.bad(cid, "slot_weights", "%d values, want %d" % (len(got), len(w)))
        elif any(not abs(g - r) <= WEIGHT_REL * abs(r) for g, r in zip(got, w)):
            j = next(j for j, (g, r) in enumerate(zip(got, w)) if not abs(g - r) <= WEIGHT_REL * abs(r))
            ck.bad(cid, "slot_weights", "[%d] driver %r vs reference %r (rel %g)" % (j, got[j], w[j], WEIGHT_REL))
        else:
            ck.ok("slot weights")


def run_driver(driver, cases, timeout):
    try:
        p = subprocess.run([driver], input=driver_input(cases), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "the driver timed out after %d s" % timeout, 1
    except OSError as e:
        return None, "cannot run the driver: %s" % e, 1
    if p.returncode != 0:
        msg = (p.stderr.strip() or p.stdout.strip()).splitlines()
        return None, (msg[-1] if msg else "no output"), p.returncode
    try:
        return parse_driver_output(p.stdout), None, 0
    except ValueError as e:
        return None, "malformed driver output: %s" % e, 1


def compare(ref, cases, results):
    ck = Checker()
    for c in cases:
        check_case(ck, ref, c, results.get(c["id"]))
    return ck


# ---- self-test: wrong outputs must be caught ----------------------------------------------
PLANTS = [  # (case kind, output, what to do); each must produce a mismatch naming the output
    ("chain", "doc_id", "bump"), ("chain", "pos", "bump"), ("pack", "cu_seqlens", "bump"),
    ("pack", "packed", "flip"), ("pack", "unpacked", "pad"), ("anchors", "keep", "flip"),
    ("anchors", "anchors", "swap"), ("anchors", "anchors", "noncand"), ("chain", "kv_indices", "bump"),
    ("chain", "full_kv_num_blocks", "bump"), ("chain", "dense", "flip"), ("chain", "slot_weights", "exp"),
    ("pack", "readback tokens", "bump"), ("pack", "readback packed_sum", "scale"),
    ("anchors", "readback loss_tokens", "bump"), ("chain", "readback partial_tiles", "bump"),
]


def plant(c, out, name, how):
    """Mutates out (one case's outputs) in place; False when this case cannot show the fault."""
    if name.startswith("readback "):
        rb = out.get("readback", {})
        key = name.split(" ", 1)[1]
        if key not in rb:
            return False
        t, v = rb[key]
        rb[key] = (t, v * (1 + 1e-3) + 1e-3 if how == "scale" else v + 1)
        return True
    if name == "dense":
        r, cc, s = out.get("dense", (0, 0, ""))
        if not s:
            return False
        j = len(s) // 2
        out["dense"] = (r, cc, s[:j] + ("0" if s[j] == "1" else "1") + s[j + 1:])
        return True
    v = out.get(name)
    if not v:
        return False
    if how == "bump":
        v[len(v) // 2] += 1
    elif how == "flip":
        v[len(v) // 2] ^= 1
    elif how == "exp":  # a float32 off by far more than its tolerance (one exponent bit)
        v[-1] ^= 1 << 23
    elif how == "pad":  # a padding element that should be zero
        h, seq = c["hidden"], c["seq"]
        for b, L in enumerate(c["lengths"]):
            if L < seq:
                v[(b * seq + L) * h] = 0x3F800000 if c["dtype"] == "f32" else 0x3F80
                return True
        return False
    elif how == "swap":  # two chosen anchors out of order
        k = c["k"]
        for b in range(c["batch"]):
            kp = out["keep"][b * k:(b + 1) * k]
            if sum(kp) >= 2:
                v[b * k], v[b * k + 1] = v[b * k + 1], v[b * k]
                return True
        return False
    elif how == "noncand":  # a chosen anchor that is not a candidate (past the row's end)
        k = c["k"]
        for b in range(c["batch"]):
            if out["keep"][b * k:(b + 1) * k].count(1) >= 1 and c["seq"] > 0:
                n = out["keep"][b * k:(b + 1) * k].count(1)
                v[b * k + n - 1] = c["seq"]  # > every position, so still increasing
                return True
        return False
    return True


def self_test(ref, cases, results):
    ck = compare(ref, cases, results)
    if ck.mismatches:
        print("self-test: the clean run has mismatches:")
        for m in ck.mismatches[:10]:
            print("  MISMATCH " + m)
        return 1
    print("self-test: clean run: %d cases, no mismatch" % len(cases))
    missed = 0
    for kind, name, how in PLANTS:
        for c in cases:
            if c["kind"] != kind:
                continue
            out = {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
                   for k, v in results[c["id"]].items()}
            if not plant(c, out, name, how):
                continue
            ck = Checker()
            check_case(ck, ref, c, out)
            field = name
            hit = [m for m in ck.mismatches if (" " + field + ":") in m or ("%s %s" % (c["id"], field)) in m]
            print("  planted %-28s %-8s in %-5s -> %s" % (name, how, c["id"],
                                                       hit[0] if hit else "NOT CAUGHT (%s)" % ck.mismatches[:1]))
            missed += 0 if hit else 1
            break
        else:
            print("  planted %-28s %-8s: no case to plant it in" % (name, how))
            missed += 1
    if missed:
        print("self-test: FAIL: %d planted faults not caught" % missed)
        return 1
    print("self-test: PASS: all %d planted faults caught" % len(PLANTS))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", required=True, help="ops driver binary (dflash_ops_driver[_gpu])")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="torch device of the reference")
    ap.add_argument("--reference", choices=["torch", "python"], default="torch")
    ap.add_argument("--self-test", action="store_true", help="plain-Python reference; planted faults must be caught")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cases", type=int, default=90, help="random cases (besides the fixed edge cases)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds the driver may take")
    a = ap.parse_args()
    if a.cases < 0 or a.timeout <= 0:
        ap.error("--cases must be >= 0 and --timeout > 0")
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    ref = PythonRef()
    if a.reference == "torch" and not a.self_test:
        try:
            import torch
        except ImportError as e:
            print("skipped: torch not importable (%s)" % e)
            return 77
        if a.device == "cuda" and not torch.cuda.is_available():
            print("FAIL: torch.cuda.is_available() is False: no GPU reference (torch %s)" % torch.__version__)
            return 1
        ref = TorchRef(torch, a.device)
        print("reference: torch %s on %s%s" % (torch.__version__, a.device,
              " (%s)" % torch.cuda.get_device_name(0) if a.device == "cuda" else ""))
    else:
        print("reference: plain Python (not torch)")
    print("seed %d (repeat with --seed %d)" % (seed, seed))
    t0 = time.time()
    cases = make_cases(seed, a.cases)
    parsed, err, rc = run_driver(a.driver, cases, a.timeout)
    if err:
        if rc == 77:
            print("skipped: the driver found no device: %s" % err)
            return 77
        print("FAIL: %s (exit %d)" % (err, rc))
        return 1
    results, done = parsed
    if done != len(cases):
        print("FAIL: the driver ran %d cases of %d" % (done, len(cases)))
        return 1
    if a.self_test:
        return self_test(ref, cases, results)
    ck = compare(ref, cases, results)
    for op in sorted(ck.counts):
        print("  %-22s %4d cases agree" % (op, ck.counts[op]))
    for m in ck.mismatches[:20]:
        print("MISMATCH " + m)
    verdict = "%d cases (%d random), driver %s, %s reference on %s, %.1f s" % (
        len(cases), a.cases, os.path.basename(a.driver), ref.name, a.device if ref.name == "torch" else "cpu",
        time.time() - t0)
    if ck.mismatches:
        print("RESULT: FAIL: %d mismatches; %s; seed %d" % (len(ck.mismatches), verdict, seed))
        return 1
    print("RESULT: PASS: %s; seed %d" % (verdict, seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
