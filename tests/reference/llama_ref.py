#!/usr/bin/env python3
"""An independent reference forward pass of a llama-architecture GGUF, in numpy.

It shares no code with strata (its own GGUF parser, its own maths in float64, quantised
tensors dequantised by gguf_quants.py from the published block layouts), so agreement between
the two is evidence that both implement the model as llama.cpp does. It is slow and meant for
tiny models such as stories260K.

usage: llama_ref.py MODEL.gguf --ids "1 403 407" [--generate N] [--logits OUT]
  --generate N  greedy continuation, prints the generated ids on one line
  --logits OUT  writes the logits of every input position as strata logits does
"""
import argparse
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_quants  # noqa: E402  (beside this file)

GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
               10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, t):
        if t in GGUF_SCALAR:
            return self.take(GGUF_SCALAR[t])
        if t == 8:
            return self.string()
        if t == 9:
            et = self.take("<I")
            n = self.take("<Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError("unknown gguf type %d" % t)


def load(path):
    data = open(path, "rb").read()
    r = Reader(data)
    assert r.data[:4] == b"GGUF", "not a GGUF file"
    r.pos = 4
    r.take("<I")
    n_tensors = r.take("<Q")
    n_kv = r.take("<Q")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        kv[key] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        dtype = r.take("<I")
        off = r.take("<Q")
        infos.append((name, ne, dtype, off))
    align = kv.get("general.alignment", 32)
    base = (r.pos + align - 1) // align * align
    tensors = {}
    for name, ne, dtype, off in infos:
        count = int(np.prod(ne))
        if dtype == 0:
            arr = np.frombuffer(data, dtype="<f4", count=count, offset=base + off)
        elif dtype in gguf_quants.TYPES:
            arr = gguf_quants.dequantize(dtype, memoryview(data)[base + off:], count)
        else:
            raise SystemExit("reference cannot read %s (%s)" % (name, gguf_quants.type_name(dtype)))
        # GGUF ne[0] is the fastest dimension: numpy shape is reversed.
        tensors[name] = arr.reshape(list(reversed(ne))).astype(np.float64)
    return kv, tensors


class Model:
    def __init__(self, path):
        kv, t = load(path)
        arch = kv["general.architecture"]
        if arch != "llama":
            raise SystemExit("reference supports llama only")
        g = lambda k, d=None: kv.get(arch + "." + k, d)
        self.n_layer = g("block_count")
        self.n_head = g("attention.head_count")
        self.n_head_kv = g("attention.head_count_kv", self.n_head)
        self.n_embd = g("embedding_length")
        self.hd = self.n_embd // self.n_head
        self.n_rot = g("rope.dimension_count", self.hd)
        self.eps = g("attention.layer_norm_rms_epsilon", 1e-5)
        self.base = g("rope.freq_base", 10000.0)
        self.t = t
        self.embd = t["token_embd.weight"]
        self.out = t.get("output.weight", self.embd)

    def norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        # x [T, heads, hd]; pairs (2i, 2i+1) as ggml's normal mode.
        out = x.copy()
        i = np.arange(self.n_rot // 2)
        theta = pos[:, None] * self.base ** (-2.0 * i / self.n_rot)  # [T, n_rot/2]
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        a, b = x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2]
        out[..., 0:self.n_rot:2] = a * c - b * s
        out[..., 1:self.n_rot:2] = a * s + b * c
        return out

    def forward(self, ids):
        T = len(ids)
        pos = np.arange(T, dtype=np.float64)
        x = self.embd[ids]
        group = self.n_head // self.n_head_kv
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for il in range(self.n_layer):
            p = "blk.%d." % il
            w = lambda n: self.t[p + n]
            h = self.norm(x, w("attn_norm.weight"))
            q = (h @ w("attn_q.weight").T).reshape(T, self.n_head, self.hd)
            k = (h @ w("attn_k.weight").T).reshape(T, self.n_head_kv, self.hd)
            v = (h @ w("attn_v.weight").T).reshape(T, self.n_head_kv, self.hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            att = np.zeros((T, self.n_head, self.hd))
            for hh in range(self.n_head):
                kh = hh // group
                s = q[:, hh, :] @ k[:, kh, :].T / np.sqrt(self.hd) + mask
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, hh, :] = s @ v[:, kh, :]
            x = x + att.reshape(T, -1) @ w("attn_output.weight").T
            h = self.norm(x, w("ffn_norm.weight"))
            gate = h @ w("ffn_gate.weight").T
            up = h @ w("ffn_up.weight").T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ w("ffn_down.weight").T
        return self.norm(x, self.t["output_norm.weight"]) @ self.out.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--generate", type=int, default=0)
    ap.add_argument("--logits")
    a = ap.parse_args()
    m = Model(a.model)
    ids = [int(x) for x in a.ids.split()]
    if a.logits:
        logits = m.forward(ids).astype("<f4")
        with open(a.logits, "wb") as f:
            f.write(struct.pack("<II", logits.shape[0], logits.shape[1]))
            f.write(logits.tobytes())
    if a.generate:
        seq = list(ids)
        for _ in range(a.generate):
            seq.append(int(np.argmax(m.forward(seq)[-1])))
        print(" ".join(str(x) for x in seq[len(ids):]))


if __name__ == "__main__":
    sys.exit(main())
