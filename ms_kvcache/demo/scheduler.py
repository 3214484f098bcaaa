"""Block allocator, per-sequence block tables and the demo's schedule (pure Python, no MindSpore).

The schedule is computed up front as a list of :class:`Step` records (what a serving engine's
scheduler would hand its model runner at each iteration): one padded prefill batch, then one decode
token per running sequence per step (teacher forcing), with one sequence preempted mid-way (its KV
offloaded to host, its blocks freed and handed to others) and later reloaded into newly allocated blocks.
"""
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

__all__ = ["BlockAllocator", "Step", "Schedule", "build_schedule"]


class BlockAllocator:
    """Free list of physical block ids ``0..num_blocks-1``.

    ``alloc`` pops from the top of the list and ``free`` pushes back on top (LIFO), so the blocks a
    preempted sequence gives up are the first ones handed to the next sequence that needs a block.
    """

    def __init__(self, num_blocks):
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))
        self.peak_used = 0
        self.allocations = 0

    @property
    def num_used(self):
        return self.num_blocks - len(self._free)

    def alloc(self):
        """One free block id. Raises RuntimeError when the pool is empty."""
        if not self._free:
            raise RuntimeError(f"out of KV-cache blocks (num_blocks={self.num_blocks})")
        b = self._free.pop()
        self.allocations += 1
        self.peak_used = max(self.peak_used, self.num_used)
        return b

    def free(self, blocks):
        """Return ``blocks`` to the pool; the first of them is the next one allocated."""
        for b in reversed(list(blocks)):
            if b in self._free:
                raise RuntimeError(f"block {b} freed twice")
            self._free.append(b)


@dataclass
class Step:
    """One iteration of the schedule.

    kind: "prefill" | "decode" (a model step) or "offload" | "reload" (a KV transfer).
    Model steps: ``input_ids``, ``positions``, ``slot_mapping`` int32 ``[B * S]`` (row-major over the
    batch rows, S query tokens per row; padding rows: token 0, position 0, slot -1), ``block_tables``
    int32 ``[B, max_blocks_per_seq]`` (unused entries 0, never read thanks to the causal mask),
    ``checks``: (sequence, flat row indices, token positions) to compare with the reference.
    Transfers: ``seq``, ``slot_mapping`` of its tokens 0..n-1, ``blocks`` (before offload / after reload).
    """

    kind: str
    index: int
    input_ids: Optional[np.ndarray] = None
    positions: Optional[np.ndarray] = None
    slot_mapping: Optional[np.ndarray] = None
    block_tables: Optional[np.ndarray] = None
    checks: list = field(default_factory=list)
    seq: int = -1
    blocks: list = field(default_factory=list)


@dataclass
class Schedule:
    """The whole run: steps plus the figures the report needs."""

    steps: List[Step]
    num_blocks: int
    block_size: int
    max_blocks_per_seq: int
    prompt_lens: list
    peak_blocks: int
    allocations: int
    preempted: int
    offload_blocks: list
    reload_blocks: list
    #: P's old blocks that another sequence received while P was on host: {block: (seq, step index)}
    reused: dict
    prefill_tokens: int
    decode_tokens: int


def _slots(table, start, stop, bs):
    return [table[p // bs] * bs + p % bs for p in range(start, stop)]


def build_schedule(token_ids, block_size=16, prompt_fraction=0.4, preempt_at=3, offload_steps=10,
                   num_blocks=None):
    """Plan prefill, decode steps, one preemption (offload) and its reload.

    Args:
        token_ids: one list of token ids per sequence (all of length >= 2).
        block_size: tokens per cache block.
        prompt_fraction: share of each text prefilled (at least 1 token, at most len-1).
        preempt_at: decode step before which the running sequence with most tokens left is offloaded.
        offload_steps: decode steps the sequence stays on host; meanwhile other sequences take its
            freed blocks from the free list (the defaults make that happen for the demo's texts, and
            the report checks it).
        num_blocks: pool size; default: exactly the peak number of blocks the schedule needs.

    Raises:
        ValueError: a text is shorter than 2 tokens, or no sequence is running at ``preempt_at``.
        RuntimeError: ``num_blocks`` is too small for the schedule.
    """
    if num_blocks is None:
        probe = build_schedule(token_ids, block_size, prompt_fraction, preempt_at, offload_steps,
                               num_blocks=sum(-(-len(t) // block_size) for t in token_ids) + 1)
        num_blocks = probe.peak_blocks
    bs = block_size
    n = [len(t) for t in token_ids]
    if min(n) < 2:
        raise ValueError("build_schedule: every text needs at least 2 tokens")
    B = len(n)
    mb = max(-(-x // bs) for x in n)
    prompt = [min(x - 1, max(1, int(round(x * prompt_fraction)))) for x in n]
    alloc = BlockAllocator(num_blocks)
    tables = [[] for _ in range(B)]
    cur = [0] * B
    state = ["running"] * B
    steps = []
    owner = {}

    def bt_array():
        a = np.zeros((B, mb), np.int32)
        for i, t in enumerate(tables):
            a[i, :len(t)] = t
        return a

    def take_block(i, step_index):
        b = alloc.alloc()
        tables[i].append(b)
        owner[b] = (i, step_index)
        return b

    # ---- prefill: one padded batch [B, S]
    S = max(prompt)
    ids = np.zeros((B, S), np.int32)
    pos = np.zeros((B, S), np.int32)
    slots = np.full((B, S), -1, np.int32)
    checks = []
    for i in range(B):
        for _ in range(-(-prompt[i] // bs)):
            take_block(i, 0)
        ids[i, :prompt[i]] = token_ids[i][:prompt[i]]
        pos[i, :prompt[i]] = np.arange(prompt[i])
        slots[i, :prompt[i]] = _slots(tables[i], 0, prompt[i], bs)
        checks.append((i, np.arange(i * S, i * S + prompt[i]), np.arange(prompt[i])))
        cur[i] = prompt[i]
    steps.append(Step("prefill", 0, ids.reshape(-1), pos.reshape(-1), slots.reshape(-1), bt_array(), checks))

    preempted, off_blocks, re_blocks, reused = -1, [], [], {}
    swapped_at = None
    d = 0
    decode_tokens = 0
    while any(s != "finished" for s in state):
        if d == preempt_at:
            running = [i for i in range(B) if state[i] == "running"]
            if not running:
                raise ValueError(f"build_schedule: no sequence is running at decode step {preempt_at}")
            preempted = max(running, key=lambda i: (n[i] - cur[i], -i))
            p = preempted
            off_blocks = list(tables[p])
            steps.append(Step("offload", len(steps), slot_mapping=np.array(_slots(tables[p], 0, cur[p], bs),
                                                                            np.int32), seq=p, blocks=off_blocks))
            alloc.free(tables[p])
            tables[p] = []
            state[p] = "swapped"
            swapped_at = d
        if swapped_at is not None and d == swapped_at + offload_steps and state[preempted] == "swapped":
            p = preempted
            for _ in range(-(-cur[p] // bs)):
                take_block(p, len(steps))
            re_blocks = list(tables[p])
            steps.append(Step("reload", len(steps), slot_mapping=np.array(_slots(tables[p], 0, cur[p], bs),
                                                                           np.int32), seq=p, blocks=re_blocks))
            state[p] = "running"
        ids = np.zeros(B, np.int32)
        pos = np.zeros(B, np.int32)
        slots = np.full(B, -1, np.int32)
        checks = []
        index = len(steps)
        for i in range(B):
            if state[i] != "running":
                continue
            if cur[i] == len(tables[i]) * bs:
                b = take_block(i, index)
                if swapped_at is not None and state[preempted] == "swapped" and b in off_blocks:
                    reused.setdefault(b, (i, index))
            ids[i] = token_ids[i][cur[i]]
            pos[i] = cur[i]
            slots[i] = _slots(tables[i], cur[i], cur[i] + 1, bs)[0]
            checks.append((i, np.array([i]), np.array([cur[i]])))
        if checks:
            steps.append(Step("decode", index, ids, pos, slots, bt_array(), checks))
            decode_tokens += len(checks)
        for i in range(B):
            if state[i] == "running":
                cur[i] += 1
                if cur[i] == n[i]:
                    state[i] = "finished"
                    alloc.free(tables[i])
        d += 1
    if preempted < 0:
        raise ValueError(f"build_schedule: no sequence is running at decode step {preempt_at} "
                         f"(the last decode step is {d - 1})")
    return Schedule(steps, num_blocks, bs, mb, prompt, alloc.peak_used, alloc.allocations, preempted,
                    off_blocks, re_blocks, reused, sum(prompt), decode_tokens)
