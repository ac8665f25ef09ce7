#!/usr/bin/env python3
"""Random byte mutants of a GGUF, each run through `inspect --validate` and `run` side by side
under `ulimit -v 2 GiB` and `timeout 20`: reports disagreements (one exits 0, the other 1) and
crashes (any other exit code, e.g. a signal or a timeout). Mutants that disagree or crash are kept
as dis<i>.gguf / crash<i>.gguf in the working directory.

Usage: scripts/validate_mutants.py DS4_OFFLOAD MODEL.gguf HEADER_BYTES COUNT SEED
  HEADER_BYTES: 70% of the mutated bytes fall in the first HEADER_BYTES bytes (the metadata and
  tensor infos: `ds4-offload inspect MODEL` prints "data at N").
"""
import os
import random
import subprocess
import sys


def main():
    exe, model, hdr, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    src = open(model, "rb").read()
    random.seed(seed)
    dis = crash = both_ok = 0
    for i in range(n):
        d = bytearray(src)
        for _ in range(random.randint(1, 4)):
            p = random.randrange(hdr if random.random() < 0.7 else len(d))
            d[p] = random.randrange(256)
        open("m.gguf", "wb").write(d)

        def run(args):
            p = subprocess.run(["sh", "-c", f"ulimit -v 2097152; timeout 20 '{exe}' {args}"],
                               capture_output=True, text=True, errors="replace")
            return p.returncode, (p.stdout + p.stderr).strip()

        v = run("inspect --validate m.gguf")
        r = run("run -m m.gguf -p 'the baker' -n 4 --temp 0")
        if v[0] not in (0, 1) or r[0] not in (0, 1):
            crash += 1
            os.rename("m.gguf", f"crash{i}.gguf")
            print(f"CRASH {i}: validate {v[0]}, run {r[0]}")
        elif v[0] != r[0]:
            dis += 1
            os.rename("m.gguf", f"dis{i}.gguf")
            print(f"DISAGREE {i}: validate {v[0]}, run {r[0]}\n  validate: {v[1].splitlines()[-1][:300]}\n"
                  f"  run: {r[1].splitlines()[-1][:300]}")
        elif v[0] == 0:
            both_ok += 1
    print(f"mutants {n}, disagree {dis}, crash {crash}, both ok {both_ok}")
    return 1 if dis or crash else 0


if __name__ == "__main__":
    sys.exit(main())
