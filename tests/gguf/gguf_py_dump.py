#!/usr/bin/env python3
"""Dump GGUF files with gguf-py's GGUFReader in the canonical text form the C++ tests compare.

usage: gguf_py_dump.py [--offsets] FILE [FILE ...]   (files are shards 0, 1, ... of one set)

Lines (one value per line, shard index first):
  kv <shard> <key> <TYPE> <value>
  kv <shard> <key> ARRAY <ELEMTYPE> <n> <v1,v2,...>
  tensor <name> <ggml type id> <ne0,ne1,...> <nbytes> <crc32 hex> [<absolute data offset>]
Values: integers in decimal, floats as 'f' + the hex bit pattern of the value as a float64, bools
0/1, strings as hex of their UTF-8 bytes ('-' when empty).
"""
import struct
import sys
import zlib

from gguf import GGUFReader, GGUFValueType


def fmt_scalar(t, x):
    if t in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        return "f" + struct.pack("<d", float(x)).hex()
    if t == GGUFValueType.BOOL:
        return "1" if bool(x) else "0"
    if t == GGUFValueType.STRING:
        b = bytes(x)
        return b.hex() if b else "-"
    return str(int(x))


def dump(paths, offsets):
    out = []
    for shard, path in enumerate(paths):
        r = GGUFReader(path)
        for name, f in r.fields.items():
            if name.startswith("GGUF."):
                continue
            t = f.types[0]
            if t == GGUFValueType.ARRAY:
                # parts: key length, key bytes, value type, element type, count, elements...
                et = GGUFValueType(int(f.parts[3][0]))
                n = int(f.parts[4][0])
                vals = []
                for idx in f.data:
                    part = f.parts[idx]
                    vals.append(fmt_scalar(et, part if et == GGUFValueType.STRING else part[0]))
                out.append(f"kv {shard} {name} ARRAY {et.name} {n} {','.join(vals) if vals else '-'}")
            else:
                part = f.parts[-1]
                out.append(f"kv {shard} {name} {t.name} "
                           f"{fmt_scalar(t, part if t == GGUFValueType.STRING else part[0])}")
        for t in r.tensors:
            ne = ",".join(str(int(d)) for d in t.shape)
            crc = zlib.crc32(t.data.tobytes()) & 0xFFFFFFFF
            line = f"tensor {t.name} {int(t.tensor_type)} {ne} {int(t.n_bytes)} {crc:08x}"
            if offsets:
                line += f" {int(t.data_offset)}"
            out.append(line)
    return out


def main():
    args = sys.argv[1:]
    offsets = False
    if args and args[0] == "--offsets":
        offsets = True
        args = args[1:]
    print("\n".join(dump(args, offsets)))


if __name__ == "__main__":
    main()
