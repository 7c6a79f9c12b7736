# One update session over root:// (Python XRootD) for
# TestKill9BetweenReplyAndApply: opens PATH with kXR_open_updt, makes the
# writes in OPS (records of an 8-byte big-endian offset and 4096 bytes),
# commits them with kXR_sync, prints "synced" once it is acknowledged,
# and waits for its standard input to close; it never closes the file.
#
#   sync_then_wait.py URL PATH OPS
import os, struct, sys
from XRootD import client
from XRootD.client.flags import OpenFlags

url, path, ops = sys.argv[1], sys.argv[2], open(sys.argv[3], "rb").read()
f = client.File()
st, _ = f.open(url + "/" + path, OpenFlags.UPDATE, timeout=30)
if not st.ok:
    sys.exit("open %s: %s" % (path, st.message))
for i in range(0, len(ops), 8 + 4096):
    (off,) = struct.unpack(">Q", ops[i:i + 8])
    st, _ = f.write(ops[i + 8:i + 8 + 4096], off, timeout=30)
    if not st.ok:
        sys.exit("write at %d: %s" % (off, st.message))
st, _ = f.sync(timeout=60)
if not st.ok:
    sys.exit("sync: %s" % st.message)
sys.stdout.write("synced\n")
sys.stdout.flush()
sys.stdin.read()
os._exit(0)
