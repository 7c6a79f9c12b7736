# One round of the update benchmark over root:// with the Python XRootD
# client (bench/update/bench.sh runs it against Kaon and Debian's xrootd
# in turn). Prints one JSON object: {"ops": n, "bytes": b, "secs": s}.
#
#   driver.py URL PATH random N SEED   N writes of 4 KiB at random 4 KiB-aligned
#                                      offsets inside the file, one session
#   driver.py URL PATH append N        N appends of 1 MiB, one session
#
# A session is open (kXR_open_updt / kXR_open_apnd), the writes, kXR_sync
# and close: the time covers everything until the data is committed.
import json, os, random, sys, time
from XRootD import client
from XRootD.client.flags import OpenFlags

url, path, mode, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def check(st, what):
    if not st.ok:
        sys.exit("%s %s: %s" % (what, path, st.message))


f = client.File()
t0 = time.monotonic()
if mode == "random":
    rnd = random.Random(int(sys.argv[5]))
    check(f.open(url + "/" + path, OpenFlags.UPDATE)[0], "open for update")
    st, info = f.stat()
    check(st, "stat")
    blocks = info.size // 4096
    buf = os.urandom(4096)
    for _ in range(n):
        check(f.write(buf, rnd.randrange(blocks) * 4096)[0], "write")
    size = 4096
else:
    check(f.open(url + "/" + path, OpenFlags.UPDATE | 0x0200)[0], "open for append")  # kXR_open_apnd
    st, info = f.stat()
    check(st, "stat")
    off = info.size
    buf = os.urandom(1 << 20)
    for _ in range(n):
        check(f.write(buf, off)[0], "write")
        off += len(buf)
    size = 1 << 20
check(f.sync()[0], "sync")
check(f.close()[0], "close")
print(json.dumps({"ops": n, "bytes": n * size, "secs": time.monotonic() - t0}))
