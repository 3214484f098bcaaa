"""A stand-in for the other end of a handoff that dies right after the accept. It imports neither
ms_kvcache nor MindSpore (so it starts in a fraction of a second) and speaks the wire protocol with
pyzmq and a real Mooncake transfer engine directly, an independent implementation of the messages
documented in ms_kvcache/disagg/handoff.py.

    python _disagg_fake_peer.py receiver            # prints its address; accepts one offer; prints "accepted"
    python _disagg_fake_peer.py sender ADDR OFFER   # sends the JSON offer to ADDR; exits 3 once accepted
"""
import json
import sys

import numpy as np
import zmq


def main():
    role = sys.argv[1]
    ctx = zmq.Context()
    if role == "receiver":
        from mooncake.engine import TransferEngine

        te = TransferEngine()
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        buf = np.zeros(1 << 20, np.uint8)
        assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
        sock = ctx.socket(zmq.ROUTER)
        port = sock.bind_to_random_port("tcp://127.0.0.1")
        print(f"127.0.0.1:{port}", flush=True)
        if not sock.poll(60000):
            sys.exit(2)
        peer, raw = sock.recv_multipart()
        offer = json.loads(raw)
        sock.send_multipart([peer, json.dumps({"type": "accept", "session": offer["session"], "seq": 0,
                                               "nonce": "0123456789abcdef0123456789abcdef",
                                               "te_peer": f"127.0.0.1:{te.get_rpc_port()}",
                                               "buffer_ptr": buf.ctypes.data, "buffer_nbytes": buf.nbytes}).encode()])
        print("accepted", flush=True)
        sock.poll(60000)  # the test kills this process now
        sys.exit(2)
    if role == "sender":
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"tcp://{sys.argv[2]}")
        print("ready", flush=True)  # go on a line of stdin
        sys.stdin.readline()
        sock.send(sys.argv[3].encode())
        reply = json.loads(sock.recv()) if sock.poll(30000) else {}
        sys.exit(3 if reply.get("type") == "accept" else 2)  # gone without a word, as if killed


if __name__ == "__main__":
    main()
