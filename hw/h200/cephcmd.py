#!/usr/bin/env python3
"""Send one mon command through librados' C API (ctypes), in place of the Python ``ceph`` CLI
(Debian's is built for Python 3.11; the GPU machine has 3.12).

    cephcmd.py CONF '{"prefix": "mon stat"}' [INFILE|-]     -> outbuf on stdout, outs on stderr

Exit status 0, or 100 + |errno|. LD_LIBRARY_PATH must find librados.so.2.
"""

import ctypes
import json
import sys

P = ctypes.c_void_p
BUF = ctypes.POINTER(ctypes.c_char)
SIZE = ctypes.c_size_t


def main(conf: str, cmd: str, infile: str | None) -> int:
    inbuf = b""
    if infile:
        inbuf = sys.stdin.buffer.read() if infile == "-" else open(infile, "rb").read()
    json.loads(cmd)  # refuse a malformed command before connecting
    lib = ctypes.CDLL("librados.so.2")
    lib.rados_create2.argtypes = [
        ctypes.POINTER(P),
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_uint64,
    ]
    lib.rados_conf_read_file.argtypes = [P, ctypes.c_char_p]
    lib.rados_conf_set.argtypes = [P, ctypes.c_char_p, ctypes.c_char_p]
    lib.rados_connect.argtypes = [P]
    lib.rados_shutdown.argtypes = [P]
    lib.rados_buffer_free.argtypes = [BUF]
    lib.rados_mon_command.argtypes = [
        P, ctypes.POINTER(ctypes.c_char_p), SIZE, ctypes.c_char_p, SIZE,
        ctypes.POINTER(BUF), ctypes.POINTER(SIZE), ctypes.POINTER(BUF), ctypes.POINTER(SIZE),
    ]  # fmt: skip
    cl = P()
    if (r := lib.rados_create2(ctypes.byref(cl), b"ceph", b"client.admin", 0)) < 0:
        return 100 - r
    if (r := lib.rados_conf_read_file(cl, conf.encode())) < 0:
        print("conf_read_file", r, file=sys.stderr)
        return 100 - r
    for k, v in (("client_mount_timeout", "8"), ("rados_mon_op_timeout", "20")):
        lib.rados_conf_set(cl, k.encode(), v.encode())
    if (r := lib.rados_connect(cl)) < 0:
        print("connect failed", r, file=sys.stderr)
        return 100 - r
    cmds = (ctypes.c_char_p * 1)(cmd.encode())
    ob, obl, os_, osl = BUF(), SIZE(), BUF(), SIZE()
    r = lib.rados_mon_command(
        cl, cmds, 1, inbuf, len(inbuf),
        ctypes.byref(ob), ctypes.byref(obl), ctypes.byref(os_), ctypes.byref(osl),
    )  # fmt: skip
    out = ctypes.string_at(ob, obl.value) if obl.value else b""
    outs = ctypes.string_at(os_, osl.value) if osl.value else b""
    for b in (ob, os_):
        if b:
            lib.rados_buffer_free(b)
    sys.stdout.buffer.write(out)
    if outs:
        sys.stderr.write(outs.decode(errors="replace") + "\n")
    lib.rados_shutdown(cl)
    return 0 if r >= 0 else 100 - r


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
