"""MindSpore GRAPH_MODE cells of the demo: a BERT encoder run as a causal decoder over paged KV caches.

Each layer: q/k/v projections -> RoPE on q and k + k/v written into the layer's paged cache by slot
mapping (one fused op, :func:`ops_adapter.rope_and_cache`) -> attention of the step's queries over the
sequence's cached blocks, gathered through the block table inside the graph -> output projection,
residual + LayerNorm, GELU feed-forward, residual + LayerNorm (BERT post-LN).

The BERT absolute position embeddings are kept (added to the token embeddings as trained); RoPE is
applied on top, to q and k, so the cached keys carry their positions like a RoPE decoder's do.

The caches are Parameters held by :class:`PagedBert` (``key_caches`` / ``value_caches`` for
SEPARATE_KV, ``kv_caches`` for MERGED_KV, BSND layout); :class:`PrefillStep` and :class:`DecodeStep`
share that model and are each compiled once for their static shape.
"""
import math

import numpy as np
import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops

from ms_kvcache.demo import ops_adapter as A

__all__ = ["PagedBert", "PrefillStep", "DecodeStep", "KVWriteBench", "MS_DTYPES", "DATA_DTYPES"]

MS_DTYPES = {"float32": ms.float32, "bfloat16": ms.bfloat16, "int8": ms.int8}
#: dtype of the q/k/v handed to the RoPE-write op per cache dtype (an int8 cache quantizes float32 data)
DATA_DTYPES = {"float32": ms.float32, "bfloat16": ms.bfloat16, "int8": ms.float32}


def _param(a, name):
    return Parameter(Tensor(np.ascontiguousarray(a, np.float32)), name=name, requires_grad=False)


class PagedBert(nn.Cell):
    """The model with its paged KV caches.

    Args:
        cfg (BertConfig), weights (dict of float32 numpy, Hugging Face names).
        num_blocks, block_size: cache geometry; each layer's cache is
            ``[num_blocks, block_size, num_heads, head_size]`` (two of them, or one
            ``[2, num_blocks, block_size, num_heads, head_size]`` for ``kv_format="merged"``).
        max_blocks_per_seq: width of the block tables.
        kv_dtype: "float32" | "bfloat16" (caches, and the q/k/v handed to the RoPE-write op) | "int8"
            (SEPARATE_KV only: int8 caches written with dynamic per-token scales from float32 q/k/v,
            plus float32 scale caches ``k_scale_caches`` / ``v_scale_caches`` ``[num_blocks, block_size,
            num_heads, 1]`` per layer; the attention reads ``code * scale``, docs/quantization.md).
        kv_format: "separate" | "merged".
        cos_sin_cache: Tensor ``[max_position, head_size]`` (rotary_dim = head_size, NeoX style).

    construct(input_ids, positions, slot_mapping, block_tables) -> hidden states float32 ``[B*S, hidden]``
        input_ids, positions, slot_mapping: int32 ``[B*S]`` (B batch rows of S query tokens; padding
        rows have slot -1 and position 0); block_tables: int32 ``[B, max_blocks_per_seq]``.
    """

    def __init__(self, cfg, weights, num_blocks, block_size, max_blocks_per_seq, kv_dtype, kv_format,
                 cos_sin_cache):
        super().__init__()
        w = weights
        L = cfg.num_hidden_layers
        self.num_layers = L
        self.heads = cfg.num_attention_heads
        self.head_size = cfg.head_size
        self.hidden = cfg.hidden_size
        self.eps = cfg.layer_norm_eps
        self.kv_format = kv_format
        self.merged = kv_format == "merged"
        self.kv_dtype = MS_DTYPES[kv_dtype]
        self.data_dtype = DATA_DTYPES[kv_dtype]
        self.quant = kv_dtype == "int8"
        if self.quant and self.merged:
            raise ValueError("PagedBert: argument 'kv_dtype': int8 caches are demonstrated with kv_format "
                             "'separate' only")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.scale = 1.0 / math.sqrt(cfg.head_size)
        self.inv_sqrt2 = 1.0 / math.sqrt(2.0)
        e = "embeddings."
        self.word = _param(w[e + "word_embeddings.weight"], "emb.word")
        self.pos_emb = _param(w[e + "position_embeddings.weight"], "emb.position")
        self.type0 = _param(w[e + "token_type_embeddings.weight"][0], "emb.type0")
        self.ln_e_w = _param(w[e + "LayerNorm.weight"], "emb.ln.w")
        self.ln_e_b = _param(w[e + "LayerNorm.bias"], "emb.ln.b")

        def per_layer(key, tag, transpose=False):
            out = []
            for i in range(L):
                a = w[f"encoder.layer.{i}.{key}"]
                out.append(_param(a.T if transpose else a, f"l{i}.{tag}"))
            return ParameterTuple(out)

        s = "attention.self."
        self.wq = per_layer(s + "query.weight", "wq", True)
        self.bq = per_layer(s + "query.bias", "bq")
        self.wk = per_layer(s + "key.weight", "wk", True)
        self.bk = per_layer(s + "key.bias", "bk")
        self.wv = per_layer(s + "value.weight", "wv", True)
        self.bv = per_layer(s + "value.bias", "bv")
        self.wo = per_layer("attention.output.dense.weight", "wo", True)
        self.bo = per_layer("attention.output.dense.bias", "bo")
        self.ln1_w = per_layer("attention.output.LayerNorm.weight", "ln1.w")
        self.ln1_b = per_layer("attention.output.LayerNorm.bias", "ln1.b")
        self.w1 = per_layer("intermediate.dense.weight", "w1", True)
        self.b1 = per_layer("intermediate.dense.bias", "b1")
        self.w2 = per_layer("output.dense.weight", "w2", True)
        self.b2 = per_layer("output.dense.bias", "b2")
        self.ln2_w = per_layer("output.LayerNorm.weight", "ln2.w")
        self.ln2_b = per_layer("output.LayerNorm.bias", "ln2.b")

        shape = (num_blocks, block_size, self.heads, self.head_size)
        zeros = np.zeros(shape, np.float32)
        if self.merged:
            z2 = np.zeros((2,) + shape, np.float32)
            self.kv_caches = ParameterTuple([Parameter(Tensor(z2, dtype=self.kv_dtype), name=f"kv_cache.{i}",
                                                       requires_grad=False) for i in range(L)])
        else:
            self.key_caches = ParameterTuple([Parameter(Tensor(zeros, dtype=self.kv_dtype), name=f"key_cache.{i}",
                                                        requires_grad=False) for i in range(L)])
            self.value_caches = ParameterTuple([Parameter(Tensor(zeros, dtype=self.kv_dtype),
                                                          name=f"value_cache.{i}", requires_grad=False)
                                                for i in range(L)])
        if self.quant:
            zs = np.zeros((num_blocks, block_size, self.heads, 1), np.float32)
            self.k_scale_caches = ParameterTuple([Parameter(Tensor(zs), name=f"k_scale_cache.{i}", requires_grad=False)
                                                  for i in range(L)])
            self.v_scale_caches = ParameterTuple([Parameter(Tensor(zs), name=f"v_scale_cache.{i}", requires_grad=False)
                                                  for i in range(L)])
        self.cos_sin_cache = Parameter(cos_sin_cache, name="cos_sin_cache", requires_grad=False)
        self.kv_len = max_blocks_per_seq * block_size
        self.kv_index = Tensor(np.arange(self.kv_len, dtype=np.int32))

    # ------------------------------------------------------------------ host-side views of the caches
    def cache_planes(self):
        """[(K cache, V cache) per layer] as numpy arrays (copies, exact bits: bf16 -> uint16)."""
        out = []
        for i in range(self.num_layers):
            if self.merged:
                kv = _host_bits(self.kv_caches[i])
                out.append((kv[0].copy(), kv[1].copy()))
            else:
                out.append((_host_bits(self.key_caches[i]).copy(), _host_bits(self.value_caches[i]).copy()))
        return out

    def scale_planes(self):
        """int8 caches: [(K scale cache, V scale cache) per layer] as float32 bits (uint32), else []."""
        if not self.quant:
            return []
        return [(_host_bits(k).copy(), _host_bits(v).copy()) for k, v in zip(self.k_scale_caches, self.v_scale_caches)]

    def cache_nbytes(self):
        """Bytes of every layer's caches (int8: the scale caches included)."""
        n = 0
        for p in (self.kv_caches if self.merged else tuple(self.key_caches) + tuple(self.value_caches)):
            n += p.nbytes
        if self.quant:
            for p in tuple(self.k_scale_caches) + tuple(self.v_scale_caches):
                n += p.nbytes
        return n

    # ------------------------------------------------------------------ graph
    def _ln(self, x, g, b):
        mean = x.mean(-1, keep_dims=True)
        xc = x - mean
        var = (xc * xc).mean(-1, keep_dims=True)
        return xc / ops.sqrt(var + self.eps) * g + b

    def construct(self, input_ids, positions, slot_mapping, block_tables):
        nb_rows = block_tables.shape[0]
        n = input_ids.shape[0]
        s = n // nb_rows
        h, d = self.heads, self.head_size
        x = ops.gather(self.word, input_ids, 0) + ops.gather(self.pos_emb, positions, 0) + self.type0
        x = self._ln(x, self.ln_e_w, self.ln_e_b)
        # causal mask over the sequence's cache: key j is visible to a query at position p iff j <= p
        visible = self.kv_index.reshape((1, 1, 1, self.kv_len)) <= positions.reshape((nb_rows, 1, s, 1))
        mask_bias = (1.0 - ops.cast(visible, ms.float32)) * -1e9
        bt = block_tables.reshape((-1,))
        for i in range(self.num_layers):
            q = (ops.matmul(x, self.wq[i]) + self.bq[i]).reshape((n, h, d))
            k = (ops.matmul(x, self.wk[i]) + self.bk[i]).reshape((n, h, d))
            v = (ops.matmul(x, self.wv[i]) + self.bv[i]).reshape((n, h, d))
            q = ops.cast(q, self.data_dtype)
            k = ops.cast(k, self.data_dtype)
            v = ops.cast(v, self.data_dtype)
            if self.merged:
                q_rot, k_rot = A.rope_and_cache_merged(positions, q, k, v, self.cos_sin_cache, self.kv_caches[i],
                                                       slot_mapping)
                # paged read: gather this batch's blocks (CPU Gather has no bf16: cast the cache first)
                kv = ops.gather(ops.cast(self.kv_caches[i], ms.float32), bt, 1)
                keys = kv[0].reshape((nb_rows, self.kv_len, h, d))
                vals = kv[1].reshape((nb_rows, self.kv_len, h, d))
            elif self.quant:  # int8 codes and per-token scales written; read back dequantized: code * scale
                q_rot, k_rot = A.rope_and_cache(positions, q, k, v, self.cos_sin_cache, self.key_caches[i],
                                                self.value_caches[i], slot_mapping,
                                                k_scale_cache=self.k_scale_caches[i],
                                                v_scale_cache=self.v_scale_caches[i])
                keys = (ops.gather(ops.cast(self.key_caches[i], ms.float32), bt, 0)
                        * ops.gather(self.k_scale_caches[i], bt, 0)).reshape((nb_rows, self.kv_len, h, d))
                vals = (ops.gather(ops.cast(self.value_caches[i], ms.float32), bt, 0)
                        * ops.gather(self.v_scale_caches[i], bt, 0)).reshape((nb_rows, self.kv_len, h, d))
            else:
                q_rot, k_rot = A.rope_and_cache(positions, q, k, v, self.cos_sin_cache, self.key_caches[i],
                                                self.value_caches[i], slot_mapping)
                keys = ops.gather(ops.cast(self.key_caches[i], ms.float32), bt, 0).reshape(
                    (nb_rows, self.kv_len, h, d))
                vals = ops.gather(ops.cast(self.value_caches[i], ms.float32), bt, 0).reshape(
                    (nb_rows, self.kv_len, h, d))
            q_rot = ops.depend(q_rot, k_rot)  # the rotated keys are read back from the cache below
            qh = ops.cast(q_rot, ms.float32).reshape((nb_rows, s, h, d)).transpose(0, 2, 1, 3)
            kh = keys.transpose(0, 2, 3, 1)                       # [B, H, D, K]
            vh = vals.transpose(0, 2, 1, 3)                       # [B, H, K, D]
            scores = ops.matmul(qh, kh) * self.scale + mask_bias  # [B, H, S, K]
            probs = ops.softmax(scores, -1)
            ctx = ops.matmul(probs, vh).transpose(0, 2, 1, 3).reshape((n, self.hidden))
            a = ops.matmul(ctx, self.wo[i]) + self.bo[i]
            x = self._ln(a + x, self.ln1_w[i], self.ln1_b[i])
            f = ops.matmul(x, self.w1[i]) + self.b1[i]
            f = 0.5 * f * (1.0 + ops.erf(f * self.inv_sqrt2))
            f = ops.matmul(f, self.w2[i]) + self.b2[i]
            x = self._ln(f + x, self.ln2_w[i], self.ln2_b[i])
        return x


class PrefillStep(nn.Cell):
    """Prefill of a padded batch ``[B, S]`` (flattened), compiled once for its shape."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def construct(self, input_ids, positions, slot_mapping, block_tables):
        return self.model(input_ids, positions, slot_mapping, block_tables)


class DecodeStep(nn.Cell):
    """One token per batch row (S = 1), compiled once for its shape."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def construct(self, input_ids, positions, slot_mapping, block_tables):
        return self.model(input_ids, positions, slot_mapping, block_tables)


class KVWriteBench(nn.Cell):
    """Only the RoPE-write op family, for every layer, on scratch caches of the model's geometry
    (timing of that family; the model's caches are not touched)."""

    def __init__(self, model):
        super().__init__()
        self.num_layers = model.num_layers
        self.merged = model.merged
        shape = (model.num_blocks, model.block_size, model.heads, model.head_size)
        if self.merged:
            shape = (2,) + shape
        mk = lambda name: Parameter(Tensor(np.zeros(shape, np.float32), dtype=model.kv_dtype), name=name,  # noqa: E731
                                    requires_grad=False)
        self.c0 = ParameterTuple([mk(f"bench.c0.{i}") for i in range(self.num_layers)])
        self.c1 = ParameterTuple([mk(f"bench.c1.{i}") for i in range(self.num_layers)])
        self.quant = model.quant
        if self.quant:
            ss = (model.num_blocks, model.block_size, model.heads, 1)
            mks = lambda name: Parameter(Tensor(np.zeros(ss, np.float32)), name=name, requires_grad=False)  # noqa: E731
            self.s0 = ParameterTuple([mks(f"bench.s0.{i}") for i in range(self.num_layers)])
            self.s1 = ParameterTuple([mks(f"bench.s1.{i}") for i in range(self.num_layers)])
        self.cos_sin_cache = model.cos_sin_cache

    def construct(self, positions, q, k, v, slot_mapping):
        acc = ops.zeros(q.shape, ms.float32)
        for i in range(self.num_layers):
            if self.merged:
                out, k_out = A.rope_and_cache_merged(positions, q, k, v, self.cos_sin_cache, self.c0[i],
                                                     slot_mapping)
            elif self.quant:
                out, k_out = A.rope_and_cache(positions, q, k, v, self.cos_sin_cache, self.c0[i], self.c1[i],
                                              slot_mapping, k_scale_cache=self.s0[i], v_scale_cache=self.s1[i])
            else:
                out, k_out = A.rope_and_cache(positions, q, k, v, self.cos_sin_cache, self.c0[i], self.c1[i],
                                              slot_mapping)
            acc = acc + ops.cast(ops.depend(out, k_out), ms.float32)  # keep every layer's outputs alive
        return acc


def _host_bits(p):
    a = p.asnumpy()
    return a.view(f"u{a.dtype.itemsize}")
