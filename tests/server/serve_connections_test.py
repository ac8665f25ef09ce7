#!/usr/bin/env python3
"""tests/server/serve_connections_test.py — idle and slow TCP clients cannot starve `ds4-offload serve`.

A tiny make-tiny model is served on 127.0.0.1 (standard library only, no `openai` package).
Checks, with the default limits: 64 idle sockets (half of them sent nothing, half sent part of a
request line) do not delay GET /health (answered within 3 s on a fresh connection, where the
worker-per-connection server of cpp-httplib stalled for --timeout seconds), the server's thread
count does not grow and its resident memory grows by less than 64 MiB; a slow client that
finishes its request line later is still answered. With --header-timeout 2 --max-connections 8:
a connection beyond the cap gets 503 `too_many_connections` at once, a half-sent head gets 408
and is closed within the timeout, an idle one is closed too, and /metrics counts them.
Bounded by a global alarm; the server is killed on exit.
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def start_server(exe, model, extra):
    p = subprocess.Popen([exe, "serve", "-m", model, "--port", "0", "-t", "1"] + extra,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    m = None
    for line in p.stderr:
        seen.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m or len(seen) > 50:
            break
    if not m:
        p.kill()
        print("server did not start:", "".join(seen))
        sys.exit(1)
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, int(m.group(1))


def stop_server(p):
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return None


def proc_status(pid):
    """(threads, resident KiB) of process `pid` from /proc."""
    threads = rss = -1
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Threads:"):
                threads = int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return threads, rss


def get(port, path, timeout):
    """GET on a fresh connection: (status, body bytes, seconds); status -1 on timeout or error."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" % path).encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, OSError):
        return -1, b"", time.monotonic() - t0
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.[01] (\d+)", head)
    return (int(m.group(1)) if m else -1), body, time.monotonic() - t0


def read_until_closed(s, limit):
    """Everything the server sends before it closes `s`, and the seconds it took (None: still open)."""
    t0 = time.monotonic()
    s.settimeout(limit)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data, time.monotonic() - t0
            data += chunk
    except socket.timeout:
        return data, None
    except OSError:
        return data, time.monotonic() - t0


def idle_sockets(port, n):
    """`n` connected sockets: even ones send nothing, odd ones half a request line."""
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if i % 2:
            s.sendall(b"GET /hea")
        socks.append(s)
    return socks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    signal.alarm(200)
    os.makedirs(a.workdir, exist_ok=True)
    model = os.path.join(a.workdir, "tiny.gguf")
    subprocess.run([a.exe, "make-tiny", "-o", model, "--experts", "q8_0", "--seed", "3"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # --- default limits: 64 idle sockets, /health stays prompt ---
    proc, port = start_server(a.exe, model, [])
    socks = []
    try:
        st, _, _ = get(port, "/health", 10)
        check(st == 200, "/health answers before the idle clients (status %d)" % st)
        threads0, rss0 = proc_status(proc.pid)
        socks = idle_sockets(port, 64)
        time.sleep(0.5)
        st, body, secs = get(port, "/health", 10)
        check(st == 200 and secs < 3.0,
              "/health with 64 idle sockets open: status %d in %.2f s (expected 200 within 3 s)" % (st, secs))
        st, _, secs = get(port, "/v1/models", 10)
        check(st == 200 and secs < 3.0, "/v1/models with 64 idle sockets open: status %d in %.2f s" % (st, secs))
        threads1, rss1 = proc_status(proc.pid)
        check(threads1 <= threads0,
              "server threads do not grow with idle connections (%d before, %d with 64 open)" % (threads0, threads1))
        check(rss1 - rss0 < 64 * 1024,
              "server memory grows by less than 64 MiB with 64 idle connections (%+d KiB)" % (rss1 - rss0))
        # A slow client that completes its request line is still answered.
        s = socks[1]
        s.sendall(b"lth HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data, secs = read_until_closed(s, 10)
        check(data.startswith(b"HTTP/1.1 200") and b'"ok"' in data,
              "a client that finishes its half-sent request line gets its answer (%r)" % data[:40])
        _, m, _ = get(port, "/metrics", 10)
        opened = re.search(rb"^ds4_http_connections_open (\d+)", m, re.M)
        check(opened is not None and int(opened.group(1)) >= 60,
              "/metrics counts the open connections (%s)" % (opened.group(1).decode() if opened else "missing"))
    finally:
        for s in socks:
            s.close()
        rc = stop_server(proc)
    check(rc == 0, "SIGTERM with idle connections open: the server exits with status 0 (found %s)" % rc)

    # --- --max-connections 8, --header-timeout 2 ---
    proc, port = start_server(a.exe, model, ["--max-connections", "8", "--header-timeout", "2"])
    socks = []
    try:
        socks = idle_sockets(port, 8)
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        t0 = time.monotonic()
        data, secs = read_until_closed(extra, 5)
        extra.close()
        body = data.partition(b"\r\n\r\n")[2]
        try:
            code = json.loads(body)["error"]["code"]
        except Exception:
            code = None
        check(data.startswith(b"HTTP/1.1 503") and code == "too_many_connections" and secs is not None and secs < 1.0,
              "a 9th connection beyond --max-connections 8 gets 503 too_many_connections at once (%r, %s s)" %
              (data[:40], secs))
        # The held connections are closed after --header-timeout: the half-sent ones with a 408.
        results = [read_until_closed(s, 6) for s in socks]
        waited = time.monotonic() - t0
        half = [r for i, r in enumerate(results) if i % 2]
        quiet = [r for i, r in enumerate(results) if i % 2 == 0]
        check(all(r[1] is not None for r in results) and waited < 5.0,
              "every held connection is closed within --header-timeout 2 (all closed after %.1f s)" % waited)
        check(all(r[0].startswith(b"HTTP/1.1 408") and b"request_timeout" in r[0] for r in half),
              "a half-sent request head gets 408 request_timeout (%r)" % (half[0][0][:40] if half else None))
        check(all(r[0] == b"" for r in quiet), "an idle connection is closed without an answer")
        st, _, secs = get(port, "/health", 10)
        check(st == 200 and secs < 3.0, "/health after the timeouts: status %d in %.2f s" % (st, secs))
        _, m, _ = get(port, "/metrics", 10)
        refused = re.search(rb"^ds4_http_connections_refused_total (\d+)", m, re.M)
        timeouts = re.search(rb"^ds4_http_header_timeouts_total (\d+)", m, re.M)
        check(refused is not None and int(refused.group(1)) == 1 and timeouts is not None and
              int(timeouts.group(1)) == 4,
              "/metrics: 1 refused connection, 4 head timeouts (found %s, %s)" %
              (refused.group(1).decode() if refused else None, timeouts.group(1).decode() if timeouts else None))
    finally:
        for s in socks:
            s.close()
        rc = stop_server(proc)
    check(rc == 0, "SIGTERM: the server exits with status 0 (found %s)" % rc)

    # SIGTERM while a client trickles a request body (complete head, one body byte a second, each
    # pause inside --header-timeout): the server stops reading it and exits at once, not after
    # --timeout (it used to wait for the body's deadline).
    proc, port = start_server(a.exe, model, ["--header-timeout", "5", "--timeout", "60"])
    slow = socket.create_connection(("127.0.0.1", port), timeout=10)
    stop_feeding = threading.Event()
    try:
        slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 200\r\n\r\n{")

        def feed():
            while not stop_feeding.wait(1.0):
                try:
                    slow.sendall(b" ")
                except OSError:
                    return
        threading.Thread(target=feed, daemon=True).start()
        time.sleep(2.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
            rc = None
        waited = time.monotonic() - t0
    finally:
        stop_feeding.set()
        slow.close()
    check(rc == 0 and waited < 3.0,
          "SIGTERM while a request body trickles in: exit status 0 within 3 s (status %s after %.1f s)" % (rc, waited))

    # Bad values are refused by name.
    # (-1 used to wrap to 2^64 - 1 in the unsigned limits and start a server without them.)
    for flag, val in (("--header-timeout", "0"), ("--max-connections", "0"), ("--max-body-bytes", "-1"),
                      ("--max-body-bytes", "99999999999999999999"), ("--max-messages", "-1"),
                      ("--prefix-cache-mib", "-1")):
        r = subprocess.run([a.exe, "serve", "-m", model, "--port", "0", flag, val], capture_output=True, text=True,
                           timeout=30)
        check(r.returncode == 1 and flag in r.stderr and "expected" in r.stderr and
              ("found " + val in r.stderr or not val.startswith("-")),
              "%s %s is refused by name (%s)" % (flag, val, r.stderr.strip()[:120]))

    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
