#!/usr/bin/env python3
"""bench/serve_concurrency.py EXE MODEL — 8 greedy chat requests (64 tokens each, cache_prompt off) against
`ds4-offload serve -np 8 -t 2`: one at a time, then all 8 concurrently (one batched pass per step). Prints
wall time and generated tok/s of each. Loopback only; the server is stopped at the end."""
import subprocess, re, time, threading, json, http.client, sys
exe, model = sys.argv[1], sys.argv[2]
p = subprocess.Popen([exe, "serve", "-m", model, "--port", "0", "-t", "2", "-np", "8", "--ctx", "1024"],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
port = int(re.search(r":(\d+)", p.stdout.readline().split("http://")[1]).group(1))
def ask(i, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = {"messages": [{"role": "user", "content": "request number %d about rivers" % i}], "max_tokens": 64,
            "temperature": 0, "thinking": {"type": "disabled"}, "cache_prompt": False}
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = json.loads(c.getresponse().read()); out[i] = r["usage"]["completion_tokens"]
try:
    for n in (1, 8):
        out = {}
        t0 = time.time()
        if n == 1:
            for i in range(8): ask(i, out)
        else:
            ts = [threading.Thread(target=ask, args=(i, out)) for i in range(8)]
            [t.start() for t in ts]; [t.join() for t in ts]
        dt = time.time() - t0
        print("%s: 8 requests, %d tokens, %.2f s, %.1f tok/s" % ("one at a time" if n == 1 else "8 concurrent", sum(out.values()), dt, sum(out.values()) / dt))
finally:
    p.terminate(); p.wait()
