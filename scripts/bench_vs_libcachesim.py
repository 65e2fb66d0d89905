#!/usr/bin/env python3
"""Replay speed of tiercache vs libCacheSim, side by side on one oracleGeneral trace.

Usage (scripts/bench-vs-libcachesim.sh sets up the venv and builds tiercache first):

    python3 scripts/bench_vs_libcachesim.py --tiercache target/release/tiercache \
        [--requests 10000000] [--objects 1000000] [--alpha 0.9] [--sizes 0.01,0.1] \
        [--policy lru] [--repeat 3] [--trace /tmp/zipf.oracleGeneral.bin] [--json]

The trace (libCacheSim's oracleGeneral: 24-byte records, every object 1 byte, so a cache of
N bytes holds N objects) is generated once with a fixed seed and reused when it exists. Each
round replays every cache size with both tools, alternating, so the machine's load hits both
alike; each tool's rate is reported as median and range over the rounds, and the ratio is the
median of the per-round ratios.

libCacheSim: `LRU(size).process_trace(TraceReader(...))` of the `libcachesim` PyPI package
(the C library behind `cachesim`), timed around that one call: it reads the trace and
simulates, as `cachesim` does. tiercache: `tiercache sim --trace ... --json`, whose
`requests_per_second` times the replay loop only (the trace is decoded into memory first);
the end-to-end time of the whole command (decode + replay) is reported too.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def make_trace(path, requests, objects, alpha, seed):
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, objects + 1, dtype=np.float64) ** alpha
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    # Popularity rank → object id, shuffled so popular ids are not clustered.
    ids = rng.permutation(objects).astype(np.uint64) + 1
    rec = np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    assert rec.itemsize == 24
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        chunk = 1 << 20
        done = 0
        while done < requests:
            n = min(chunk, requests - done)
            ranks = np.searchsorted(cdf, rng.random(n), side="right")
            ranks = np.minimum(ranks, objects - 1)
            out = np.empty(n, dtype=rec)
            out["t"] = np.arange(done + 1, done + n + 1, dtype=np.uint32)
            out["id"] = ids[ranks]
            out["size"] = 1
            out["next"] = -1
            f.write(out.tobytes())
            done += n
    os.replace(tmp, path)


def run_libcachesim(trace, size, policy):
    import libcachesim as lcs

    params = lcs.ReaderInitParam(ignore_obj_size=True)
    reader = lcs.TraceReader(trace, lcs.TraceType.ORACLE_GENERAL_TRACE, params)
    cls = {"lru": lcs.LRU, "fifo": lcs.FIFO, "s3fifo": lcs.S3FIFO, "sieve": lcs.Sieve,
           "clock": lcs.Clock, "arc": lcs.ARC}[policy]
    cache = cls(cache_size=size)
    t0 = time.perf_counter()
    miss, _ = cache.process_trace(reader)
    secs = time.perf_counter() - t0
    return secs, 1.0 - miss


def run_tiercache(binary, trace, size, policy):
    t0 = time.perf_counter()
    out = subprocess.run(
        [binary, "sim", "--trace", trace, "--format", "oracle-general",
         "--tier", f"mem:{size}:{policy}", "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    wall = time.perf_counter() - t0
    doc = json.loads(out)
    rep = doc["reports"][0] if "reports" in doc else doc
    return rep["requests_per_second"], wall, rep["overall_hit_ratio"]


def spread(xs):
    return statistics.median(xs), min(xs), max(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiercache", required=True)
    ap.add_argument("--baseline", default=None,
                    help="another tiercache binary (an older build) to run in the same rounds")
    ap.add_argument("--requests", type=int, default=10_000_000)
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--alpha", type=float, default=0.9)
    ap.add_argument("--sizes", default="0.01,0.1", help="cache sizes as fractions of --objects")
    ap.add_argument("--policy", default="lru")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--trace", default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    trace = a.trace or f"/tmp/tiercache-zipf-{a.requests}-{a.objects}-{a.alpha}-{a.seed}.oracleGeneral.bin"
    if not os.path.exists(trace):
        print(f"generating {trace} ...", file=sys.stderr)
        make_trace(trace, a.requests, a.objects, a.alpha, a.seed)
    sizes = [max(1, round(float(f) * a.objects)) for f in a.sizes.split(",")]
    runs = {s: {"lcs": [], "tc": [], "tc_wall": [], "ratio": [], "base": [], "base_ratio": [],
                "hit": set()} for s in sizes}
    for r in range(a.repeat):
        for s in sizes:
            print(f"round {r + 1}/{a.repeat}, cache {s} ...", file=sys.stderr)
            secs, hit_l = run_libcachesim(trace, s, a.policy)
            rps_t, wall_t, hit_t = run_tiercache(a.tiercache, trace, s, a.policy)
            rps_l = a.requests / secs
            d = runs[s]
            d["lcs"].append(rps_l)
            d["tc"].append(rps_t)
            d["tc_wall"].append(a.requests / wall_t)
            d["ratio"].append(rps_t / rps_l)
            d["hit"].add((round(hit_l, 6), round(hit_t, 6)))
            if a.baseline:
                rps_b, _, hit_b = run_tiercache(a.baseline, trace, s, a.policy)
                d["base"].append(rps_b)
                d["base_ratio"].append(rps_b / rps_l)
                d["hit"].add((round(hit_l, 6), round(hit_b, 6)))
    result = []
    for s in sizes:
        d = runs[s]
        result.append({
            "cache_objects": s,
            "hit_ratio": sorted(d["hit"]),
            "libcachesim_rps": spread(d["lcs"]),
            "tiercache_rps": spread(d["tc"]),
            "tiercache_end_to_end_rps": spread(d["tc_wall"]),
            "ratio": spread(d["ratio"]),
        })
        if a.baseline:
            result[-1]["baseline_rps"] = spread(d["base"])
            result[-1]["baseline_ratio"] = spread(d["base_ratio"])
    if a.json:
        print(json.dumps({"requests": a.requests, "objects": a.objects, "alpha": a.alpha,
                          "policy": a.policy, "rounds": a.repeat, "sizes": result}, indent=2))
        return
    print(f"{a.requests} requests, {a.objects} objects, zipf alpha {a.alpha}, {a.policy}, "
          f"oracleGeneral {trace}; median [min–max] of {a.repeat} alternating rounds")
    for x in result:
        m = lambda t: f"{t[0] / 1e6:5.1f} M/s [{t[1] / 1e6:.1f}–{t[2] / 1e6:.1f}]"
        hits = ", ".join(f"libCacheSim {h[0]:.4f} / tiercache {h[1]:.4f}" for h in x["hit_ratio"])
        print(f"cache {x['cache_objects']:>9} objects: libCacheSim {m(x['libcachesim_rps'])}   "
              f"tiercache {m(x['tiercache_rps'])}   ratio {x['ratio'][0]:.2f}× "
              f"[{x['ratio'][1]:.2f}–{x['ratio'][2]:.2f}]")
        print(f"      tiercache end to end (decode + replay) {m(x['tiercache_end_to_end_rps'])};"
              f" hit ratio {hits}")
        if a.baseline:
            print(f"      baseline {a.baseline} {m(x['baseline_rps'])}   ratio "
                  f"{x['baseline_ratio'][0]:.2f}× [{x['baseline_ratio'][1]:.2f}–"
                  f"{x['baseline_ratio'][2]:.2f}]")


if __name__ == "__main__":
    main()
