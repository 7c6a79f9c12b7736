# Update sessions in a loop over root:// (Python XRootD), while servers are
# killed: each session opens PATH with kXR_open_updt, writes two ranges,
# commits them with kXR_sync, writes a third and closes (the second
# commit); the ranges are drawn from SEED and the session's number, and
# an odd session's third write lies past everything written before (an
# append, after a hole: a replica's stores write it straight into the
# stripes past their end, committed by length). One
# JSON line per session in LOG says what its client was told: how many
# writes were acknowledged ("acked") and sent ("sent": one more when a
# write failed), whether the sync and the close were acknowledged; runs
# until the file STOP exists.
#
#   crash_writer.py URL PATH SEED LOG STOP
import json, os, random, sys, time
from XRootD import client
from XRootD.client.flags import OpenFlags

SIZE = 256 << 10
SYNC_AFTER = 2  # writes committed by the sync; the rest by the close


def ranges(seed, i):
    r = random.Random(seed * 100000 + i)
    ws = [(r.randrange(0, SIZE), r.randbytes(r.randrange(1, 32768))) for _ in range(3)]
    if i % 2:
        ws[2] = (SIZE + 32768 * i, ws[2][1])
    return ws


def session(url, path, seed, i):
    rec = {"i": i, "opened": False, "acked": 0, "sent": 0, "synced": False, "closed": False}
    f = client.File()
    st, _ = f.open(url + "/" + path, OpenFlags.UPDATE, timeout=15)
    if not st.ok:
        rec["err"] = "open: " + st.message
        return rec
    rec["opened"] = True
    for n, (off, data) in enumerate(ranges(seed, i)):
        if n == SYNC_AFTER:
            st, _ = f.sync(timeout=30)
            if not st.ok:
                rec["err"] = "sync: " + st.message
                break
            rec["synced"] = True
        rec["sent"] += 1
        st, _ = f.write(data, off, timeout=15)
        if not st.ok:
            rec["err"] = "write: " + st.message
            break
        rec["acked"] += 1
    st, _ = f.close(timeout=30)
    if "err" not in rec:
        rec["closed"] = st.ok
        if not st.ok:
            rec["err"] = "close: " + st.message
    return rec


if __name__ == "__main__":
    url, path, seed, log, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    out = open(log, "a")
    i = 0
    while not os.path.exists(stop):
        rec = session(url, path, seed, i)
        out.write(json.dumps(rec) + "\n")
        out.flush()
        if not rec["closed"]:
            time.sleep(0.3)
        i += 1
