"""Where ms_kvcache.disagg listens: the listening TCP sockets of a process, and keeping Mooncake's on the
host the caller names.

Mooncake's transfer engine (and the transfer engine inside a Mooncake Store client) binds its handshake
and TCP-transport listeners to every interface (``INADDR_ANY`` / ``in6addr_any``, hard-coded in
``transfer_metadata_plugin.cpp`` and ``tcp_transport``), whatever ``local_hostname`` says; anyone who
reaches those ports can read or write the memory registered with the engine. While
:func:`confine_binds` is active (around ``TransferEngine.initialize`` and ``MooncakeDistributedStore.setup``,
the calls that open them, all on the calling thread), the ``bind`` that Mooncake's libraries import from
libc is redirected (their GOT entry, restored afterwards) to one that replaces a wildcard address with the
named host (an IPv6 wildcard with the IPv4-mapped host, so a dual-stack socket still takes IPv4 peers).
:func:`listening_sockets` then checks the result: :class:`~ms_kvcache.disagg._mooncake.TransferEngineHandle`
and :class:`~ms_kvcache.disagg.KVPrefixStore` refuse to run with a listener left on another address.
Linux (``/proc``), x86-64 and AArch64 ELF; elsewhere nothing is redirected and the check reports what it
sees (:func:`confinable` says why not).
"""
import ctypes
import ipaddress
import os
import platform
import socket
import struct
import sys
import threading
from contextlib import contextmanager

__all__ = ["WILDCARDS", "listening_sockets", "bind_address", "confine_binds", "confinable", "is_wildcard",
           "stray_listeners", "check_hostname"]

#: Host names that mean "every interface": binding there is the caller's explicit choice.
WILDCARDS = ("0.0.0.0", "::", "*", "")

_LIBS = ("engine.so", "store.so", "libasio.so")  # the Mooncake objects that import bind()
_RELOC = {"x86_64": (6, 7), "aarch64": (1025, 1026)}  # GLOB_DAT, JUMP_SLOT
_LOCK = threading.Lock()


def is_wildcard(host):
    return str(host).strip("[]") in WILDCARDS


def check_hostname(op, hostname):
    """``hostname`` if it is a non-empty str naming an IPv4 address or a host name with an IPv4 address. TypeError
    for another type; ValueError for an IPv6 address (or a name with only IPv6 ones) and for a name this machine
    cannot resolve: the control channel's ``host:port`` addresses and Mooncake's TCP transport here are IPv4
    (Mooncake listened on 0.0.0.0 for ``::1``), so either could only fail later with a misleading error."""
    if not isinstance(hostname, str) or not hostname:
        raise TypeError(f"{op}: argument 'hostname': expected a non-empty str, got {hostname!r}")
    try:
        ip = ipaddress.ip_address(hostname.strip("[]"))
    except ValueError:
        ip = None
    if ip is None and hostname not in WILDCARDS:
        try:
            infos = socket.getaddrinfo(hostname, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError) as exc:
            raise ValueError(f"{op}: argument 'hostname': expected an IPv4 address or a name this machine resolves, "
                             f"got {hostname!r} ({exc})") from None
        if not any(i[0] == socket.AF_INET for i in infos):
            ip = ipaddress.ip_address(infos[0][4][0].split("%")[0])
    if ip is not None and ip.version == 6:
        raise ValueError(f"{op}: argument 'hostname': expected an IPv4 address or a host name (IPv6 is not supported: "
                         f"'0.0.0.0' listens on every interface), got {hostname!r}")
    return hostname


def bind_address(op, host):
    """The IP address ``host`` names (IPv4 or IPv6 string); ValueError naming ``hostname`` otherwise."""
    h = str(host).strip("[]")
    try:
        return str(ipaddress.ip_address(h))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(h, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise ValueError(f"{op}: argument 'hostname': expected an address or a name this machine resolves, got "
                         f"{host!r} ({exc})") from None
    v4 = [i[4][0] for i in infos if i[0] == socket.AF_INET]
    return v4[0] if v4 else infos[0][4][0]


# ---------------------------------------------------------------------------------------------- /proc

def _hex_addr(text, v6):
    raw = bytes.fromhex(text)
    if not v6:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]  # four host-order 32-bit words
    addr = ipaddress.IPv6Address(b"".join(words))
    return str(addr.ipv4_mapped) if addr.ipv4_mapped is not None else str(addr)


def listening_sockets(pid=None):
    """The TCP sockets in LISTEN state that process ``pid`` (default: this one) holds, as
    ``[(host, port)]`` (an IPv4-mapped IPv6 address shown as its IPv4 address; ``"::"`` / ``"0.0.0.0"`` =
    every interface). None where ``/proc`` cannot tell (not Linux, or another user's process)."""
    base = f"/proc/{pid or 'self'}"
    try:
        inodes = set()
        for fd in os.listdir(f"{base}/fd"):
            try:
                link = os.readlink(f"{base}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return None
    out = []
    for name, v6 in (("tcp", False), ("tcp6", True)):
        try:
            with open(f"{base}/net/{name}", encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) < 10 or cols[3] != "0A" or cols[9] not in inodes:  # 0A: TCP_LISTEN
                continue
            addr, port = cols[1].split(":")
            out.append((_hex_addr(addr, v6), int(port, 16)))
    return sorted(set(out))


def stray_listeners(host, before, pid=None):
    """Listeners of ``pid`` not in ``before`` whose address is not ``host`` (``[(host, port)]``); ``[]``
    when ``host`` is a wildcard (any address is then fine) or ``/proc`` cannot tell."""
    now = listening_sockets(pid)
    if now is None or is_wildcard(host):
        return []
    want = bind_address("listening", host)
    return [(h, p) for h, p in now if (h, p) not in set(before or ()) and h != want]


# ---------------------------------------------------------------------------------------------- ELF

class _DlPhdrInfo(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_size_t), ("name", ctypes.c_char_p), ("phdr", ctypes.c_void_p),
                ("phnum", ctypes.c_uint16)]


_PHDR_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_DlPhdrInfo), ctypes.c_size_t, ctypes.c_void_p)


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _loaded_objects():
    """``[(path, load address, [(p_type, p_vaddr, p_memsz)])]`` of every loaded ELF object."""
    out = []

    def cb(info, _size, _data):
        i = info.contents
        phdrs = []
        for k in range(i.phnum):  # Elf64_Phdr: p_type u32, p_flags u32, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz
            raw = ctypes.string_at(i.phdr + 56 * k, 56)
            p_type, _, _, vaddr, _, _, memsz, _ = struct.unpack("<IIQQQQQQ", raw)
            phdrs.append((p_type, vaddr, memsz))
        out.append(((i.name or b"").decode(errors="replace"), i.addr, phdrs))
        return 0

    _libc().dl_iterate_phdr(_PHDR_CB(cb), None)
    return out


def _bind_slots(base, phdrs):
    """Addresses of the GOT entries through which the object at ``base`` calls ``bind``."""
    glob_dat, jump_slot = _RELOC[platform.machine()]
    dyn = next((v for t, v, _ in phdrs if t == 2), None)  # PT_DYNAMIC
    if dyn is None:
        return []
    tags, p = {}, base + dyn
    while True:
        tag, val = struct.unpack("<qQ", ctypes.string_at(p, 16))
        if tag == 0:
            break
        tags.setdefault(tag, val)
        p += 16

    def addr(tag):  # the dynamic loader relocates these in place for a shared object (not everywhere)
        v = tags.get(tag)
        return None if v is None else (v if v >= base else base + v)

    strtab, symtab = addr(5), addr(6)  # DT_STRTAB, DT_SYMTAB
    if strtab is None or symtab is None:
        return []
    slots = []
    for table, size in ((addr(23), tags.get(2)), (addr(7), tags.get(8))):  # DT_JMPREL/DT_PLTRELSZ, DT_RELA/SZ
        if table is None or not size:
            continue
        for k in range(size // 24):
            off, info, _ = struct.unpack("<QQq", ctypes.string_at(table + 24 * k, 24))
            if (info & 0xFFFFFFFF) not in (glob_dat, jump_slot):
                continue
            st_name = struct.unpack("<I", ctypes.string_at(symtab + 24 * (info >> 32), 4))[0]
            if ctypes.string_at(strtab + st_name, 5) == b"bind\0":
                slots.append(base + off)
    return slots


def _page_prot(addr):
    """The protection of the mapping holding ``addr`` (PROT_* bits), from /proc/self/maps."""
    with open("/proc/self/maps", encoding="ascii") as f:
        for line in f:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= addr < hi:
                return (1 if perms[0] == "r" else 0) | (2 if perms[1] == "w" else 0) | (4 if perms[2] == "x" else 0)
    return None


def confinable():
    """``(True, "")`` where :func:`confine_binds` can redirect Mooncake's binds, else ``(False, why)``."""
    if not sys.platform.startswith("linux"):
        return False, f"not Linux ({sys.platform})"
    if platform.machine() not in _RELOC or struct.calcsize("P") != 8:
        return False, f"no ELF relocation table known for {platform.machine()}"
    return True, ""


# ---------------------------------------------------------------------------------------------- bind()

_BIND = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32, use_errno=True)
_STATE = {"host": None, "real": None, "hook": None}


def _rewrite(addr, length, host):
    """The sockaddr bytes to bind instead of a wildcard one, or None to bind as asked."""
    if not addr or length < 2:
        return None
    raw = ctypes.string_at(addr, length)
    family = struct.unpack("<H", raw[:2])[0]
    ip = ipaddress.ip_address(host)
    if family == socket.AF_INET and length >= 16 and raw[4:8] == b"\0\0\0\0":
        if ip.version != 4:
            return None
        return raw[:4] + ip.packed + raw[8:]
    if family == socket.AF_INET6 and length >= 28 and raw[8:24] == b"\0" * 16:
        packed = ip.packed if ip.version == 6 else b"\0" * 10 + b"\xff\xff" + ip.packed
        return raw[:8] + packed + raw[24:]
    return None


def _hook(fd, addr, length):
    real = _STATE["real"]
    host = _STATE["host"]
    new = _rewrite(addr, length, host) if host is not None else None
    if new is None:
        rc = real(fd, addr, length)
    else:
        buf = ctypes.create_string_buffer(new, len(new))
        rc = real(fd, ctypes.cast(buf, ctypes.c_void_p), len(new))
    return rc


@contextmanager
def confine_binds(host):
    """Within the block, a wildcard ``bind`` of Mooncake's libraries (engine.so, store.so, libasio.so) on
    the calling thread binds ``host`` instead (see the module docstring). Nothing happens for a wildcard
    ``host`` or where :func:`confinable` says no. Serialized: one block at a time per process."""
    ok, _ = confinable()
    if is_wildcard(host) or not ok:
        yield
        return
    ip = bind_address("confine_binds", host)
    with _LOCK:
        if _STATE["real"] is None:
            _STATE["real"] = _BIND(ctypes.cast(_libc().bind, ctypes.c_void_p).value)
            _STATE["hook"] = _BIND(_hook)
        hook = ctypes.cast(_STATE["hook"], ctypes.c_void_p).value
        patched = []
        page = os.sysconf("SC_PAGE_SIZE")
        libc = _libc()
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        try:
            for path, base, phdrs in _loaded_objects():
                if os.path.basename(path) not in _LIBS or "mooncake" not in path:
                    continue
                for slot in _bind_slots(base, phdrs):
                    prot = _page_prot(slot)
                    if prot is None:
                        continue
                    start = slot - slot % page
                    if not prot & 2 and libc.mprotect(start, page, prot | 2) != 0:
                        continue
                    old = ctypes.c_size_t.from_address(slot).value
                    ctypes.c_size_t.from_address(slot).value = hook
                    patched.append((slot, old, start, prot))
            _STATE["host"] = ip
            yield
        finally:
            _STATE["host"] = None
            for slot, old, start, prot in reversed(patched):
                ctypes.c_size_t.from_address(slot).value = old
                if not prot & 2:
                    libc.mprotect(start, page, prot)
