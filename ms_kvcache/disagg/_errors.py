"""Exceptions of :mod:`ms_kvcache.disagg`.

Every failure of a handoff or of the prefix store raises a subclass of :class:`DisaggError`; the ones
that also have a natural built-in meaning derive from it too, so ``except TimeoutError`` /
``except ConnectionError`` / ``except ValueError`` work as expected.
"""

__all__ = ["DisaggError", "MooncakeUnavailable", "HandoffTimeout", "PeerGone", "MetadataMismatch",
           "ChecksumMismatch", "StoreError", "AuthenticationFailed"]


class DisaggError(RuntimeError):
    """Base class: a KV handoff or a prefix-store operation failed (the message says which step)."""


class MooncakeUnavailable(DisaggError, ImportError):
    """The Mooncake Python package (``mooncake.engine`` / ``mooncake.store``) cannot be imported, or
    its ``mooncake_master`` binary is missing; the message says what to install."""


class HandoffTimeout(DisaggError, TimeoutError):
    """A bounded wait ran out (no answer, no data, no completion within ``timeout`` seconds)."""


class PeerGone(DisaggError, ConnectionError):
    """The other side is not there (connection refused, disconnected, or its transfer engine refused
    or failed the transfer)."""


class MetadataMismatch(DisaggError, ValueError):
    """The sender's KV layout (format, dtype, layers, heads, head size, layout, byte count) does not fit
    the receiver's caches, buffer or blocks; the message names each differing field."""


class ChecksumMismatch(DisaggError):
    """Bytes that arrived differ from the checksum the sender computed (nothing was written into the
    receiver's caches)."""


class StoreError(DisaggError):
    """A Mooncake Store call failed or returned an object that does not match its key / layout."""


class AuthenticationFailed(DisaggError, PermissionError):
    """A control message without the shared ``token``'s signature (or with a wrong one): the peer was
    refused before any KV moved."""
