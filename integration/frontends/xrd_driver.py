# One operation of the front-end conformance suite over root://, through
# the Python XRootD bindings (XrdCl, the client library xrdcp uses). Prints
# one JSON object: {"errno": 0 on success or the server's kXR_* error
# code, "msg": ..., plus results}. An upload replaces an existing file, as
# HTTP PUT and xrdcp -f do.
import base64, json, sys
from XRootD import client
from XRootD.client.flags import OpenFlags, StatInfoFlags, DirListFlags, QueryCode, MkDirFlags

url, op, args = sys.argv[1], sys.argv[2], sys.argv[3:]
fs = client.FileSystem(url)
out = {}

def done(st, **kw):
    kw["errno"] = 0 if st.ok else (st.errno or 5)
    kw["msg"] = "" if st.ok else st.message
    print(json.dumps(kw))
    sys.exit(0)

if op == "put":  # put LOCAL PATH
    data = open(args[0], "rb").read()
    f = client.File()
    st, _ = f.open(url + "/" + args[1], OpenFlags.DELETE | OpenFlags.MAKEPATH)
    if not st.ok:
        done(st)
    st, _ = f.write(data, 0)
    if not st.ok:
        f.close()
        done(st)
    st, _ = f.close()
    done(st)
elif op == "write":  # write LOCAL PATH OFFSET: an update in place
    data = open(args[0], "rb").read()
    f = client.File()
    st, _ = f.open(url + "/" + args[1], OpenFlags.UPDATE)
    if not st.ok:
        done(st)
    st, _ = f.write(data, int(args[2]))
    if not st.ok:
        f.close()
        done(st)
    st, _ = f.close()
    done(st)
elif op == "truncate":  # truncate PATH SIZE: kXR_truncate by path
    done(fs.truncate(args[0], int(args[1]))[0])
elif op == "ftruncate":  # ftruncate PATH SIZE: kXR_truncate by handle of an update open
    f = client.File()
    st, _ = f.open(url + "/" + args[0], OpenFlags.UPDATE)
    if not st.ok:
        done(st)
    st, _ = f.truncate(int(args[1]))
    if not st.ok:
        f.close()
        done(st)
    st, _ = f.close()
    done(st)
elif op == "append":  # append LOCAL PATH: kXR_open_apnd, written at the file's size
    data = open(args[0], "rb").read()
    f = client.File()
    st, _ = f.open(url + "/" + args[1], OpenFlags.UPDATE | 0x0200)  # kXR_open_apnd, not named in the bindings
    if not st.ok:
        done(st)
    st, info = f.stat()
    if not st.ok:
        f.close()
        done(st)
    st, _ = f.write(data, info.size)
    if not st.ok:
        f.close()
        done(st)
    st, _ = f.close()
    done(st)
elif op == "read":  # read PATH OFFSET LENGTH (LENGTH -1 = all)
    f = client.File()
    st, _ = f.open(url + "/" + args[0], OpenFlags.READ)
    if not st.ok:
        done(st)
    off, n = int(args[1]), int(args[2])
    if n < 0:
        st, info = f.stat()
        n = info.size - off
    st, data = f.read(off, n) if n > 0 else (st, b"")
    f.close()
    done(st, data=base64.b64encode(data or b"").decode())
elif op == "stat":
    st, info = fs.stat(args[0])
    if not st.ok:
        done(st)
    done(st, size=info.size, dir=bool(info.flags & StatInfoFlags.IS_DIR))
elif op == "ls":
    st, ls = fs.dirlist(args[0])
    if not st.ok:
        done(st)
    done(st, names=sorted(e.name for e in ls))
elif op == "mkdir":
    done(fs.mkdir(args[0], MkDirFlags.NONE)[0])
elif op == "mv":
    done(fs.mv(args[0], args[1])[0])
elif op == "rm":
    done(fs.rm(args[0])[0])
elif op == "rmdir":
    done(fs.rmdir(args[0])[0])
elif op == "checksum":
    st, resp = fs.query(QueryCode.CHECKSUM, args[0] + "?cks.type=adler32")
    if not st.ok:
        done(st)
    done(st, value=resp.decode().strip("\x00 \n").split()[-1])
else:
    print(json.dumps({"errno": 22, "msg": "unknown op " + op}))
