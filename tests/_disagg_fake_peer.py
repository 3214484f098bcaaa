"""A stand-in for the other end of a handoff that dies right after the accept (no MindSpore, so it
starts in a fraction of a second). Speaks the real protocol through ms_kvcache.disagg's own channel and
a real Mooncake transfer engine.

    python _disagg_fake_peer.py receiver            # prints its address; accepts one offer; prints "accepted"
    python _disagg_fake_peer.py sender ADDR OFFER   # prints "ready"; on a stdin line sends the JSON offer
                                                    # to ADDR; exits 3 once accepted
"""
import json
import sys
import time

import numpy as np


def main():
    from ms_kvcache.disagg._channel import ControlClient, ControlServer
    from ms_kvcache.disagg._mooncake import TransferEngineHandle

    role = sys.argv[1]
    if role == "receiver":
        eng = TransferEngineHandle()
        buf = np.zeros(1 << 20, np.uint8)
        eng.register(buf.ctypes.data, buf.nbytes)
        srv = ControlServer()
        print(srv.address, flush=True)
        item = srv.recv(time.monotonic() + 60)
        if item is None:
            sys.exit(2)
        peer, offer = item
        srv.send(peer, {"type": "accept", "session": offer["session"], "te_peer": eng.address,
                        "buffer_ptr": buf.ctypes.data, "buffer_nbytes": buf.nbytes})
        print("accepted", flush=True)
        time.sleep(60)  # the test kills this process now
        sys.exit(2)
    if role == "sender":
        print("ready", flush=True)  # imports done (ms_kvcache imports MindSpore); go on a line of stdin
        sys.stdin.readline()
        cli = ControlClient(sys.argv[2])
        cli.send(json.loads(sys.argv[3]))
        reply = cli.recv(time.monotonic() + 30)
        sys.exit(3 if reply and reply.get("type") == "accept" else 2)  # gone without a word, as if killed


if __name__ == "__main__":
    main()
