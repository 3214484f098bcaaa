"""MindSpore GRAPH_MODE cells of the demo's Llama.

- :class:`LlamaWeights`: the weights as Parameters (q / k / v rows fused into one matrix, gate / up into
  another; Linear weights stay ``[out, in]`` and run through ``ops.dense``).
- :class:`PagedLlama`: the model over paged KV caches. Per layer: RMSNorm, the fused q/k/v projection,
  ``rope_reshape_and_cache`` (RoPE on q and k, and the k / v write into the layer's cache, one op), GQA
  attention of the step's queries over the sequence's cached blocks gathered through the block table
  inside the graph (causal mask from the positions), output projection, residual, RMSNorm, SwiGLU MLP,
  residual. The logits of one row per batch row (``logit_index``) come out: the last prompt token of a
  prefill row, the token of a decode row.
- :class:`PrefillStep` / :class:`DecodeStep`: the same model, each compiled once for its bucketed shape.
- :class:`RecomputeLlama`: the same weights, no cache: every step recomputes the whole sequence with
  dense causal attention (RoPE with MindSpore ops). The baseline of the speed-up the cache buys.
- :class:`KVWriteBench`: only the RoPE-write op of every layer, on scratch caches (its share of a step).
"""
import math

import numpy as np
import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops

from ms_kvcache.demo import ops_adapter as A
from ms_kvcache.demo.model import layer_names, neox_weights

__all__ = ["LlamaWeights", "PagedLlama", "PrefillStep", "DecodeStep", "LayerLoop", "RecomputeLlama", "KVWriteBench",
           "MS_DTYPES", "DATA_DTYPES"]

MS_DTYPES = {"float32": ms.float32, "bfloat16": ms.bfloat16, "int8": ms.int8}
#: dtype of the q/k/v handed to the RoPE-write op per cache dtype (an int8 cache quantizes float32 data)
DATA_DTYPES = {"float32": ms.float32, "bfloat16": ms.bfloat16, "int8": ms.float32}


def _param(a, name):
    return Parameter(Tensor(np.ascontiguousarray(a, np.float32)), name=name, requires_grad=False)


class LlamaWeights(nn.Cell):
    """The weights as Parameters.

    Args:
        cfg (LlamaConfig); weights: llama.cpp names, float32, q / k rows in GGUF (GPT-J) order.
        rope_style: "neox" (q / k rows un-permuted, :func:`ms_kvcache.demo.model.neox_weights`) or "gptj"
            (the GGUF rows as stored).
    """

    def __init__(self, cfg, weights, rope_style):
        super().__init__()
        if rope_style not in ("neox", "gptj"):
            raise ValueError(f"rope_style: expected 'neox' or 'gptj', got {rope_style!r}")
        w = neox_weights(weights, cfg) if rope_style == "neox" else weights
        self.embed = _param(w["token_embd.weight"], "token_embd")
        self.tied = cfg.tied_embeddings
        if not self.tied:
            self.lm_head = _param(w["output.weight"], "lm_head")
        self.final_norm = _param(w["output_norm.weight"], "output_norm")
        names = [layer_names(i) for i in range(cfg.num_layers)]

        def per_layer(tag, build):
            return ParameterTuple([_param(build(n), f"l{i}.{tag}") for i, n in enumerate(names)])

        self.attn_norm = per_layer("attn_norm", lambda n: w[n["attn_norm"]])
        self.wqkv = per_layer("wqkv", lambda n: np.concatenate([w[n["attn_q"]], w[n["attn_k"]], w[n["attn_v"]]]))
        self.wo = per_layer("wo", lambda n: w[n["attn_output"]])
        self.ffn_norm = per_layer("ffn_norm", lambda n: w[n["ffn_norm"]])
        self.w_gate_up = per_layer("w_gate_up", lambda n: np.concatenate([w[n["ffn_gate"]], w[n["ffn_up"]]]))
        self.w_down = per_layer("w_down", lambda n: w[n["ffn_down"]])


class _LlamaBase(nn.Cell):
    """Shared pieces of the paged model, the recompute baseline and the layer loop's graphs; the per-layer weights
    are arguments (``weights_cell`` may be None: a graph whose weights are all inputs)."""

    def __init__(self, cfg, weights_cell):
        super().__init__()
        if weights_cell is not None:
            self.w = weights_cell
        self.num_layers = cfg.num_layers
        self.heads, self.kv_heads, self.head_size = cfg.num_heads, cfg.num_kv_heads, cfg.head_size
        self.group = cfg.num_heads // cfg.num_kv_heads
        self.q_size, self.kv_size = cfg.q_size, cfg.kv_size
        self.ff = cfg.intermediate_size
        self.hidden = cfg.hidden_size
        self.eps = cfg.rms_norm_eps
        self.scale = 1.0 / math.sqrt(cfg.head_size)

    def _rms(self, x, g):
        return x * ops.rsqrt((x * x).mean(-1, keep_dims=True) + self.eps) * g

    def _mlp(self, x, ffn_norm, w_gate_up, w_down):
        h = self._rms(x, ffn_norm)
        gu = ops.dense(h, w_gate_up)
        return x + ops.dense(ops.silu(gu[:, :self.ff]) * gu[:, self.ff:], w_down)

    def _qkv(self, x, attn_norm, wqkv, n):
        h = self._rms(x, attn_norm)
        qkv = ops.dense(h, wqkv)
        q = qkv[:, :self.q_size].reshape((n, self.heads, self.head_size))
        k = qkv[:, self.q_size:self.q_size + self.kv_size].reshape((n, self.kv_heads, self.head_size))
        v = qkv[:, self.q_size + self.kv_size:].reshape((n, self.kv_heads, self.head_size))
        return q, k, v

    def _attend(self, q, keys, vals, bias, nb_rows, s):
        """GQA attention. q ``[n, H, D]`` (rows ``[R, s]``), keys / vals ``[R, K, Hkv, D]``, bias
        ``[R, 1, G*s, K]`` -> ``[n, H*D]``. Query head ``j`` reads KV head ``j // G``."""
        n = nb_rows * s
        G, Hkv, D = self.group, self.kv_heads, self.head_size
        qh = q.reshape((nb_rows, s, Hkv, G, D)).transpose(0, 2, 3, 1, 4).reshape((nb_rows, Hkv, G * s, D))
        scores = ops.matmul(qh, keys.transpose(0, 2, 3, 1)) * self.scale + bias  # [R, Hkv, G*s, K]
        probs = ops.softmax(scores, -1)
        ctx = ops.matmul(probs, vals.transpose(0, 2, 1, 3))  # [R, Hkv, G*s, D]
        return ctx.reshape((nb_rows, Hkv, G, s, D)).transpose(0, 3, 1, 2, 4).reshape((n, self.q_size))

    def _logits(self, x, logit_index, final_norm, head):
        h = self._rms(ops.gather(x, logit_index, 0), final_norm)
        return ops.dense(h, head)


class _PagedBase(_LlamaBase):
    """The paged model's per-step math shared by :class:`PagedLlama` (one graph of the whole step) and the layer
    loop's graphs (:class:`LayerLoop`): the cache geometry and the dtype as scalars, the weights as arguments."""

    def _paged_scalars(self, num_blocks, block_size, max_blocks_per_seq, kv_dtype):
        self.kv_dtype = MS_DTYPES[kv_dtype]
        self.data_dtype = DATA_DTYPES[kv_dtype]
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.max_blocks_per_seq = max_blocks_per_seq
        self.kv_len = max_blocks_per_seq * block_size
        self.kv_index = Tensor(np.arange(self.kv_len, dtype=np.int32))

    def _prologue(self, embed, input_ids, positions, block_tables):
        """The embeddings and what every layer shares: the causal mask's bias, the block ids (K and V planes)."""
        nb_rows = block_tables.shape[0]
        s = input_ids.shape[0] // nb_rows
        x = ops.gather(embed, input_ids, 0)
        # causal mask over the sequence's cache: key j is visible to a query at position p iff j <= p
        qpos = ops.broadcast_to(positions.reshape((nb_rows, 1, 1, s)), (nb_rows, 1, self.group, s))
        visible = self.kv_index.reshape((1, 1, 1, self.kv_len)) <= qpos.reshape((nb_rows, 1, self.group * s, 1))
        bias = (1.0 - ops.cast(visible, ms.float32)) * -1e9
        bt = block_tables.reshape((-1,))
        bt_v = bt + self.num_blocks  # merged caches: the V plane's blocks
        return x, bias, bt, bt_v

    def _project(self, x, attn_norm, wqkv):
        """A layer up to its first cache access: q / k / v, in the dtype handed to the RoPE-write op."""
        q, k, v = self._qkv(x, attn_norm, wqkv, x.shape[0])
        if self.data_dtype != ms.float32:
            q = ops.cast(q, self.data_dtype)
            k = ops.cast(k, self.data_dtype)
            v = ops.cast(v, self.data_dtype)
        return q, k, v

    def _finish(self, x, q_rot, keys, vals, bias, wo, ffn_norm, w_gate_up, w_down):
        """A layer after its cache accesses: attention over the gathered blocks, output projection, MLP."""
        nb_rows = bias.shape[0]
        s = x.shape[0] // nb_rows
        x = x + ops.dense(self._attend(q_rot, keys, vals, bias, nb_rows, s), wo)
        return self._mlp(x, ffn_norm, w_gate_up, w_down)


class PagedLlama(_PagedBase):
    """The model with its paged KV caches.

    Args:
        cfg (LlamaConfig), weights_cell (LlamaWeights).
        num_blocks, block_size: cache geometry; each layer's cache is ``[num_blocks, block_size,
            num_kv_heads, head_size]`` (BSND; two of them, or one ``[2, num_blocks, block_size, num_kv_heads,
            head_size]`` for ``kv_format="merged"``).
        max_blocks_per_seq: width of the block tables (the attention reads that many blocks per row).
        kv_dtype: "float32" | "bfloat16" (caches, and the q/k/v handed to the RoPE-write op) | "int8"
            (SEPARATE_KV only: int8 caches written with dynamic per-token scales from float32 q/k/v, and
            float32 scale caches ``k_scale_caches`` / ``v_scale_caches`` ``[num_blocks, block_size,
            num_kv_heads, 1]`` per layer; the attention reads ``code * scale``, docs/quantization.md).
        kv_format: "separate" | "merged".
        cos_sin_cache: Tensor ``[max_position, head_size]`` float32.
        is_neox_style: the rotation of the RoPE-write op (True with ``LlamaWeights(rope_style="neox")``).

    construct(input_ids, positions, slot_mapping, block_tables, logit_index) -> logits float32 ``[R, vocab]``
        input_ids, positions, slot_mapping: int32 ``[R*S]`` (R batch rows of S query tokens; padding rows
        and tokens have slot -1); block_tables: int32 ``[R, max_blocks_per_seq]``; logit_index: int32 ``[R]``,
        the flat row whose logits each batch row returns.
    """

    def __init__(self, cfg, weights_cell, num_blocks, block_size, max_blocks_per_seq, kv_dtype, kv_format,
                 cos_sin_cache, is_neox_style):
        super().__init__(cfg, weights_cell)
        L = cfg.num_layers
        self.config = cfg
        self.kv_dtype_name = kv_dtype
        self.kv_format = kv_format
        self.merged = kv_format == "merged"
        self._paged_scalars(num_blocks, block_size, max_blocks_per_seq, kv_dtype)
        self.quant = kv_dtype == "int8"
        self.is_neox_style = bool(is_neox_style)
        if self.quant and self.merged:
            raise ValueError("PagedLlama: argument 'kv_dtype': int8 caches are demonstrated with kv_format "
                             "'separate' only")
        shape = (num_blocks, block_size, cfg.num_kv_heads, cfg.head_size)

        def caches(tag, shp, dtype):
            z = np.zeros(shp, np.float32)
            return ParameterTuple([Parameter(Tensor(z, dtype=dtype), name=f"{tag}.{i}", requires_grad=False)
                                   for i in range(L)])

        if self.merged:
            self.kv_caches = caches("kv_cache", (2,) + shape, self.kv_dtype)
        else:
            self.key_caches = caches("key_cache", shape, self.kv_dtype)
            self.value_caches = caches("value_cache", shape, self.kv_dtype)
        if self.quant:
            sshape = shape[:3] + (1,)
            self.k_scale_caches = caches("k_scale_cache", sshape, ms.float32)
            self.v_scale_caches = caches("v_scale_cache", sshape, ms.float32)
        self.cos_sin_cache = Parameter(cos_sin_cache, name="cos_sin_cache", requires_grad=False)
        self.cos_sin_table = cos_sin_cache

    # ------------------------------------------------------------------ host-side views of the caches
    def cache_planes(self):
        """[(K cache, V cache) per layer] as numpy copies of the exact bits (bf16 -> uint16, float32 -> uint32)."""
        if self.merged:
            out = []
            for p in self.kv_caches:
                kv = _host_bits(p)
                out.append((kv[0].copy(), kv[1].copy()))
            return out
        return [(_host_bits(k), _host_bits(v)) for k, v in zip(self.key_caches, self.value_caches)]

    def scale_planes(self):
        """int8 caches: [(K scale cache, V scale cache) per layer] as uint32 bits, else []."""
        if not self.quant:
            return []
        return [(_host_bits(k), _host_bits(v)) for k, v in zip(self.k_scale_caches, self.v_scale_caches)]

    def cache_nbytes(self):
        """Bytes of every layer's caches (int8: the scale caches included)."""
        ps = tuple(self.kv_caches) if self.merged else tuple(self.key_caches) + tuple(self.value_caches)
        if self.quant:
            ps += tuple(self.k_scale_caches) + tuple(self.v_scale_caches)
        return sum(p.nbytes for p in ps)

    # ------------------------------------------------------------------ graph
    def _f32(self, cache):
        # CPU Gather has no bf16 / int8 kernel worth using: widen the (small) cache first
        return cache if self.kv_dtype == ms.float32 else ops.cast(cache, ms.float32)

    def _paged_kv(self, i, q, k, v, positions, slot_mapping, bt, bt_v, nb_rows):
        """RoPE + cache write of this step's rows, then every cached K / V row of the batch's blocks."""
        shape = (nb_rows, self.kv_len, self.kv_heads, self.head_size)
        if self.merged:
            q_rot, k_rot = A.rope_and_cache_merged(positions, q, k, v, self.cos_sin_cache, self.kv_caches[i],
                                                   slot_mapping, self.is_neox_style)
            # [2, nb, ...] read as [2 * nb, ...]: V block b is row nb + b (a Gather on axis 0; on axis 1 or
            # after kv[0] / kv[1] slices MindSpore's CPU kernels are several times slower)
            kv = self._f32(self.kv_caches[i]).reshape((2 * self.num_blocks, self.block_size, self.kv_heads,
                                                       self.head_size))
            keys, vals = ops.gather(kv, bt, 0).reshape(shape), ops.gather(kv, bt_v, 0).reshape(shape)
        elif self.quant:  # int8 codes and per-token scales written; read back dequantized: code * scale
            q_rot, k_rot = A.rope_and_cache(positions, q, k, v, self.cos_sin_cache, self.key_caches[i],
                                            self.value_caches[i], slot_mapping, self.is_neox_style,
                                            k_scale_cache=self.k_scale_caches[i], v_scale_cache=self.v_scale_caches[i])
            keys = (ops.gather(self._f32(self.key_caches[i]), bt, 0)
                    * ops.gather(self.k_scale_caches[i], bt, 0)).reshape(shape)
            vals = (ops.gather(self._f32(self.value_caches[i]), bt, 0)
                    * ops.gather(self.v_scale_caches[i], bt, 0)).reshape(shape)
        else:
            q_rot, k_rot = A.rope_and_cache(positions, q, k, v, self.cos_sin_cache, self.key_caches[i],
                                            self.value_caches[i], slot_mapping, self.is_neox_style)
            keys = ops.gather(self._f32(self.key_caches[i]), bt, 0).reshape(shape)
            vals = ops.gather(self._f32(self.value_caches[i]), bt, 0).reshape(shape)
        q_rot = ops.depend(q_rot, k_rot)  # the rotated keys are read back from the cache
        return ops.cast(q_rot, ms.float32), keys, vals

    def construct(self, input_ids, positions, slot_mapping, block_tables, logit_index):
        w = self.w
        nb_rows = block_tables.shape[0]
        x, bias, bt, bt_v = self._prologue(w.embed, input_ids, positions, block_tables)
        for i in range(self.num_layers):
            q, k, v = self._project(x, w.attn_norm[i], w.wqkv[i])
            q_rot, keys, vals = self._paged_kv(i, q, k, v, positions, slot_mapping, bt, bt_v, nb_rows)
            x = self._finish(x, q_rot, keys, vals, bias, w.wo[i], w.ffn_norm[i], w.w_gate_up[i], w.w_down[i])
        return self._logits(x, logit_index, w.final_norm, w.embed if w.tied else w.lm_head)


class PrefillStep(nn.Cell):
    """Prefill of a padded batch ``[R, S]`` (flattened), compiled once for its shape."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def construct(self, input_ids, positions, slot_mapping, block_tables, logit_index):
        return self.model(input_ids, positions, slot_mapping, block_tables, logit_index)


class DecodeStep(nn.Cell):
    """One token per batch row (S = 1), compiled once for its shape."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def construct(self, input_ids, positions, slot_mapping, block_tables, logit_index):
        return self.model(input_ids, positions, slot_mapping, block_tables, logit_index)


class _LoopPiece(_PagedBase):
    """One piece of a step for :class:`LayerLoop`: the model's scalars, no Parameter (every weight an input)."""

    def __init__(self, model, piece):
        super().__init__(model.config, None)
        self._paged_scalars(model.num_blocks, model.block_size, model.max_blocks_per_seq, model.kv_dtype_name)
        self.piece = piece

    def construct(self, *args):
        if self.piece == "prologue":
            return self._prologue(*args)
        if self.piece == "project":
            return self._project(*args)
        if self.piece == "finish":
            return self._finish(*args)
        return self._logits(*args)


def _alias(param):
    """A plain Tensor over ``param``'s memory (no copy; CPU memory). The layer loop's graphs take the weights as inputs:
    a graph compiled for plain Tensors serves every layer, one taking Parameters would be compiled per layer."""
    return Tensor.from_numpy(param.asnumpy())


class LayerLoop:
    """:class:`PagedLlama`'s step run layer by layer from Python, with a hook before each layer's first cache access and
    one after each layer: the steps that move a preempted sequence's KV layer by layer (``LayerwiseTransfer``).

    One compiled GRAPH_MODE graph of the whole step cannot wait for a layer's transfer, so per layer this runs two
    compiled graphs shared by all layers (the layer's weights are inputs: q/k/v projection; attention, output
    projection and MLP) and, between them, the layer's cache accesses as single PyNative ops on the caches'
    Parameters: the RoPE-write op and the gather of the step's blocks (:meth:`PagedLlama._paged_kv`, the same code the
    graph runs). The math is :class:`PagedLlama`'s; the logits equal the whole-step graph's to float32 rounding.

    Call it with the step's inputs (as :class:`DecodeStep`) and optionally ``before_cache(i)`` (runs after layer
    ``i``'s projection is launched, before anything touches its caches: a reload waits for layer ``i`` there) and
    ``after_layer(i)`` (runs once layer ``i``'s ops are launched: a save issues layer ``i`` there). Returns the logits
    as a numpy array (after every launched op has run).
    """

    def __init__(self, model):
        w = model.w
        self.model = model
        self.pieces = {name: _LoopPiece(model, name) for name in ("prologue", "project", "finish", "logits")}
        self.embed = _alias(w.embed)
        self.final_norm = _alias(w.final_norm)
        self.head = self.embed if w.tied else _alias(w.lm_head)
        self.layers = [tuple(_alias(p[i]) for p in (w.attn_norm, w.wqkv, w.wo, w.ffn_norm, w.w_gate_up, w.w_down))
                       for i in range(model.num_layers)]

    def warm_up(self, num_rows):
        """Run the loop once on a decode batch of ``num_rows`` padding rows (slot -1: the caches are not written):
        compiles the graphs for that shape, so that a later step's time is its run time."""
        m = self.model
        R = num_rows
        zero = np.zeros(R, np.int32)
        self(Tensor(zero), Tensor(zero), Tensor(np.full(R, -1, np.int32)),
             Tensor(np.zeros((R, m.max_blocks_per_seq), np.int32)), Tensor(zero))

    def __call__(self, input_ids, positions, slot_mapping, block_tables, logit_index, before_cache=None,
                 after_layer=None):
        m, p = self.model, self.pieces
        nb_rows = int(block_tables.shape[0])
        x, bias, bt, bt_v = p["prologue"](self.embed, input_ids, positions, block_tables)
        for i, (attn_norm, wqkv, wo, ffn_norm, w_gate_up, w_down) in enumerate(self.layers):
            q, k, v = p["project"](x, attn_norm, wqkv)
            if before_cache is not None:
                before_cache(i)
            q_rot, keys, vals = m._paged_kv(i, q, k, v, positions, slot_mapping, bt, bt_v, nb_rows)  # PyNative ops
            x = p["finish"](x, q_rot, keys, vals, bias, wo, ffn_norm, w_gate_up, w_down)
            if after_layer is not None:
                after_layer(i)
        return p["logits"](x, logit_index, self.final_norm, self.head).asnumpy()


class RecomputeLlama(_LlamaBase):
    """The same model without a KV cache: each call runs every token of every row through all layers
    (dense causal attention, RoPE with MindSpore ops: ``rotate_half`` for NeoX, interleaved pairs for GPT-J).

    construct(input_ids, positions, key_valid, logit_index) -> logits ``[R, vocab]``
        input_ids, positions: int32 ``[R*S]``; key_valid: float32 ``[R*S]`` (1 for a token, 0 for padding);
        logit_index: int32 ``[R]``.
    """

    def __init__(self, cfg, weights_cell, cos_sin_cache, is_neox_style):
        super().__init__(cfg, weights_cell)
        self.cos_sin_cache = Parameter(cos_sin_cache, name="recompute.cos_sin_cache", requires_grad=False)
        self.is_neox_style = bool(is_neox_style)
        self.half = cfg.head_size // 2

    def _rope(self, x, cos, sin):
        if self.is_neox_style:
            x1, x2 = x[..., :self.half], x[..., self.half:]
            return ops.concat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)
        shp = x.shape
        pairs = x.reshape(shp[:-1] + (self.half, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        return ops.stack((a * cos - b * sin, b * cos + a * sin), -1).reshape(shp)

    def construct(self, input_ids, positions, key_valid, logit_index):
        nb_rows = logit_index.shape[0]
        n = input_ids.shape[0]
        s = n // nb_rows
        cs = ops.gather(self.cos_sin_cache, positions, 0)  # [n, D]
        cos = cs[:, :self.half].reshape((n, 1, self.half))
        sin = cs[:, self.half:].reshape((n, 1, self.half))
        kpos = positions.reshape((nb_rows, 1, 1, s))
        qpos = ops.broadcast_to(positions.reshape((nb_rows, 1, 1, s)), (nb_rows, 1, self.group, s))
        visible = ops.cast(kpos <= qpos.reshape((nb_rows, 1, self.group * s, 1)), ms.float32) \
            * key_valid.reshape((nb_rows, 1, 1, s))
        bias = (1.0 - visible) * -1e9
        x = ops.gather(self.w.embed, input_ids, 0)
        for i in range(self.num_layers):
            q, k, v = self._qkv(x, self.w.attn_norm[i], self.w.wqkv[i], n)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            shape = (nb_rows, s, self.kv_heads, self.head_size)
            x = x + ops.dense(self._attend(q, k.reshape(shape), v.reshape(shape), bias, nb_rows, s), self.w.wo[i])
            x = self._mlp(x, self.w.ffn_norm[i], self.w.w_gate_up[i], self.w.w_down[i])
        return self._logits(x, logit_index, self.w.final_norm, self.w.embed if self.w.tied else self.w.lm_head)


class KVWriteBench(nn.Cell):
    """Only the RoPE-write op of every layer, on scratch caches of the model's geometry (the time of that
    op family per step; the model's caches are not touched)."""

    def __init__(self, model):
        super().__init__()
        self.num_layers = model.num_layers
        self.merged = model.merged
        self.quant = model.quant
        self.is_neox_style = model.is_neox_style
        shape = (model.num_blocks, model.block_size, model.kv_heads, model.head_size)
        if self.merged:
            shape = (2,) + shape

        def mk(tag, shp, dtype):
            return ParameterTuple([Parameter(Tensor(np.zeros(shp, np.float32), dtype=dtype), name=f"bench.{tag}.{i}",
                                             requires_grad=False) for i in range(self.num_layers)])

        self.c0 = mk("c0", shape, model.kv_dtype)
        self.c1 = mk("c1", shape, model.kv_dtype)
        if self.quant:
            self.s0 = mk("s0", shape[:3] + (1,), ms.float32)
            self.s1 = mk("s1", shape[:3] + (1,), ms.float32)
        self.cos_sin_cache = Parameter(model.cos_sin_table, name="bench.cos_sin_cache", requires_grad=False)

    def construct(self, positions, q, k, v, slot_mapping):
        acc = ops.zeros(q.shape, ms.float32)
        for i in range(self.num_layers):
            if self.merged:
                out, k_out = A.rope_and_cache_merged(positions, q, k, v, self.cos_sin_cache, self.c0[i], slot_mapping,
                                                     self.is_neox_style)
            elif self.quant:
                out, k_out = A.rope_and_cache(positions, q, k, v, self.cos_sin_cache, self.c0[i], self.c1[i],
                                              slot_mapping, self.is_neox_style, k_scale_cache=self.s0[i],
                                              v_scale_cache=self.s1[i])
            else:
                out, k_out = A.rope_and_cache(positions, q, k, v, self.cos_sin_cache, self.c0[i], self.c1[i],
                                              slot_mapping, self.is_neox_style)
            acc = acc + ops.cast(ops.depend(out, k_out), ms.float32)  # keep every layer's outputs alive
        return acc


class EmptyStep(nn.Cell):
    """A graph that does nearly nothing: the fixed cost of one graph call (subtracted from KVWriteBench)."""

    def construct(self, positions):
        return positions + 1


def _host_bits(p):
    a = p.asnumpy()
    return a.view(f"u{a.dtype.itemsize}").copy()
