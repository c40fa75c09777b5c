"""Recovery with and without checkpoints, side by side (one run)."""
import gc, os, sqlite3, statistics, sys, tempfile, time
from quiesce import Buffer, SQLiteLog, JsonlLog
from quiesce.bench.long_life import churn
OPS = int(sys.argv[1]); SHORT = int(sys.argv[2]); LIVE = 1000; BATCH = 100
d = tempfile.mkdtemp(prefix="ckb-")
def build(cls, name, ops, every):
    p = os.path.join(d, name); log = cls(p)
    b = Buffer(log=log, checkpoint_every=every); churn(b, ops, LIVE, BATCH); b.flush()
    n = len(b.log); log.close(); return p, n
paths = {}
for cls, ext in ((SQLiteLog, "db"), (JsonlLog, "jsonl")):
    paths[(ext, "long_ck")] = build(cls, f"long_ck.{ext}", OPS, 10_000)
    paths[(ext, "long_no")] = build(cls, f"long_no.{ext}", OPS, 0)
    paths[(ext, "short_ck")] = build(cls, f"short_ck.{ext}", SHORT, 10_000)
def rec(cls, p):
    gc.collect(); t0 = time.perf_counter(); log = cls(p); b = Buffer(log=log); t = time.perf_counter() - t0; log.close(); return t
def read_tail(p):
    gc.collect(); t0 = time.perf_counter(); c = sqlite3.connect(p)
    newest = c.execute("SELECT COALESCE(MAX(seq),0) FROM quiesce_log WHERE op='checkpoint'").fetchone()[0]
    for _ in c.execute("SELECT seq, record FROM quiesce_log WHERE seq >= ? ORDER BY seq", (newest,)): pass
    c.close(); return time.perf_counter() - t0
for cls, ext in ((SQLiteLog, "db"), (JsonlLog, "jsonl")):
    res = {k: [] for k in ("long_ck", "long_no", "short_ck", "read")}
    for _ in range(3):
        for k in ("long_ck", "long_no", "short_ck"):
            res[k].append(rec(cls, paths[(ext, k)][0]))
        if ext == "db": res["read"].append(read_tail(paths[(ext, "long_ck")][0]))
    m = {k: statistics.median(v) for k, v in res.items() if v}
    n = {k: paths[(ext, k)][1] for k in ("long_ck", "long_no", "short_ck")}
    print(ext, "records", n, "size MB", round(os.path.getsize(paths[(ext,'long_ck')][0])/1e6,1))
    print(f"  recovery long (ckpt) {m['long_ck']:.3f}s, long (no ckpt, full replay) {m['long_no']:.3f}s, short (ckpt) {m['short_ck']:.3f}s")
    print(f"  long/short with ckpt {m['long_ck']/m['short_ck']:.2f}x ; without ckpt long/short {m['long_no']/m['short_ck']:.2f}x ; full/ckpt {m['long_no']/m['long_ck']:.1f}x")
    if "read" in m: print(f"  recovery/read newest ckpt+tail {m['long_ck']/m['read']:.2f}x (read {m['read']:.4f}s)")
