#!/usr/bin/env python3
"""An independent reference forward pass of a GGUF model, in numpy.

Architectures: llama, qwen2, qwen3, phi3, gemma2, gemma3, with their rope variants (NeoX
pairs, partial rotary, linear scaling, Llama 3.1 frequency divisors, YaRN, LongRoPE), and the
mixtures of experts qwen3moe, Mixtral (llama with expert_count) and gpt-oss (biases, attention
sinks, alternating sliding windows, per-expert biases, clamped SwiGLU).

It shares no code with strata (its own GGUF parser, its own maths in float64, quantised
tensors dequantised by gguf_quants.py from the published block layouts), so agreement between
the two is evidence that both implement the model as llama.cpp does. It is slow and meant for
tiny models such as stories260K.

usage: llama_ref.py MODEL.gguf --ids "1 403 407" [--generate N] [--logits OUT]
  --generate N  greedy continuation, prints the generated ids on one line
  --logits OUT  writes the logits of every input position as strata logits does
  --min-margin M  fails unless every token's router logits put the last selected expert at
                least M above the first one left out (so that a computation off by less than
                M selects the same experts)
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


ROPE_NEOX_ARCHS = {"qwen2", "qwen3", "qwen3moe", "phi3", "gemma2", "gemma3", "gpt-oss"}
ARCHS = ("llama", "qwen2", "qwen3", "qwen3moe", "phi3", "gemma2", "gemma3", "gpt-oss")
# Layers with sliding-window attention: every layer whose index modulo the pattern is below
# pattern - 1 (gemma2, gpt-oss: even layers; gemma3: five of every six).
SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2}
# gpt-oss's clamped SwiGLU: the constants of llama.cpp's graph, not GGUF keys.
OAI_ALPHA, OAI_LIMIT = 1.702, 7.0


class Model:
    """The forward pass of the GGUFs of ARCHS, in float64."""

    def __init__(self, path, n_ctx=None, f16_kv=False):
        kv, t = load(path)
        arch = kv["general.architecture"]
        if arch not in ARCHS:
            raise SystemExit("reference does not know architecture %s" % arch)
        self.arch = arch
        g = lambda k, d=None: kv.get(arch + "." + k, d)
        self.n_layer = g("block_count")
        self.n_head = g("attention.head_count")
        self.n_head_kv = g("attention.head_count_kv", self.n_head)
        self.n_embd = g("embedding_length")
        self.n_ctx_train = g("context_length")
        self.hd = g("attention.key_length", self.n_embd // self.n_head)
        self.n_rot = g("rope.dimension_count", self.hd)
        self.eps = g("attention.layer_norm_rms_epsilon", 1e-5)
        self.base = g("rope.freq_base", 10000.0)
        self.neox = arch in ROPE_NEOX_ARCHS
        self.f16_kv = f16_kv
        # Rope scaling as llama.cpp reads it: the factor is a linear scale whatever the type.
        self.scaling = g("rope.scaling.type", "linear")
        factor = g("rope.scaling.factor", g("rope.scale_linear", 1.0)) or 1.0
        self.freq_scale = 1.0 if self.scaling == "none" else 1.0 / factor
        self.attn_factor = g("rope.scaling.attn_factor", 1.0)
        self.n_ctx_orig = g("rope.scaling.original_context_length", self.n_ctx_train)
        self.beta_fast = g("rope.scaling.yarn_beta_fast", 32.0)
        self.beta_slow = g("rope.scaling.yarn_beta_slow", 1.0)
        self.ext_factor = g("rope.scaling.yarn_ext_factor", 1.0) if self.scaling == "yarn" else 0.0
        # Frequency divisors: Llama 3.1's rope_freqs, or LongRoPE's long factors when the
        # context used exceeds the original one (short ones otherwise).
        n_ctx = n_ctx or self.n_ctx_train
        if "rope_freqs.weight" in t:
            self.freq_factors = t["rope_freqs.weight"]
        elif "rope_factors_long.weight" in t:
            long = n_ctx > self.n_ctx_orig
            self.freq_factors = t["rope_factors_%s.weight" % ("long" if long else "short")]
        else:
            self.freq_factors = None
        # Gemma: embeddings scaled by sqrt(n_embd), queries by 1/sqrt(head) (27B: by
        # 1/sqrt(n_embd / n_head)), soft-capping, sliding windows, local rope base 10000.
        self.embd_scale = np.sqrt(self.n_embd) if arch.startswith("gemma") else 1.0
        big = (arch, self.n_layer) in (("gemma2", 46), ("gemma3", 62))
        self.q_scale = 1.0 / np.sqrt(self.n_embd // self.n_head if big else self.hd)
        if arch == "gpt-oss":  # llama.cpp: 1 / sqrt(n_rot)
            self.q_scale = 1.0 / np.sqrt(self.n_rot)
        self.attn_softcap = g("attn_logit_softcapping", 50.0) if arch == "gemma2" else 0.0
        self.final_softcap = g("final_logit_softcapping", 30.0) if arch == "gemma2" else 0.0
        self.n_swa = g("attention.sliding_window", 4096 if arch == "gemma2" else 0)
        self.swa_pattern = g("attention.sliding_window_pattern", SWA_PATTERN.get(arch, 0))
        # Experts: the top n_used of the router's logits (plus its bias, gpt-oss), their
        # weights the softmax over all experts (expert_gating_func 1, the default of qwen3moe
        # and Mixtral), 2 sigmoid, 3 softmax over the selected (gpt-oss's default);
        # renormalised to sum to one unless expert_weights_norm says otherwise (gpt-oss: not
        # by default); times expert_weights_scale (0: none).
        oss = arch == "gpt-oss"
        self.n_expert = g("expert_count", 0)
        self.n_used = g("expert_used_count", 0)
        self.gating = g("expert_gating_func", 0) or (3 if oss else 1)
        self.norm_w = g("expert_weights_norm", not oss)
        self.w_scale = g("expert_weights_scale", 0.0) or 1.0
        self.min_margin = np.inf  # smallest gap between selected and left-out logits seen
        self.t = t
        self.embd = t["token_embd.weight"]
        self.out = t.get("output.weight", self.embd)

    def norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def is_swa(self, il):
        return self.swa_pattern > 0 and self.n_swa > 0 and il % self.swa_pattern < self.swa_pattern - 1

    def rope(self, x, pos, il):
        # x [T, heads, hd]; pairs (2i, 2i+1) in normal mode, (i, i + n_rot/2) in NeoX mode.
        base, freq_scale, ext = self.base, self.freq_scale, self.ext_factor
        if self.arch == "gemma3" and self.is_swa(il):
            base, freq_scale, ext = 10000.0, 1.0, 0.0
        half = self.n_rot // 2
        i = np.arange(half, dtype=np.float64)
        extrap = pos[:, None] * base ** (-2.0 * i / self.n_rot)  # [T, half]
        if self.freq_factors is not None:
            extrap = extrap / self.freq_factors[None, :]
        theta = freq_scale * extrap
        mscale = self.attn_factor
        if ext != 0.0:  # YaRN: ramp between extrapolation (fast pairs) and interpolation
            def corr(rot):
                return self.n_rot * np.log(self.n_ctx_orig / (rot * 2 * np.pi)) / (2 * np.log(base))
            low = max(0.0, np.floor(corr(self.beta_fast)))
            high = min(self.n_rot - 1.0, np.ceil(corr(self.beta_slow)))
            mix = (1 - np.clip((i - low) / max(0.001, high - low), 0, 1)) * ext
            theta = theta * (1 - mix) + extrap * mix
            mscale *= 1 + 0.1 * np.log(1.0 / freq_scale)
        c = (np.cos(theta) * mscale)[:, None, :]
        s = (np.sin(theta) * mscale)[:, None, :]
        out = x.copy()
        if self.neox:
            a, b = x[..., 0:half], x[..., half:self.n_rot]
            out[..., 0:half] = a * c - b * s
            out[..., half:self.n_rot] = a * s + b * c
        else:
            a, b = x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2]
            out[..., 0:self.n_rot:2] = a * c - b * s
            out[..., 1:self.n_rot:2] = a * s + b * c
        return out

    def attention(self, il, w, h, pos):
        T = h.shape[0]
        nq, nkv = self.n_head * self.hd, self.n_head_kv * self.hd
        if self.t.get("blk.%d.attn_qkv.weight" % il) is not None:  # phi3: fused q, k, v
            qkv = h @ w("attn_qkv.weight").T
            q, k, v = qkv[:, :nq], qkv[:, nq:nq + nkv], qkv[:, nq + nkv:]
        else:
            q, k, v = h @ w("attn_q.weight").T, h @ w("attn_k.weight").T, h @ w("attn_v.weight").T
        bias = lambda n: self.t.get("blk.%d.%s" % (il, n))
        if bias("attn_q.bias") is not None:
            q, k, v = q + bias("attn_q.bias"), k + bias("attn_k.bias"), v + bias("attn_v.bias")
        q = q.reshape(T, self.n_head, self.hd)
        k = k.reshape(T, self.n_head_kv, self.hd)
        v = v.reshape(T, self.n_head_kv, self.hd)
        sinks = bias("attn_sinks.weight")  # gpt-oss: one logit per head in every softmax
        if bias("attn_q_norm.weight") is not None:
            q, k = self.norm(q, w("attn_q_norm.weight")), self.norm(k, w("attn_k_norm.weight"))
        q, k = self.rope(q, pos, il), self.rope(k, pos, il)
        if self.f16_kv:  # the KV cache stores f16
            k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
        mask = np.triu(np.full((T, T), -np.inf), 1)
        if self.is_swa(il):  # keys at least n_swa positions behind the query are masked
            mask[pos[:, None] - pos[None, :] >= self.n_swa] = -np.inf
        group = self.n_head // self.n_head_kv
        att = np.zeros((T, self.n_head, self.hd))
        for hh in range(self.n_head):
            kh = hh // group
            s = (q[:, hh, :] * self.q_scale) @ k[:, kh, :].T
            if self.attn_softcap:
                s = np.tanh(s / self.attn_softcap) * self.attn_softcap
            s = s + mask
            m = s.max(axis=1, keepdims=True)
            sink = -np.inf if sinks is None else sinks[hh]
            m = np.maximum(m, sink)
            s = np.exp(s - m)
            s /= s.sum(axis=1, keepdims=True) + np.exp(sink - m)
            att[:, hh, :] = s @ v[:, kh, :]
        out = att.reshape(T, -1) @ w("attn_output.weight").T
        if bias("attn_output.bias") is not None:
            out = out + bias("attn_output.bias")
        return out

    def moe(self, w, h, il):
        logits = h @ w("ffn_gate_inp.weight").T  # [T, n_expert]
        b = lambda n: self.t.get("blk.%d.%s" % (il, n))
        if b("ffn_gate_inp.bias") is not None:
            logits = logits + b("ffn_gate_inp.bias")
        k = self.n_used
        # Descending logit, ties to the lower expert index (a stable sort of the negation).
        order = np.argsort(-logits, axis=1, kind="stable")
        chosen = order[:, :k]
        picked = np.take_along_axis(logits, chosen, axis=1)
        if k < self.n_expert:
            left = np.take_along_axis(logits, order[:, k:k + 1], axis=1)
            self.min_margin = min(self.min_margin, float((picked[:, -1:] - left).min()))
        if self.gating == 1:
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            weights = np.take_along_axis(p, chosen, axis=1)
        elif self.gating == 2:
            weights = 1 / (1 + np.exp(-picked))
        elif self.gating == 3:
            weights = np.exp(picked - picked.max(axis=1, keepdims=True))
            weights /= weights.sum(axis=1, keepdims=True)
        else:
            raise SystemExit("reference does not know expert_gating_func %d" % self.gating)
        if self.norm_w:
            weights = weights / weights.sum(axis=1, keepdims=True)
        weights = weights * self.w_scale
        # numpy shapes [n_expert, rows, cols]: expert e's matrix is [e].
        gate, up, down = w("ffn_gate_exps.weight"), w("ffn_up_exps.weight"), w("ffn_down_exps.weight")
        # Per-expert biases (gpt-oss), numpy [n_expert, n]: expert e's row is [e]; else zeros.
        zero = lambda n: np.zeros((self.n_expert, n))
        bg = b("ffn_gate_exps.bias") if b("ffn_gate_exps.bias") is not None else zero(gate.shape[1])
        bu = b("ffn_up_exps.bias") if b("ffn_up_exps.bias") is not None else zero(up.shape[1])
        bd = b("ffn_down_exps.bias") if b("ffn_down_exps.bias") is not None else zero(down.shape[1])
        out = np.zeros_like(h)
        for tok in range(h.shape[0]):
            for slot in range(k):
                e = chosen[tok, slot]
                g = gate[e] @ h[tok] + bg[e]
                u = up[e] @ h[tok] + bu[e]
                if self.arch == "gpt-oss":  # swiglu_oai
                    x = np.minimum(g, OAI_LIMIT)
                    act = x / (1 + np.exp(-OAI_ALPHA * x)) * (np.clip(u, -OAI_LIMIT, OAI_LIMIT) + 1)
                else:
                    act = g / (1 + np.exp(-g)) * u
                out[tok] += weights[tok, slot] * (down[e] @ act + bd[e])
        return out

    def ffn(self, il, w, h):
        if self.t.get("blk.%d.ffn_gate_inp.weight" % il) is not None:
            return self.moe(w, h, il)
        if self.arch.startswith("gemma"):  # GELU (tanh approximation) gated
            g = h @ w("ffn_gate.weight").T
            act = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
            return (act * (h @ w("ffn_up.weight").T)) @ w("ffn_down.weight").T
        if self.arch == "phi3":  # one up projection holding gate then up
            gu = h @ w("ffn_up.weight").T
            n = gu.shape[1] // 2
            g, up = gu[:, :n], gu[:, n:]
        else:
            g, up = h @ w("ffn_gate.weight").T, h @ w("ffn_up.weight").T
        return (g / (1 + np.exp(-g)) * up) @ w("ffn_down.weight").T

    def forward(self, ids, hidden=False):
        T = len(ids)
        pos = np.arange(T, dtype=np.float64)
        x = self.embd[ids] * self.embd_scale
        gemma = self.arch.startswith("gemma")
        for il in range(self.n_layer):
            w = lambda n, il=il: self.t["blk.%d.%s" % (il, n)]
            a = self.attention(il, w, self.norm(x, w("attn_norm.weight")), pos)
            if gemma:
                a = self.norm(a, w("post_attention_norm.weight"))
            x = x + a
            # gpt-oss names its FFN's input norm post_attention_norm.
            ffn_norm = "post_attention_norm.weight" if self.arch == "gpt-oss" else "ffn_norm.weight"
            f = self.ffn(il, w, self.norm(x, w(ffn_norm)))
            if gemma:
                f = self.norm(f, w("post_ffw_norm.weight"))
            x = x + f
        if hidden:
            return self.norm(x, self.t["output_norm.weight"])
        logits = self.norm(x, self.t["output_norm.weight"]) @ self.out.T
        if self.final_softcap:
            logits = np.tanh(logits / self.final_softcap) * self.final_softcap
        return logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--generate", type=int, default=0)
    ap.add_argument("--logits")
    ap.add_argument("--n-ctx", type=int, help="context size (picks LongRoPE's factors)")
    ap.add_argument("--f16-kv", action="store_true", help="round K and V to f16, as the cache does")
    ap.add_argument("--min-margin", type=float, default=0.0)
    ap.add_argument("--embd", help="write the final hidden state after the output norm, pooled "
                    "(none, mean, cls, last), as float32 to this file")
    ap.add_argument("--pooling", default="none")
    a = ap.parse_args()
    m = Model(a.model, n_ctx=a.n_ctx, f16_kv=a.f16_kv)
    ids = [int(x) for x in a.ids.split()]
    if a.logits:
        logits = m.forward(ids).astype("<f4")
        with open(a.logits, "wb") as f:
            f.write(struct.pack("<II", logits.shape[0], logits.shape[1]))
            f.write(logits.tobytes())
    if a.embd:
        h = m.forward(ids, hidden=True)
        pooled = {"none": h, "mean": h.mean(axis=0), "cls": h[0], "last": h[-1]}[a.pooling]
        with open(a.embd, "wb") as f:
            f.write(np.asarray(pooled, dtype="<f4").tobytes())
    if a.generate:
        seq = list(ids)
        for _ in range(a.generate):
            seq.append(int(np.argmax(m.forward(seq)[-1])))
        print(" ".join(str(x) for x in seq[len(ids):]))
    if m.n_expert:
        print("smallest router margin %.2e" % m.min_margin, file=sys.stderr)
        if m.min_margin < a.min_margin:
            raise SystemExit("a token's expert selection is closer than --min-margin %g: a "
                             "comparison would not be meaningful" % a.min_margin)


if __name__ == "__main__":
    sys.exit(main())
