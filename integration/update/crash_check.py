# The checker of crash_writer.py's history (Jepsen-style), comparing what
# the clients were told with what is stored. The file (read over root://
# three times, each read a new open; they must agree) must be the initial
# content with the writes of every session applied in session order,
# where
#   - a write the client saw committed (kXR_sync or close acknowledged
#     after it) is applied;
#   - of a session whose last commit was not acknowledged, the writes
#     after its last acknowledged commit are applied up to a point a
#     commit could have reached: none, all the acknowledged writes, or
#     those and the one that failed — a commit is whole, so no other
#     point, and no write half applied;
#   - nothing else: no byte from nowhere, no acknowledged write lost.
# Sessions of one writer run one after another, so the order is theirs.
# Prints one JSON object.
#
#   crash_check.py URL PATH SEED LOG INITIAL
import array, itertools, json, sys
from XRootD import client
from XRootD.client.flags import OpenFlags
from crash_writer import ranges, SYNC_AFTER


def fail(why, **kw):
    print(json.dumps(dict(ok=False, why=why, **kw)))
    sys.exit(0)


url, path, seed, log, initial = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
hist = [json.loads(l) for l in open(log) if l.strip()]
base = open(initial, "rb").read()

reads = []
for _ in range(3):
    f = client.File()
    st, _ = f.open(url + "/" + path, OpenFlags.READ, timeout=60)
    if not st.ok:
        fail("open for reading: " + st.message)
    st, info = f.stat(timeout=60)
    if not st.ok:
        fail("stat: " + st.message)
    st, data = f.read(0, info.size + 1, timeout=60)
    f.close()
    if not st.ok:
        fail("read: " + st.message)
    reads.append(bytes(data or b""))
if len(set(reads)) != 1:
    fail("three reads of the file differ")
got = reads[0]

# Units: one per write sent, numbered in the order they were sent.
known, unsure = [], []  # known: units surely applied; unsure: (session, [units], allowed prefix lengths)
units = []  # unit -> (off, data)
for r in hist:
    if not r["opened"] or r["sent"] == 0:
        continue
    ws = ranges(seed, r["i"])[:r["sent"]]
    ids = list(range(len(units), len(units) + len(ws)))
    units.extend(ws)
    if r["closed"]:
        known.extend(ids)
        continue
    committed = SYNC_AFTER if r["synced"] else 0
    known.extend(ids[:committed])
    tail = ids[committed:]
    lengths = sorted({0, r["acked"] - committed, r["sent"] - committed})
    if tail and lengths != [0]:
        unsure.append((r["i"], tail, lengths))

size = max([len(base)] + [off + len(d) for off, d in units])
# last[x]: the newest surely applied unit covering byte x (-1: none).
last = array.array("q", [-1]) * size
state = bytearray(base) + bytearray(size - len(base))
for u in known:
    off, d = units[u]
    last[off:off + len(d)] = array.array("q", [u]) * len(d)
    state[off:off + len(d)] = d
# Each unsure unit matters only where no newer known unit wrote.
relevant = []
for i, tail, lengths in unsure:
    foot = []
    for u in tail:
        off, d = units[u]
        foot.append([(x, d[x - off]) for x in range(off, off + len(d)) if last[x] < u])
    if any(foot):
        relevant.append((i, foot, lengths))
if len(relevant) > 10:
    fail("%d sessions of unknown outcome left visible traces: too many to check" % len(relevant))

end = max([len(base)] + [units[u][0] + len(units[u][1]) for u in known])
for choice in itertools.product(*[lengths for _, _, lengths in relevant]):
    b, size, applied = bytearray(state), end, []
    for (i, foot, _), k in zip(relevant, choice):
        for part in foot[:k]:
            for x, v in part:
                b[x] = v
                size = max(size, x + 1)
        if k:
            applied.append(i)
    if bytes(b[:size]) == got:
        print(json.dumps({"ok": True, "sessions": len(hist), "committed": sum(1 for r in hist if r["closed"]),
                          "unknown": [i for i, _, _ in unsure], "applied_unknown": applied, "size": len(got)}))
        sys.exit(0)
fail("no choice of the unknown sessions' outcomes gives the file's bytes",
     sessions=len(hist), committed=sum(1 for r in hist if r["closed"]), unknown=[i for i, _, _ in unsure],
     size=len(got), model_size=end)
