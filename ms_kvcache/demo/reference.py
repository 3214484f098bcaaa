"""Independent reference: the demo's Llama in plain numpy float32, without any KV cache, block table,
MindSpore or ms_kvcache op.

One causal pass over a whole sequence (prompt + completion) with dense attention: the logits at position
``t`` predict token ``t + 1``, so the argmax at each position from the last prompt token on must reproduce
each generated token (greedy decoding). It works on the weights exactly as llama.cpp stores them (q / k
rows permuted for the interleaved rotation) and rotates interleaved pairs ``(2i, 2i+1)`` itself, so it
shares nothing with the pipeline's NeoX path (un-permuted rows, ``is_neox_style=True``) but the weights.
"""
import numpy as np

__all__ = ["reference_logits", "rope_angles", "compare_tokens"]


def rope_angles(head_size, positions, base):
    """float64 (cos, sin), each ``[len(positions), head_size // 2]``: angle ``p * base^(-2i/head_size)``."""
    inv = base ** (-np.arange(0, head_size, 2, dtype=np.float64) / head_size)
    a = np.outer(np.asarray(positions, np.float64), inv)
    return np.cos(a), np.sin(a)


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) * w


def _rotate_interleaved(x, cos, sin):
    """x ``[n, heads, d]``: pairs ``(x[2i], x[2i+1])`` rotated by the angle of pair i (GPT-J / llama.cpp)."""
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = b * c + a * s
    return out


def reference_logits(cfg, weights, token_ids, first=0):
    """Logits float32 ``[n - first, vocab]`` at positions ``first..n-1`` of ``token_ids`` (positions 0..n-1).

    cfg: :class:`ms_kvcache.demo.model.LlamaConfig`; weights: llama.cpp names, GGUF q / k row order
    (what :func:`ms_kvcache.demo.model.load_model` returns). float32 arithmetic throughout.
    """
    f32 = np.float32
    ids = np.asarray(token_ids, np.int64)
    n = ids.size
    H, Hkv, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_size
    group = H // Hkv
    cos, sin = (a.astype(f32) for a in rope_angles(D, np.arange(n), cfg.rope_base))
    x = np.asarray(weights["token_embd.weight"], f32)[ids]
    future = np.triu(np.ones((n, n), bool), 1)
    scale = f32(1.0 / np.sqrt(D))
    for i in range(cfg.num_layers):
        b = f"blk.{i}."

        def W(name):
            return np.asarray(weights[b + name + ".weight"], f32)

        h = _rms(x, W("attn_norm"), cfg.rms_norm_eps)
        q = _rotate_interleaved((h @ W("attn_q").T).reshape(n, H, D), cos, sin)
        k = _rotate_interleaved((h @ W("attn_k").T).reshape(n, Hkv, D), cos, sin)
        v = (h @ W("attn_v").T).reshape(n, Hkv, D)
        k = np.repeat(k, group, axis=1)  # query head j reads KV head j // group
        v = np.repeat(v, group, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) * scale
        s[:, future] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = np.einsum("hqk,khd->qhd", s, v).reshape(n, H * D)
        x = x + ctx @ W("attn_output").T
        h = _rms(x, W("ffn_norm"), cfg.rms_norm_eps)
        g = h @ W("ffn_gate").T
        x = x + ((g / (1 + np.exp(-g))) * (h @ W("ffn_up").T)) @ W("ffn_down").T
    h = _rms(x[first:], np.asarray(weights["output_norm.weight"], f32), cfg.rms_norm_eps)
    head = weights["token_embd.weight"] if cfg.tied_embeddings else weights["output.weight"]
    return (h @ np.asarray(head, f32).T).astype(f32)


def compare_tokens(ref, logits, generated, tol):
    """Compare one sequence's greedy tokens and logits with the reference's.

    ref: reference logits ``[m, vocab]`` at the positions that produced the ``m`` generated tokens (the
    last prompt token, then each fed completion token); logits: the pipeline's logits there, same shape;
    generated: the ``m`` tokens; tol: logit tolerance.

    Returns a dict: ``exact`` (positions where the token is the reference's argmax), ``near_ties`` (not the
    argmax, but its reference logit within ``tol`` of the maximum: a tie the two computations may break
    differently; ``max_tie_gap``: the largest such shortfall), ``mismatch`` (neither), ``max_logit_err`` (max |logits - ref|), ``first_mismatch`` (first
    position that is not exact: the tokens before it are what the reference itself would have generated),
    ``min_ref_margin`` (smallest gap between the reference's two largest logits), ``max_abs_logit``.
    """
    ref = np.asarray(ref, np.float32)
    got = np.asarray(logits, np.float32)
    gen = np.asarray(generated, np.int64)
    if ref.shape != got.shape or ref.shape[0] != gen.size:
        raise ValueError(f"compare_tokens: expected ref and logits of shape [{gen.size}, vocab], got {ref.shape} "
                         f"and {got.shape}")
    exact = ref.argmax(-1) == gen
    chosen = ref[np.arange(gen.size), gen]
    near = ~exact & (chosen >= ref.max(-1) - tol)
    top2 = np.sort(ref, -1)[:, -2:]
    bad = np.flatnonzero(~exact)
    gaps = (ref.max(-1) - chosen)[near]
    return {"tokens": int(gen.size), "exact": int(exact.sum()), "near_ties": int(near.sum()),
            "max_tie_gap": float(gaps.max()) if gaps.size else 0.0,
            "mismatch": int((~exact & ~near).sum()), "max_logit_err": float(np.max(np.abs(got - ref))),
            "first_mismatch": int(bad[0]) if bad.size else None,
            "min_ref_margin": float(np.min(top2[:, 1] - top2[:, 0])), "max_abs_logit": float(np.max(np.abs(ref)))}
