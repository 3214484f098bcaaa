"""Independent reference: the same causal model recomputed from scratch in numpy float64, without any
KV cache, block table or ms_kvcache op.

With a bfloat16 KV cache the pipeline rounds q, k, v to bfloat16 before the RoPE-write op, the op
returns bfloat16 rotated q/k, and the caches hold bfloat16; the reference rounds at the same points
(``round_to="bfloat16"``) and computes everything else in float64, so what remains between the two is
float32-vs-float64 arithmetic, including the rare bf16 rounding it flips (see ``docs/demo.md``).
"""
import math

import ml_dtypes
import numpy as np

try:
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - scipy ships with MindSpore
    _erf = np.vectorize(math.erf, otypes=[np.float64])

__all__ = ["rope_table", "reference_hidden"]


def rope_table(rotary_dim, max_position, base=10000.0):
    """float64 (cos, sin), each ``[max_position, rotary_dim // 2]``."""
    inv_freq = 1.0 / (base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim))
    f = np.outer(np.arange(max_position, dtype=np.float64), inv_freq)
    return np.cos(f), np.sin(f)


def _round(x, round_to):
    if round_to == "bfloat16":
        return x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    return x


def _ln(x, g, b, eps):
    m = x.mean(-1, keepdims=True)
    xc = x - m
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps) * g + b


def _rope_neox(x, cos, sin):
    half = cos.shape[-1]
    x1, x2 = x[..., :half], x[..., half:2 * half]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s, x[..., 2 * half:]], axis=-1)


def reference_hidden(cfg, weights, token_ids, round_to=None, rope_base=10000.0):
    """Final hidden states ``[n, hidden]`` (float64) of ``token_ids`` run causally through the model.

    cfg: BertConfig; weights: the float32 arrays the pipeline uses; token_ids: ints, positions 0..n-1.
    RoPE: NeoX style, rotary_dim = head_size, cos/sin from :func:`rope_table` (float64).
    BERT absolute position embeddings are kept.
    """
    W = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    ids = np.asarray(token_ids, np.int64)
    n = ids.size
    H, D = cfg.num_attention_heads, cfg.head_size
    cos, sin = rope_table(D, cfg.max_position_embeddings, rope_base)
    cos, sin = cos[:n], sin[:n]  # the pipeline's table is float32 (error ~1e-8, far below the tolerances)
    e = "embeddings."
    x = W[e + "word_embeddings.weight"][ids] + W[e + "position_embeddings.weight"][:n] \
        + W[e + "token_type_embeddings.weight"][0]
    x = _ln(x, W[e + "LayerNorm.weight"], W[e + "LayerNorm.bias"], cfg.layer_norm_eps)
    causal = np.tril(np.ones((n, n), bool))
    for i in range(cfg.num_hidden_layers):
        p = f"encoder.layer.{i}."

        def lin(a, name):
            return a @ W[p + name + ".weight"].T + W[p + name + ".bias"]

        q = _round(lin(x, "attention.self.query").reshape(n, H, D), round_to)
        k = _round(lin(x, "attention.self.key").reshape(n, H, D), round_to)
        v = _round(lin(x, "attention.self.value").reshape(n, H, D), round_to)
        q = _round(_rope_neox(q, cos, sin), round_to)
        k = _round(_rope_neox(k, cos, sin), round_to)
        s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(D)
        s = np.where(causal[None], s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = np.einsum("hqk,khd->qhd", s, v).reshape(n, H * D)
        x = _ln(lin(ctx, "attention.output.dense") + x, W[p + "attention.output.LayerNorm.weight"],
                W[p + "attention.output.LayerNorm.bias"], cfg.layer_norm_eps)
        f = lin(x, "intermediate.dense")
        f = 0.5 * f * (1.0 + _erf(f / math.sqrt(2.0)))
        x = _ln(lin(f, "output.dense") + x, W[p + "output.LayerNorm.weight"], W[p + "output.LayerNorm.bias"],
                cfg.layer_norm_eps)
    return x
