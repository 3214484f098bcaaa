"""ms_kvcache.disagg: beyond one process. Hand a sequence's KV cache to another process with the
Mooncake transfer engine (prefill / decode disaggregation), and share prefixes through Mooncake Store.

- :class:`KVSender` / :class:`KVReceiver` (:mod:`ms_kvcache.disagg.handoff`): Mooncake writes a
  sequence's KV of every layer (any :class:`~ms_kvcache.KVCacheFormat`) into the receiver's registered
  memory, on the cpu backend straight from the sender's cache rows, elsewhere after a gather into
  registered host memory with :func:`ms_kvcache.multi_layer_kv_transfer`; the decode side checks it
  (layout, size, checksum) and loads it into its own free blocks. Explicit, validated metadata; a deadline on every wait; the receiver's caches
  are written only after everything checked out.
- :class:`KVPrefixStore` (:mod:`ms_kvcache.disagg.store`): LMCache-style chunks of a sequence's KV in
  Mooncake Store, keyed by a hash chain of the token prefix and the model / layout identity, so another
  process reloads a shared prefix instead of recomputing it.
- :class:`MooncakeMaster`: the store's ``mooncake_master`` as a child process on 127.0.0.1.

Install: ``pip install 'ms_kvcache[disagg]'`` and ``apt-get install libibverbs1`` (the Mooncake wheel
links against it). Importing this package does not import Mooncake; creating a sender, receiver, store
or master does, and raises :class:`MooncakeUnavailable` with that hint when it is missing. See
docs/disagg.md.
"""
from ms_kvcache.disagg._errors import (AuthenticationFailed, ChecksumMismatch, DisaggError, HandoffTimeout,
                                       MetadataMismatch, MooncakeUnavailable, PeerGone, StoreError)
from ms_kvcache.disagg._layout import CHECKSUM_ALGO, KVLayout, checksum, slots_from_blocks
from ms_kvcache.disagg._mooncake import INSTALL_HINT, MooncakeMaster, mooncake_available
from ms_kvcache.disagg.handoff import PROTOCOL, KVReceiver, KVSender
from ms_kvcache.disagg.store import KVPrefixStore, prefix_chunk_hashes

__all__ = ["KVSender", "KVReceiver", "KVPrefixStore", "MooncakeMaster", "KVLayout", "prefix_chunk_hashes",
           "mooncake_available", "checksum", "slots_from_blocks", "CHECKSUM_ALGO", "PROTOCOL", "INSTALL_HINT",
           "DisaggError", "MooncakeUnavailable", "HandoffTimeout", "PeerGone", "MetadataMismatch",
           "ChecksumMismatch", "StoreError", "AuthenticationFailed"]
