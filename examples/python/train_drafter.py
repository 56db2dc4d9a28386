#!/usr/bin/env python3
"""Trains a small DFlash-style drafter in Python on the hidden states dflash's C++ pipeline makes.

The C++ side (module dflash_pipeline) runs the example's source, target forward and
postprocess and queues the packed hidden states (the HS queue, depth 60); this loop takes
each batch without a copy (DLPack) and runs one drafter step: in PyTorch where torch is
importable, otherwise the same step in NumPy. The loop is the pipeline's "drafter" stage, so
the profile printed at the end has its step time beside the C++ stages, and the advisor says
which stage limits throughput.

The drafter: for each anchor a and block slot k = 1 .. block_size-1, predict token a+k from the
target's hidden state at a, the anchor token and the slot, weighted exp(-(k-1)/gamma) as DFlash
weights its block loss. One tanh layer and a softmax: a stand-in for the attention drafter the
C++ example trains, small enough to write twice.

    python3 examples/python/train_drafter.py                     # torch if present, else numpy
    python3 examples/python/train_drafter.py --backend numpy --steps 300 --profile-format json
"""
import argparse
import math
import os
import sys
import time


def import_module():
    try:
        import dflash_pipeline
        return dflash_pipeline
    except ImportError:
        pass
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    where = os.environ.get("DFLASH_PYTHON_PATH", os.path.join(root, "build", "release", "python"))
    sys.path.insert(0, where)
    try:
        import dflash_pipeline
        return dflash_pipeline
    except ImportError as e:
        sys.exit(f"train_drafter.py: cannot import dflash_pipeline from {where} ({e}): build it with "
                 "scripts/setup.sh (it needs pybind11-dev and the Python headers), or point "
                 "DFLASH_PYTHON_PATH at the folder that holds it")


def gamma_for(block_size):
    # DFlash recipes: 7 / 5 / 4 for block sizes 16 / 10 / 8; elsewhere block_size / 2.
    return {16: 7.0, 10: 5.0, 8: 4.0}.get(block_size, block_size / 2.0)


def targets(tokens, loss_mask, anchors, keep, block_size, gamma, np):
    """(anchor rows, slots, target tokens, weights) of one batch's kept blocks."""
    a = anchors[keep.astype(bool)].astype(np.int64)
    k = np.arange(1, block_size, dtype=np.int64)
    rows = (a[:, None] + k[None, :]).reshape(-1)
    anchor_of = np.repeat(a, block_size - 1)
    slot = np.tile(k, a.shape[0])
    ok = rows < tokens.shape[0]
    rows, anchor_of, slot = rows[ok], anchor_of[ok], slot[ok]
    w = loss_mask[rows].astype(np.float32) * np.exp(-(slot - 1) / gamma).astype(np.float32)
    return anchor_of, slot, tokens[rows].astype(np.int64), w


class NumpyDrafter:
    name = "numpy"

    def __init__(self, features, vocab, block_size, width=64, lr=3e-3, seed=0):
        import numpy as np
        self.np = np
        r = np.random.default_rng(seed)
        self.p = {
            "W1": (r.standard_normal((features, width)) / math.sqrt(features)).astype(np.float32),
            "P": (0.1 * r.standard_normal((block_size, width))).astype(np.float32),
            "E": (0.1 * r.standard_normal((vocab, width))).astype(np.float32),
            "W2": (r.standard_normal((width, vocab)) / math.sqrt(width)).astype(np.float32),
            "b2": np.zeros(vocab, np.float32),
        }
        self.m = {k: np.zeros_like(v) for k, v in self.p.items()}
        self.v = {k: np.zeros_like(v) for k, v in self.p.items()}
        self.lr, self.t = lr, 0

    def step(self, hidden, anchor_tok, anchor_of, slot, target, weight):
        np, p = self.np, self.p
        h = hidden[anchor_of]
        z = np.tanh(h @ p["W1"] + p["P"][slot] + p["E"][anchor_tok])
        logits = z @ p["W2"] + p["b2"]
        logits -= logits.max(axis=1, keepdims=True)
        prob = np.exp(logits)
        prob /= prob.sum(axis=1, keepdims=True)
        n = np.arange(target.shape[0])
        wn = weight / weight.sum()
        loss = float(-(wn * np.log(prob[n, target] + 1e-12)).sum())
        acc = float((wn * (prob.argmax(axis=1) == target)).sum())
        d = prob
        d[n, target] -= 1.0
        d *= wn[:, None]
        g = {"W2": z.T @ d, "b2": d.sum(axis=0)}
        dz = (d @ p["W2"].T) * (1.0 - z * z)
        g["W1"] = h.T @ dz
        g["P"] = np.zeros_like(p["P"])
        np.add.at(g["P"], slot, dz)
        g["E"] = np.zeros_like(p["E"])
        np.add.at(g["E"], anchor_tok, dz)
        self.t += 1
        for k in p:  # Adam
            self.m[k] = 0.9 * self.m[k] + 0.1 * g[k]
            self.v[k] = 0.999 * self.v[k] + 0.001 * g[k] * g[k]
            mh = self.m[k] / (1 - 0.9 ** self.t)
            vh = self.v[k] / (1 - 0.999 ** self.t)
            p[k] -= self.lr * mh / (np.sqrt(vh) + 1e-8)
        return loss, acc


class TorchDrafter:
    name = "torch"

    def __init__(self, features, vocab, block_size, width=64, lr=3e-3, seed=0):
        import torch
        self.torch = torch
        torch.manual_seed(seed)
        self.W1 = torch.nn.Linear(features, width, bias=False)
        self.P = torch.nn.Embedding(block_size, width)
        self.E = torch.nn.Embedding(vocab, width)
        self.out = torch.nn.Linear(width, vocab)
        self.params = [*self.W1.parameters(), *self.P.parameters(), *self.E.parameters(), *self.out.parameters()]
        self.opt = torch.optim.Adam(self.params, lr=lr)

    def step(self, hidden, anchor_tok, anchor_of, slot, target, weight):
        torch = self.torch
        hidden = torch.from_dlpack(hidden) if not isinstance(hidden, torch.Tensor) else hidden
        idx = lambda x: torch.as_tensor(x, dtype=torch.long)
        z = torch.tanh(self.W1(hidden[idx(anchor_of)]) + self.P(idx(slot)) + self.E(idx(anchor_tok)))
        logits = self.out(z)
        w = torch.as_tensor(weight)
        wn = w / w.sum()
        t = idx(target)
        loss = (wn * torch.nn.functional.cross_entropy(logits, t, reduction="none")).sum()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        acc = float((wn * (logits.argmax(dim=1) == t)).sum())
        return float(loss), acc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="batches the C++ source makes")
    ap.add_argument("--backend", choices=["auto", "torch", "numpy"], default="auto",
                    help="the drafter step's framework (auto: torch if importable)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="the C++ pipeline's device backend (cpu: the asynchronous host twin)")
    ap.add_argument("--target-workers", type=int, default=2)
    ap.add_argument("--profile-format", choices=["table", "json"], default="table")
    ap.add_argument("--what-if", action="append", default=[], help="a change to predict, e.g. drafter.speed=2")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every batch arrived, the loss went down and the profile has the Python stage")
    args = ap.parse_args()

    dp = import_module()
    import numpy as np
    backend = args.backend
    if backend == "auto":
        try:
            import torch  # noqa: F401
            backend = "torch"
        except ImportError:
            backend = "numpy"

    losses, tokens, t0 = [], 0, time.perf_counter()
    with dp.HiddenStates(steps=args.steps, device=args.device, target_workers=args.target_workers,
                         what_if=args.what_if) as hs:
        make = TorchDrafter if backend == "torch" else NumpyDrafter
        drafter = make(hs.features, hs.vocab, hs.block_size)
        gamma = gamma_for(hs.block_size)
        print(f"train_drafter.py: {args.steps} steps, drafter in {drafter.name}, pipeline on {args.device} "
              f"({hs.features} features, vocab {hs.vocab}, block {hs.block_size})", flush=True)
        for batch in hs:
            if batch.dropped:
                continue
            tok = np.from_dlpack(batch.tokens)  # zero-copy views of the batch's memory
            anchor_of, slot, target, weight = targets(tok, np.from_dlpack(batch.loss_mask),
                                                      np.from_dlpack(batch.anchors), np.from_dlpack(batch.keep),
                                                      hs.block_size, gamma, np)
            if weight.sum() <= 0:
                continue
            hidden = batch.hidden if backend == "torch" else np.from_dlpack(batch.hidden)
            loss, acc = drafter.step(hidden, tok[anchor_of].astype(np.int64), anchor_of, slot, target, weight)
            losses.append(loss)
            tokens += batch.real_tokens
            if len(losses) % 50 == 0:
                rate = tokens / (time.perf_counter() - t0)
                print(f"step {len(losses):5d}  {rate:8.0f} tok/s  loss {loss:.4f}  acc {acc:.3f}", flush=True)
        delivered = hs.delivered
        profile = hs.profile(args.profile_format)
    print("final profile (whole run; 'drafter' is this Python loop):")
    print(profile)
    w = max(1, min(20, len(losses) // 10))
    first = sum(losses[:w]) / w if losses else float("nan")
    last = sum(losses[-w:]) / w if losses else float("nan")
    print(f"{delivered} batches delivered, {len(losses)} trained; loss {first:.4f} -> {last:.4f} "
          f"(mean of the first / last {w})")
    if args.check:
        problems = []
        if delivered != args.steps:
            problems.append(f"{delivered} of {args.steps} batches arrived")
        if not (last < first):
            problems.append(f"the loss did not go down ({first:.4f} -> {last:.4f})")
        for key in ("drafter.work", "drafter.wait", "target_forward.work", "postprocess.work"):
            if key not in profile:
                problems.append(f"the profile has no {key}")
        if problems:
            sys.exit("train_drafter.py --check: " + "; ".join(problems))
        print("check: passed")


if __name__ == "__main__":
    main()
