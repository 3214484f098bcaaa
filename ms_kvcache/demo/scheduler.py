"""A small continuous-batching scheduler for the demo (pure Python and numpy, no MindSpore).

- :class:`BlockAllocator`: a LIFO free list of physical blocks with reference counts (a block shared by
  two sequences is freed when both let it go; the blocks freed last are the first handed out again).
- :class:`Sequence`: one request: prompt, generated tokens, block table, state.
- :class:`Scheduler`: decides every iteration what the model runner does, as a :class:`Plan`: which
  sequences to swap out (offload their KV to host and free their blocks), which to swap back in (reload
  into newly allocated blocks), which blocks to copy (copy-on-write of a shared block about to be
  written), one padded prefill batch of newly admitted requests, and one decode batch of every running
  sequence. After the runner has executed the plan, :meth:`Scheduler.finish_iteration` takes the sampled
  tokens and retires finished sequences.

Policies: at most ``num_rows`` sequences run (one batch row each). Requests arrive at given steps and
are admitted into free rows, swapped-out sequences first. A new request whose prompt starts with tokens a
running sequence has cached shares that sequence's blocks for the common prefix (whole blocks, and the
partly filled block after them, which is copied before the new request writes into it). When a request
arrives and every row is busy, the running sequence holding the most blocks is preempted (swapped out)
to admit it (``preempt_for_arrivals``); when the pool runs out of blocks, the most recently admitted
running sequence is preempted. A preempted sequence resumes in the first free row, in blocks other than
the ones it left when the pool has enough of them.
"""
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

__all__ = ["BlockAllocator", "Sequence", "Scheduler", "Plan", "Batch", "SwapOut", "SwapIn", "slots_of"]


class BlockAllocator:
    """Physical block ids ``0..num_blocks-1`` with reference counts.

    ``alloc`` pops the top of a LIFO free list; ``free`` drops one reference per block and pushes blocks
    whose count reaches 0 back on top, so a freed sequence's first block is the next one handed out."""

    def __init__(self, num_blocks):
        if num_blocks < 1:
            raise ValueError(f"BlockAllocator: argument 'num_blocks': expected >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))
        self._ref = [0] * num_blocks
        self.peak_used = 0
        self.allocations = 0

    @property
    def num_free(self):
        return len(self._free)

    @property
    def num_used(self):
        return self.num_blocks - len(self._free)

    def refcount(self, block):
        return self._ref[block]

    def alloc(self):
        """One free block (reference count 1). Raises RuntimeError when the pool is empty."""
        if not self._free:
            raise RuntimeError(f"out of KV-cache blocks (num_blocks={self.num_blocks})")
        b = self._free.pop()
        self._ref[b] = 1
        self.allocations += 1
        self.peak_used = max(self.peak_used, self.num_used)
        return b

    def alloc_avoiding(self, avoid):
        """Like :meth:`alloc`, but the most recently freed block not in ``avoid`` when there is one."""
        avoid = set(avoid)
        for j in range(len(self._free) - 1, -1, -1):
            if self._free[j] not in avoid:
                self._free.append(self._free.pop(j))
                break
        return self.alloc()

    def share(self, block):
        """One more reference to an allocated block."""
        if self._ref[block] <= 0:
            raise RuntimeError(f"block {block} is not allocated; it cannot be shared")
        self._ref[block] += 1

    def free(self, blocks):
        """Drop one reference to each of ``blocks``; blocks no longer referenced go back to the pool."""
        for b in reversed(list(blocks)):
            if self._ref[b] <= 0:
                raise RuntimeError(f"block {b} freed twice")
            self._ref[b] -= 1
            if self._ref[b] == 0:
                self._free.append(b)


def slots_of(blocks, start, stop, block_size):
    """int32 slots of token positions ``start..stop-1`` of a sequence with block table ``blocks``."""
    pos = np.arange(start, stop)
    return (np.asarray(blocks, np.int64)[pos // block_size] * block_size + pos % block_size).astype(np.int32)


@dataclass
class Sequence:
    """One request.

    ``cached``: tokens whose K/V are in the cache (positions ``0..cached-1``); the next model step feeds
    ``tokens[cached:]`` (the prompt's rest in a prefill, the last generated token in a decode step).
    """

    seq_id: int
    prompt: list
    arrival: int = 0
    generated: list = field(default_factory=list)
    blocks: list = field(default_factory=list)
    state: str = "waiting"  # waiting | running | swapped | finished
    row: Optional[int] = None
    cached: int = 0
    admitted_at: Optional[int] = None
    finished_at: Optional[int] = None
    finish_reason: Optional[str] = None
    #: (donor sequence, tokens shared, blocks shared) when admitted with a shared prefix
    shared_prefix: Optional[tuple] = None
    admit_order: int = -1

    @property
    def tokens(self):
        return list(self.prompt) + list(self.generated)


@dataclass
class SwapOut:
    """Offload ``seq``'s K/V of positions ``0..num_tokens-1`` (at ``slots``, in ``blocks``) to host; the
    blocks are freed when the plan is made (the runner must offload before anything else writes them; the
    plan's decode batch gets other blocks when the pool has them, so that the offload may run beside it)."""

    seq: int
    num_tokens: int
    blocks: list
    slots: np.ndarray
    reason: str


@dataclass
class SwapIn:
    """Reload ``seq``'s offloaded K/V into ``blocks`` (``slots``), newly allocated."""

    seq: int
    num_tokens: int
    blocks: list
    slots: np.ndarray
    old_blocks: list


@dataclass
class Batch:
    """One model step: ``input_ids``, ``positions``, ``slot_mapping`` int32 ``[R*S]`` (row-major over R
    batch rows of S tokens; padding: token 0, position 0, slot -1), ``block_tables`` int32
    ``[R, max_blocks_per_seq]`` (unused entries 0: never visible through the causal mask), ``logit_index``
    int32 ``[R]`` (the flat row whose logits each batch row returns), ``rows``: ``{row: seq_id}``."""

    kind: str
    input_ids: np.ndarray
    positions: np.ndarray
    slot_mapping: np.ndarray
    block_tables: np.ndarray
    logit_index: np.ndarray
    rows: dict


@dataclass
class Plan:
    """What the runner does in one iteration, in this order: ``swap_out``, ``swap_in``, ``copies``
    (``[(src, dst)]`` block copies), ``prefill``, ``decode``."""

    step: int
    swap_out: List[SwapOut] = field(default_factory=list)
    swap_in: List[SwapIn] = field(default_factory=list)
    copies: list = field(default_factory=list)
    #: {seq: [(src, dst)]}: the copy-on-write pairs made for that sequence
    copy_owner: dict = field(default_factory=dict)
    prefill: Optional[Batch] = None
    decode: Optional[Batch] = None
    admitted: list = field(default_factory=list)


class Scheduler:
    """Continuous batching over a fixed number of batch rows and a block pool.

    Args:
        prompts: one token-id list per request.
        arrivals: the iteration at which each request arrives (default: all at 0).
        num_rows: batch rows (sequences running at once).
        num_blocks, block_size: the pool.
        max_blocks_per_seq: block-table width; a sequence never needs more (prompt + max_new_tokens).
        prefill_len: tokens per row of a prefill batch (S; the longest prompt fits).
        max_new_tokens: completion budget; stop_ids: tokens that end a completion.
        preempt_for_arrivals: preempt the running sequence with the most blocks when a request arrives and
            every row is busy (else it waits for a free row).

    Raises:
        ValueError: a prompt that is empty, longer than ``prefill_len``, or whose prompt + budget exceeds
            ``max_blocks_per_seq * block_size``.
    """

    def __init__(self, prompts, num_rows, num_blocks, block_size, max_blocks_per_seq, prefill_len, max_new_tokens,
                 stop_ids=(), arrivals=None, preempt_for_arrivals=True):
        self.bs = block_size
        self.num_rows = num_rows
        self.max_blocks = max_blocks_per_seq
        self.prefill_len = prefill_len
        self.max_new_tokens = max_new_tokens
        self.stop_ids = set(int(t) for t in stop_ids)
        self.preempt_for_arrivals = preempt_for_arrivals
        self.alloc = BlockAllocator(num_blocks)
        arrivals = [0] * len(prompts) if arrivals is None else list(arrivals)
        if len(arrivals) != len(prompts):
            raise ValueError(f"Scheduler: argument 'arrivals': expected {len(prompts)} entries, got {len(arrivals)}")
        self.seqs = []
        for i, (p, a) in enumerate(zip(prompts, arrivals)):
            p = [int(t) for t in p]
            if not p or len(p) > prefill_len:
                raise ValueError(f"Scheduler: prompt {i}: expected 1..{prefill_len} tokens (prefill_len), got {len(p)}")
            if len(p) + max_new_tokens > max_blocks_per_seq * block_size:
                raise ValueError(f"Scheduler: prompt {i}: {len(p)} tokens + max_new_tokens {max_new_tokens} exceed "
                                 f"max_blocks_per_seq * block_size = {max_blocks_per_seq * block_size}")
            self.seqs.append(Sequence(i, p, arrival=int(a)))
        self.rows = [None] * num_rows
        self.step = 0
        self._admits = 0
        self.events = []  # (step, text) for the report
        self.swap_log = []  # (SwapOut, SwapIn or None)

    # ------------------------------------------------------------------ helpers
    def _running(self):
        return [s for s in self.seqs if s.state == "running"]

    def done(self):
        return all(s.state == "finished" for s in self.seqs)

    def _free_row(self):
        return next((r for r, s in enumerate(self.rows) if s is None), None)

    def _swap_out(self, plan, seq, reason):
        n = seq.cached
        so = SwapOut(seq.seq_id, n, list(seq.blocks), slots_of(seq.blocks, 0, n, self.bs), reason)
        self.alloc.free(seq.blocks)
        seq.blocks = []
        self.rows[seq.row] = None
        seq.row = None
        seq.state = "swapped"
        plan.swap_out.append(so)
        self.swap_log.append([so, None])
        self.events.append((self.step, f"sequence {seq.seq_id} preempted ({reason}): {n} tokens offloaded, "
                                       f"blocks {so.blocks} freed"))

    def _take_row(self, seq):
        r = self._free_row()
        self.rows[r] = seq
        seq.row = r
        seq.state = "running"
        seq.admit_order = self._admits
        self._admits += 1

    def _alloc_block(self, plan, for_seq, avoid=()):
        """A free block (one not in ``avoid`` when there is one); when the pool is empty, preempt the most recently
        admitted running sequence (vLLM's policy), which may be ``for_seq`` itself: None then. RuntimeError if
        nothing can be preempted."""
        fresh = {si.seq for si in plan.swap_in} | set(plan.admitted)  # their KV is not in the cache yet
        while self.alloc.num_free == 0:
            victims = [s for s in self._running() if s.blocks and s.seq_id not in fresh]
            if not victims:
                raise RuntimeError(f"out of KV-cache blocks (num_blocks={self.alloc.num_blocks}) with no sequence "
                                   f"to preempt")
            victim = max(victims, key=lambda s: s.admit_order)
            self._swap_out(plan, victim, "out of blocks")
            if victim is for_seq:
                return None
        return self.alloc.alloc_avoiding(avoid) if avoid else self.alloc.alloc()

    def _make_writable(self, plan, seq, start, stop, avoid=()):
        """Blocks for positions ``start..stop-1``: allocate missing ones (not from ``avoid`` when possible), copy
        shared ones (copy-on-write). Returns False when ``seq`` itself was preempted for want of blocks."""
        for idx in range(start // self.bs, -(-stop // self.bs)):
            if idx == len(seq.blocks):
                b = self._alloc_block(plan, seq, avoid)
                if b is None:
                    return False
                seq.blocks.append(b)
            elif self.alloc.refcount(seq.blocks[idx]) > 1:
                src = seq.blocks[idx]
                dst = self._alloc_block(plan, seq, avoid)
                if dst is None:
                    return False
                self.alloc.free([src])
                seq.blocks[idx] = dst
                plan.copies.append((src, dst))
                plan.copy_owner.setdefault(seq.seq_id, []).append((src, dst))
                self.events.append((self.step, f"sequence {seq.seq_id}: copy-on-write of shared block {src} -> {dst}"))
        return True

    def _blocks_to_admit(self, seq, donors):
        """New blocks ``seq``'s prompt needs, given the whole blocks it could share."""
        shared = max((self._common(d, seq) for d in donors), default=0) // self.bs
        return -(-len(seq.prompt) // self.bs) - shared

    @staticmethod
    def _common(donor, seq):
        cached = donor.tokens[:donor.cached]
        n, limit = 0, min(len(cached), len(seq.prompt) - 1)
        while n < limit and cached[n] == seq.prompt[n]:
            n += 1
        return n

    def _share_prefix(self, seq, donors):
        """Share the longest cached prefix of a running sequence (at most ``len(prompt) - 1`` tokens: the
        last prompt token is computed for its logits)."""
        best, best_n = None, 0
        for d in donors:
            n = self._common(d, seq)
            if n > best_n:
                best, best_n = d, n
        if best is None:
            return
        nblk = -(-best_n // self.bs)
        for b in best.blocks[:nblk]:
            self.alloc.share(b)
        seq.blocks = list(best.blocks[:nblk])
        seq.cached = best_n
        seq.shared_prefix = (best.seq_id, best_n, list(seq.blocks))
        self.events.append((self.step, f"sequence {seq.seq_id} shares {best_n} prompt tokens (blocks {seq.blocks}) "
                                       f"with sequence {best.seq_id}"))

    def _table(self):
        bt = np.zeros((self.num_rows, self.max_blocks), np.int32)
        for r, s in enumerate(self.rows):
            if s is not None:
                bt[r, :len(s.blocks)] = s.blocks
        return bt

    # ------------------------------------------------------------------ planning
    def plan(self, forced_preempt=False):
        """The :class:`Plan` of the next iteration (``forced_preempt``: preempt the running sequence with
        the most blocks even when a row is free)."""
        plan = Plan(self.step)
        arrived = [s for s in self.seqs if s.state == "waiting" and s.arrival <= self.step]
        busy = self._free_row() is None
        if self._running() and (forced_preempt or (arrived and busy and self.preempt_for_arrivals)):
            victim = max(self._running(), key=lambda s: (len(s.blocks), -s.seq_id))
            why = f"to admit sequence {arrived[0].seq_id}" if arrived and busy else "forced"
            self._swap_out(plan, victim, why)
        # swapped-out sequences resume first (in the order they were preempted), then arrivals
        just_out = {so.seq for so in plan.swap_out}
        for seq in [s for s in self.seqs if s.state == "swapped" and s.seq_id not in just_out]:
            need = -(-seq.cached // self.bs)
            if self._free_row() is None or self.alloc.num_free < -(-(seq.cached + 1) // self.bs):
                break  # (room for its next token too)
            old = next(so for so, si in reversed(self.swap_log) if so.seq == seq.seq_id and si is None)
            # blocks other than the ones it left when the pool allows: the reload provably goes to new places
            seq.blocks = [self.alloc.alloc_avoiding(old.blocks) for _ in range(need)]
            self._take_row(seq)
            si = SwapIn(seq.seq_id, seq.cached, list(seq.blocks), slots_of(seq.blocks, 0, seq.cached, self.bs),
                        old.blocks)
            plan.swap_in.append(si)
            for entry in self.swap_log:
                if entry[0] is old:
                    entry[1] = si
            self.events.append((self.step, f"sequence {seq.seq_id} reloaded into blocks {si.blocks} "
                                           f"(was {old.blocks})"))
        donors = [s for s in self._running() if s.cached > 0]
        for seq in arrived:
            if self._free_row() is None or self.alloc.num_free < self._blocks_to_admit(seq, donors):
                break
            self._share_prefix(seq, donors)
            self._take_row(seq)
            seq.admitted_at = self.step
            plan.admitted.append(seq.seq_id)
            self._make_writable(plan, seq, seq.cached, len(seq.prompt))
            self.events.append((self.step, f"sequence {seq.seq_id} admitted into row {seq.row}: prefill of "
                                           f"{len(seq.prompt) - seq.cached} tokens"))
        if plan.admitted:
            plan.prefill = self._prefill_batch([self.seqs[i] for i in plan.admitted])
        dec = [s for s in self._running() if s.seq_id not in plan.admitted and s.generated]
        # the decode runs while this plan's swapped-out sequences are saved, layer by layer (the runner's layer loop):
        # its new blocks are others than theirs when the pool allows (the copies and the prefill run after the saves)
        saving = {b for so in plan.swap_out for b in so.blocks}
        for s in dec:
            if s.state == "running":  # (a preemption for blocks may have swapped it out meanwhile)
                self._make_writable(plan, s, s.cached, s.cached + 1, avoid=saving)
        dec = [s for s in dec if s.state == "running"]  # a preemption for blocks may have removed one
        if dec:
            plan.decode = self._decode_batch(dec)
        if plan.prefill is not None:  # tables may have changed (copy-on-write while planning the decode)
            plan.prefill.block_tables = self._table()
        return plan

    def _prefill_batch(self, seqs):
        R, S = self.num_rows, self.prefill_len
        ids = np.zeros((R, S), np.int32)
        pos = np.zeros((R, S), np.int32)
        slots = np.full((R, S), -1, np.int32)
        last = np.arange(R, dtype=np.int32) * S
        rows = {}
        for s in seqs:
            n = len(s.prompt) - s.cached
            r = s.row
            ids[r, :n] = s.prompt[s.cached:]
            pos[r, :n] = np.arange(s.cached, len(s.prompt))
            slots[r, :n] = slots_of(s.blocks, s.cached, len(s.prompt), self.bs)
            last[r] = r * S + n - 1
            rows[r] = s.seq_id
        return Batch("prefill", ids.reshape(-1), pos.reshape(-1), slots.reshape(-1), self._table(), last, rows)

    def _decode_batch(self, seqs):
        R = self.num_rows
        ids = np.zeros(R, np.int32)
        pos = np.zeros(R, np.int32)
        slots = np.full(R, -1, np.int32)
        rows = {}
        for s in seqs:
            ids[s.row] = s.generated[-1]
            pos[s.row] = s.cached
            slots[s.row] = slots_of(s.blocks, s.cached, s.cached + 1, self.bs)[0]
            rows[s.row] = s.seq_id
        return Batch("decode", ids, pos, slots, self._table(), np.arange(R, dtype=np.int32), rows)

    # ------------------------------------------------------------------ results
    def finish_iteration(self, plan, prefill_tokens=None, decode_tokens=None):
        """Record the tokens sampled for each batch row (``{row: token}``), retire finished sequences
        (their blocks freed, their rows released) and advance the step."""
        for batch, toks in ((plan.prefill, prefill_tokens), (plan.decode, decode_tokens)):
            if batch is None:
                continue
            for r, sid in batch.rows.items():
                s = self.seqs[sid]
                s.cached = len(s.prompt) if batch.kind == "prefill" else s.cached + 1
                s.generated.append(int(toks[r]))
        for s in self._running():
            last = s.generated[-1] if s.generated else None
            if last is not None and (last in self.stop_ids or len(s.generated) >= self.max_new_tokens):
                s.state = "finished"
                s.finished_at = self.step
                s.finish_reason = "stop token" if last in self.stop_ids else "token budget"
                self.alloc.free(s.blocks)
                self.rows[s.row] = None
                s.row = None
                self.events.append((self.step, f"sequence {s.seq_id} finished ({s.finish_reason}, "
                                               f"{len(s.generated)} tokens)"))
        self.step += 1
