#!/usr/bin/env python3
"""bench/serve_load.py --exe EXE --model MODEL — a bounded, loopback-only load test of `ds4-offload serve`.

Starts `EXE serve -m MODEL --host 127.0.0.1 --port 0 -np SLOTS -t THREADS` (the chosen port is read from the
first line the server prints), then for each client count (default 1, 4 and 16) runs that many concurrent
clients, each sending a fixed number of streamed greedy chat requests (temperature 0, thinking off, short
distinct prompts, `max_tokens` 32, `cache_prompt: false` so the prefix cache does not shorten later prompts,
`stream_options.include_usage` on). Measured per client count:
  - requests/s: completed requests / wall time of the level;
  - generated tok/s: sum of usage.completion_tokens / wall time of the level;
  - TTFT p50/p99 (ms): request sent -> first SSE chunk whose delta carries non-empty `content` or
    `reasoning_content` (nearest-rank percentiles; with fewer than 100 samples p99 is the slowest one);
  - server RSS (VmRSS from /proc/PID/status, MiB) after startup + one warm-up request, and after each level;
    VmHWM (peak RSS) at the end.
Prints a markdown table and the exact command line. Standard library only.

Bounds: every client sends a fixed count of requests; each request has a socket timeout; the whole run has
an overall deadline (--timeout, SIGALRM as backstop); the server is killed in a `finally`. Only 127.0.0.1 is
ever contacted. Exit status 1 if any request failed or the deadline passed.
"""
import argparse
import http.client
import json
import math
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time


def vm_kib(pid, field):
    """The `field` line (VmRSS, VmHWM) of /proc/PID/status in KiB, or None if the process is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def mib(kib):
    return "n/a" if kib is None else "%.1f" % (kib / 1024.0)


def percentile(xs, p):
    """Nearest-rank percentile p (0..100) of a non-empty list."""
    s = sorted(xs)
    k = max(1, int(math.ceil(p / 100.0 * len(s))))
    return s[k - 1]


def start_server(args):
    """Start the server; returns (Popen, port). Raises RuntimeError if no port line arrives in time."""
    cmd = [args.exe, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", "0", "-np", str(args.slots),
           "-t", str(args.threads), "--ctx", str(args.ctx)] + args.server_arg
    # The listen line is on stderr, after the load messages.
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + args.start_timeout
    seen, m = [], None
    while time.time() < deadline and not m:
        ready, _, _ = select.select([p.stderr], [], [], max(0.0, deadline - time.time()))
        if not ready:
            break
        line = p.stderr.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
    if not m:
        p.kill()
        p.wait()
        raise RuntimeError("server did not print 'listening on http://127.0.0.1:PORT' on stderr within %ds (stderr %r)"
                           % (args.start_timeout, "".join(seen)[-500:]))
    # Drain anything else it prints so a full pipe can never block the server.
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, int(m.group(1)), cmd


def one_request(port, prompt, max_tokens, timeout, deadline=None):
    """One streamed greedy chat request. Returns (ttft_s or None, completion_tokens, total_s).
    `timeout` is the socket timeout (s); past `deadline` (time.monotonic()) the stream is abandoned."""
    body = {"model": "x", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            "thinking": {"type": "disabled"}, "cache_prompt": False}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        t0 = time.monotonic()
        c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:200]))
        ttft, tokens, done = None, None, False
        for _ in range(100000):  # bounded: far more lines than 32 tokens can produce
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("overall deadline passed mid-stream")
            raw = r.readline()
            if not raw:
                break
            line = raw.decode("utf-8").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError("stream error: %s" % chunk["error"])
            for ch in chunk.get("choices") or []:
                d = ch.get("delta") or {}
                if ttft is None and (d.get("content") or d.get("reasoning_content")):
                    ttft = time.monotonic() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
        if not done or tokens is None:
            raise RuntimeError("stream ended without usage/[DONE]")
        return ttft, tokens, time.monotonic() - t0
    finally:
        c.close()


def run_level(port, clients, per_client, max_tokens, deadline, req_timeout):
    """`clients` threads, each sending `per_client` requests in turn. Returns a dict of figures."""
    results, errors, lock = [], [], threading.Lock()

    def client(ci):
        for j in range(per_client):
            if time.monotonic() > deadline:
                with lock:
                    errors.append("deadline passed before request")
                return
            prompt = "Client %d, request %d: write a short line about rivers and mountains." % (ci, j)
            try:
                res = one_request(port, prompt, max_tokens, min(req_timeout, max(1.0, deadline - time.monotonic())),
                                  deadline)
                with lock:
                    results.append(res)
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                with lock:
                    errors.append("%s: %s" % (type(e).__name__, e))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 1.0)
    wall = time.monotonic() - t0
    alive = sum(t.is_alive() for t in threads)
    if alive:
        errors.append("%d client threads still running at the deadline" % alive)
    ttfts = [r[0] for r in results if r[0] is not None]
    toks = sum(r[1] for r in results)
    return {"clients": clients, "requests": len(results), "errors": errors, "wall": wall,
            "req_s": len(results) / wall if wall > 0 else 0.0, "tok": toks, "tok_s": toks / wall if wall > 0 else 0.0,
            "p50": percentile(ttfts, 50) * 1e3 if ttfts else float("nan"),
            "p99": percentile(ttfts, 99) * 1e3 if ttfts else float("nan"), "n_ttft": len(ttfts)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", required=True, help="ds4-offload binary")
    ap.add_argument("--model", required=True, help="model GGUF (e.g. from `ds4-offload make-tiny`)")
    ap.add_argument("--slots", type=int, default=16, help="server -np (default 16)")
    ap.add_argument("--threads", type=int, default=2, help="server -t (default 2)")
    ap.add_argument("--ctx", type=int, default=1024, help="server --ctx per slot (default 1024)")
    ap.add_argument("--clients", default="1,4,16", help="comma-separated concurrent client counts")
    ap.add_argument("--requests-per-client", type=int, default=4, help="requests each client sends (default 4)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--request-timeout", type=float, default=120.0, help="socket timeout per request, s")
    ap.add_argument("--start-timeout", type=int, default=60, help="seconds to wait for the server's port line")
    ap.add_argument("--timeout", type=int, default=600, help="overall deadline for the whole run, s")
    ap.add_argument("--server-arg", action="append", default=[], help="extra argument passed to serve (repeat)")
    args = ap.parse_args()
    levels = [int(x) for x in args.clients.split(",") if x.strip()]
    if not levels or any(n < 1 or n > 256 for n in levels) or not (1 <= args.requests_per_client <= 1000):
        ap.error("client counts must be 1..256 and --requests-per-client 1..1000")

    t_start = time.monotonic()
    deadline = t_start + args.timeout
    def on_alarm(*_):
        raise TimeoutError("overall deadline (SIGALRM)")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(args.timeout + 30)  # backstop; the deadline checks should end things first

    proc = None
    rows, failed = [], False
    try:
        proc, port, cmd = start_server(args)
        one_request(port, "warm-up", args.max_tokens, args.request_timeout)  # first-request effects out of the figures
        rss_before = vm_kib(proc.pid, "VmRSS")
        for n in levels:
            if time.monotonic() > deadline:
                print("overall deadline passed; skipping %d clients" % n, file=sys.stderr)
                failed = True
                break
            row = run_level(port, n, args.requests_per_client, args.max_tokens, deadline, args.request_timeout)
            row["rss"] = vm_kib(proc.pid, "VmRSS")
            rows.append(row)
            if row["errors"]:
                failed = True
                print("%d clients: %d errors, first: %s" % (n, len(row["errors"]), row["errors"][0]), file=sys.stderr)
            if proc.poll() is not None:
                print("server exited with status %s" % proc.returncode, file=sys.stderr)
                failed = True
                break
        hwm = vm_kib(proc.pid, "VmHWM")
    except (TimeoutError, RuntimeError) as e:
        print("load test aborted: %s" % e, file=sys.stderr)
        failed = True
        rss_before = hwm = None
    finally:
        signal.alarm(0)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    if rows:
        print("| clients | requests | errors | wall s | req/s | gen tokens | gen tok/s | TTFT p50 ms | TTFT p99 ms "
              "| RSS after MiB |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print("| %d | %d | %d | %.2f | %.2f | %d | %.1f | %.0f | %.0f | %s |" % (
                r["clients"], r["requests"], len(r["errors"]), r["wall"], r["req_s"], r["tok"], r["tok_s"], r["p50"],
                r["p99"], mib(r["rss"])))
        print()
        print("Server RSS before load (after start + 1 warm-up request): %s MiB; peak (VmHWM) at the end: %s MiB."
              % (mib(rss_before), mib(hwm)))
        print("Each client sends %d streamed greedy requests (max_tokens %d, thinking off, cache_prompt false); "
              "p99 of fewer than 100 samples is the slowest request." % (args.requests_per_client, args.max_tokens))
        print("Server: `%s`" % " ".join(shlex.quote(c) for c in cmd))
    print("Command: `%s`" % " ".join(["python3"] + [shlex.quote(a) for a in sys.argv]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
