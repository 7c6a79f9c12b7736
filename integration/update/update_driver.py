# Update sessions over root:// with the Python XRootD bindings (XrdCl), the
# reference client of files that change in place: one seeded scenario of
# writes at offsets, reads through the open handle, truncations by handle
# and by path, kXR_sync, appends and closes, run against a server while a
# model (a bytearray) follows every acknowledged operation. Prints one
# JSON object: the file's final sha256 and size as the server returns it,
# the model's, and the first mismatch seen on the way ("" if none).
#
#   update_driver.py URL PATH SEED
import hashlib, json, random, sys
from XRootD import client
from XRootD.client.flags import OpenFlags

APPEND = 0x0200  # kXR_open_apnd (XrdCl OpenFlags::Append; not named in the bindings)

url, path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(seed)
fs = client.FileSystem(url)
full = url + "/" + path
model = bytearray()
problems = []


def check(st, what):
    if not st.ok:
        print(json.dumps({"error": "%s: %s (errno %s)" % (what, st.message, st.errno)}))
        sys.exit(0)


def write_at(m, data, off):
    if off > len(m):
        m.extend(b"\0" * (off - len(m)))
    m[off:off + len(data)] = data


def truncate(m, size):
    if size < len(m):
        del m[size:]
    else:
        m.extend(b"\0" * (size - len(m)))


def readback(f, what):
    n = len(model)
    for _ in range(5):
        off = rnd.randrange(0, n + 1)
        ln = rnd.randrange(0, 70000)
        st, data = f.read(off, ln)
        check(st, what + " read")
        if bytes(data or b"") != bytes(model[off:off + ln]):
            problems.append("%s: read %d+%d differs" % (what, off, ln))


# The first content: an upload.
f = client.File()
check(f.open(full, OpenFlags.DELETE | OpenFlags.MAKEPATH)[0], "create")
first = rnd.randbytes(300000)
check(f.write(first, 0)[0], "upload")
check(f.close()[0], "upload close")
model[:] = first

# Session 1: writes at offsets inside, across and past the end; read back
# through the handle; a sync in the middle.
f = client.File()
check(f.open(full, OpenFlags.UPDATE)[0], "open update")
for i in range(40):
    off = rnd.randrange(0, len(model) + 50000)
    data = rnd.randbytes(rnd.randrange(1, 20000))
    check(f.write(data, off)[0], "write")
    write_at(model, data, off)
    if i == 20:
        check(f.sync()[0], "sync")
readback(f, "session 1")
st, info = f.stat(force=True)
check(st, "stat handle")
if info.size != len(model):
    problems.append("session 1: stat through the handle says %d bytes, model %d" % (info.size, len(model)))
check(f.close()[0], "close 1")

# Session 2: truncate by handle (cut), write past the new end (a hole),
# truncate again (extend with zeros).
f = client.File()
check(f.open(full, OpenFlags.UPDATE)[0], "open update 2")
half = len(model) // 2
check(f.truncate(half)[0], "truncate handle")
truncate(model, half)
data = rnd.randbytes(5000)
check(f.write(data, half + 777)[0], "write past end")
write_at(model, data, half + 777)
check(f.truncate(len(model) + 4096)[0], "truncate handle extend")
truncate(model, len(model) + 4096)
readback(f, "session 2")
check(f.close()[0], "close 2")

# Truncation by path: cut, then extend.
check(fs.truncate(path, len(model) - 1000)[0], "truncate path")
truncate(model, len(model) - 1000)
check(fs.truncate(path, len(model) + 12345)[0], "truncate path extend")
truncate(model, len(model) + 12345)

# Appends (kXR_open_apnd): as with Debian's xrootd, a write goes where its
# offset says; XrdCl clients append by writing at the size.
f = client.File()
check(f.open(full, OpenFlags.UPDATE | APPEND)[0], "open append")
for _ in range(5):
    data = rnd.randbytes(rnd.randrange(1, 30000))
    check(f.write(data, len(model))[0], "append")
    model.extend(data)
check(f.close()[0], "close append")

# What a new reader sees.
f = client.File()
check(f.open(full, OpenFlags.READ)[0], "open read")
st, info = f.stat()
check(st, "stat")
st, data = f.read(0, info.size + 1) if info.size else (st, b"")
check(st, "read all")
f.close()
data = bytes(data or b"")
print(json.dumps({"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                  "model_sha256": hashlib.sha256(bytes(model)).hexdigest(), "model_size": len(model),
                  "problems": problems}))
