#!/usr/bin/env python
"""KV handoff between two processes through Mooncake vs a raw Mooncake transfer and memcpy (CPU
figures): see ms_kvcache/bench/disagg.py.

    python scripts/bench_disagg.py [--quick] [--path both|direct|gather] [--mode both|verify-all|stream] [--ablate] [--out DIR]
"""
from ms_kvcache.bench import disagg as mod
from ms_kvcache.bench import main_for

if __name__ == "__main__":
    raise SystemExit(main_for(mod))
