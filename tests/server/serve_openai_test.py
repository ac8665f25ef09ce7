#!/usr/bin/env python3
"""tests/server/serve_openai_test.py — `ds4-offload serve` end to end with the official `openai`
client: a tiny random-weight model (make-tiny) served on 127.0.0.1 on a free port.

Checks: plain and streamed chat give the same text (chat and thinking mode), completions too;
8 concurrent greedy requests (one batched forward pass per step) equal the same requests served
alone; a multi-turn conversation with the prefix cache on and off gives the same text, with cached
tokens reported only when on; stop strings across token
boundaries; seeded sampling repeats; a tools conversation is accepted; tokenize/detokenize round
trip; every bad input gets its status (400/401/404/413/503); a client that disconnects frees its
slot; SIGTERM stops the server cleanly. Bounded: a global alarm, the server is killed on exit.
Exit 77 (skipped) when the `openai` package is missing.
"""
import argparse
import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

try:
    import openai
except ImportError:
    print("openai package not installed in this Python; skipping")
    sys.exit(77)

FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def raw(port, method, path, body=None, headers=None):
    """One raw HTTP request; returns (status, headers dict, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def error_of(data):
    try:
        return json.loads(data)["error"]
    except Exception:
        return {}


def start_server(exe, model, extra, env=None):
    # The listen line is on stderr (stdout stays empty: nothing a pipe consumer would parse).
    p = subprocess.Popen([exe, "serve", "-m", model, "--port", "0", "-t", "1"] + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    signal.alarm(240)  # the whole test is bounded
    os.makedirs(a.workdir, exist_ok=True)
    model = os.path.join(a.workdir, "tiny.gguf")
    subprocess.run([a.exe, "make-tiny", "-o", model, "--experts", "q8_0", "--seed", "3"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    key = "test-key"
    proc, port = start_server(a.exe, model, ["-np", "8", "--queue", "4", "--ctx", "1024", "--prefix-cache-block", "16", "--api-key", key,
                                             "--model-alias", "tiny-test", "--max-messages", "64",
                                             "--max-body-bytes", "65536"])
    try:
        run_checks(port, key)
        # Clean shutdown on SIGTERM.
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            rc = None
        check(rc == 0, "SIGTERM: the server exits with status 0 (found %s)" % rc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Tool calls end to end: random weights cannot write DSML, so a second server replies with a
    # scripted text (DS4_SERVE_SCRIPTED_OUTPUT, after a real prefill) that the parser must split.
    # The tools block is ~900 tokens in the tiny vocabulary: this model gets a 4096-token context.
    cfg = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "models",
                                      "dsv4-tiny.json")))
    cfg["context_length"] = 4096
    cfg_path = os.path.join(a.workdir, "tiny4k.json")
    json.dump(cfg, open(cfg_path, "w"))
    model4k = os.path.join(a.workdir, "tiny4k.gguf")
    subprocess.run([a.exe, "make-tiny", "-o", model4k, "--experts", "q8_0", "--seed", "3", "--config", cfg_path],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = dict(os.environ, DS4_SERVE_SCRIPTED_OUTPUT=SCRIPTED)
    # The second server stages experts from host slabs, so /metrics has per-tier expert bytes to show.
    proc2, port2 = start_server(a.exe, model4k, ["--model-alias", "tiny-test", "--experts-tier", "host"], env)
    try:
        run_tool_checks(port2)
        _, _, m = raw(port2, "GET", "/metrics", None, None)
        moved = sum(float(v) for v in re.findall(r'^ds4_expert_bytes_total\{tier="[a-z_]+"\} (\S+)$', m.decode(), re.M))
        check(b'ds4_expert_store_info{tier="host"} 1' in m and moved > 0,
              "/metrics: per-tier expert bytes of the host tier (%.0f bytes moved)" % moved)
    finally:
        proc2.send_signal(signal.SIGTERM)
        try:
            proc2.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc2.kill()
            proc2.wait()
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    print("all checks passed")
    return 0


def run_checks(port, key):
    base = "http://127.0.0.1:%d/v1" % port
    client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=60)
    auth = {"Authorization": "Bearer " + key}

    # --- models, health ---
    ids = [m.id for m in client.models.list().data]
    check(ids == ["tiny-test"], "/v1/models lists the alias (found %s)" % ids)
    st, _, _ = raw(port, "GET", "/health")
    check(st == 200, "/health answers 200 without a key")

    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What does the baker sell?"}]
    no_think = {"thinking": {"type": "disabled"}}

    # --- plain vs streamed, chat mode ---
    plain = client.chat.completions.create(model="tiny-test", messages=msgs, max_tokens=24, temperature=0,
                                           extra_body=no_think)
    text = plain.choices[0].message.content
    parts, usage, finish = [], None, None
    for ch in client.chat.completions.create(model="tiny-test", messages=msgs, max_tokens=24, temperature=0,
                                             extra_body=no_think, stream=True,
                                             stream_options={"include_usage": True}):
        if ch.usage is not None:
            usage = ch.usage
        for c in ch.choices:
            if c.delta.content:
                parts.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    check(len(text) > 0, "chat mode: a non-empty greedy reply (%r)" % text)
    check("".join(parts) == text, "chat mode: streamed text equals the plain reply")
    check(finish == plain.choices[0].finish_reason == "length", "finish_reason 'length' in both (%s)" % finish)
    check(usage is not None and usage.completion_tokens == plain.usage.completion_tokens == 24
          and usage.prompt_tokens == plain.usage.prompt_tokens, "stream usage chunk equals the plain usage")

    # --- plain vs streamed, thinking mode: reasoning_content ---
    th = client.chat.completions.create(model="tiny-test", messages=msgs, max_tokens=16, temperature=0)
    reasoning = (th.choices[0].message.model_extra or {}).get("reasoning_content")
    rparts, cparts, susage = [], [], None
    for ch in client.chat.completions.create(model="tiny-test", messages=msgs, max_tokens=16, temperature=0,
                                             stream=True, stream_options={"include_usage": True}):
        if ch.usage is not None:
            susage = ch.usage
        for c in ch.choices:
            r = (c.delta.model_extra or {}).get("reasoning_content")
            if r:
                rparts.append(r)
            if c.delta.content:
                cparts.append(c.delta.content)
    check(reasoning is not None and "".join(rparts) == reasoning and
          "".join(cparts) == (th.choices[0].message.content or ""),
          "thinking mode: streamed reasoning_content/content equal the plain reply")
    rt = th.usage.completion_tokens_details.reasoning_tokens if th.usage.completion_tokens_details else None
    srt = susage.completion_tokens_details.reasoning_tokens if susage and susage.completion_tokens_details else None
    check(rt is not None and rt == srt and 0 < rt <= th.usage.completion_tokens and
          (not th.choices[0].message.content or rt < th.usage.completion_tokens),
          "thinking mode: usage reasoning_tokens %s (plain) = %s (stream), within completion_tokens" % (rt, srt))

    # --- completions: plain vs streamed ---
    cp = client.completions.create(model="tiny-test", prompt="the river bank", max_tokens=12, temperature=0)
    cs = "".join(c.choices[0].text for c in client.completions.create(model="tiny-test", prompt="the river bank",
                                                                       max_tokens=12, temperature=0, stream=True)
                 if c.choices)
    check(cp.choices[0].text == cs and len(cs) > 0, "completions: streamed text equals the plain text")

    # --- logprobs (OpenAI's shapes): greedy, so each chosen token is the top alternative ---
    lr = client.chat.completions.create(model="tiny-test", messages=msgs, max_tokens=12, temperature=0,
                                        extra_body=no_think, logprobs=True, top_logprobs=3)
    lc = lr.choices[0].logprobs.content if lr.choices[0].logprobs else []
    check(len(lc) == lr.usage.completion_tokens == 12, "chat logprobs: one entry per token (%d)" % len(lc))
    check(b"".join(bytes(e.bytes) for e in lc).decode("utf-8", "replace") == lr.choices[0].message.content ==
          text[:len(lr.choices[0].message.content)], "chat logprobs: the tokens' bytes spell the content")
    check(all(e.logprob <= 0 and len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token and
              e.top_logprobs[0].logprob == e.logprob and
              all(a.logprob >= b.logprob for a, b in zip(e.top_logprobs, e.top_logprobs[1:])) and
              sum(math.exp(t.logprob) for t in e.top_logprobs) <= 1 + 1e-5 for e in lc),
          "chat logprobs: <= 0, greedy token = top_logprobs[0], alternatives descending, mass <= 1")
    slc = []
    for ch in client.chat.completions.create(model="tiny-test", messages=msgs, max_tokens=12, temperature=0,
                                             extra_body=no_think, logprobs=True, top_logprobs=3, stream=True):
        for c in ch.choices:
            if c.logprobs and c.logprobs.content:
                slc.extend(c.logprobs.content)
    check([(e.token, e.logprob) for e in slc] == [(e.token, e.logprob) for e in lc],
          "chat logprobs: streamed chunks carry the same tokens and values as the plain reply")
    cl = client.completions.create(model="tiny-test", prompt="the river bank", max_tokens=12, temperature=0, logprobs=2)
    L = cl.choices[0].logprobs
    check(L is not None and len(L.tokens) == len(L.token_logprobs) == len(L.top_logprobs) == 12 and
          "".join(L.tokens) == cl.choices[0].text and L.text_offset[0] == 0 and
          all(len(t) == 2 and max(t.values()) == lp for t, lp in zip(L.top_logprobs, L.token_logprobs)),
          "completions logprobs: tokens spell the text, top-2 dicts, greedy = the best alternative")

    # --- a non-streamed client that disconnects frees its slot within a step ---
    def metric_of(name):
        _, _, m = raw(port, "GET", "/metrics", None, auth)
        v = re.search(r"^%s (\S+)$" % name, m.decode(), re.M)
        return float(v.group(1)) if v else -1.0
    gone0, gen0 = metric_of("ds4_http_client_gone_total"), metric_of("ds4_generated_tokens_total")
    body = json.dumps({"messages": [{"role": "user", "content": "tell a long story"}], "max_tokens": 900,
                       "temperature": 0, "thinking": {"type": "disabled"}}).encode()
    so = socket.create_connection(("127.0.0.1", port), timeout=10)
    so.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode() +
               b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    # Close as soon as the request holds a slot: the tiny model's greedy reply ends (EOS) after ~155
    # tokens, which a quiet machine generates in ~0.5 s, so a fixed sleep raced the natural end.
    t0 = time.time()
    while time.time() - t0 < 5 and metric_of("ds4_requests_processing") < 1:
        time.sleep(0.01)
    time.sleep(0.02)
    so.close()
    t0 = time.time()
    while time.time() - t0 < 5 and metric_of("ds4_requests_processing") != 0:
        time.sleep(0.05)
    dt = time.time() - t0
    gone1, gen1 = metric_of("ds4_http_client_gone_total"), metric_of("ds4_generated_tokens_total")
    check(gone1 == gone0 + 1 and gen1 - gen0 < 900 and dt < 2,
          "non-streamed client disconnect: slot freed %.2f s after close, %d of 900 tokens generated"
          % (dt, gen1 - gen0))

    # --- 8 concurrent greedy requests (batched together) equal the same served alone ---
    # cache_prompt off: the second round must not restore the first round's prompts.
    prompts = ["Tell me about bread.", "Where is the river?", "Count to five.", "Name a color.",
               "A long story about a cat that walks along the river bank at night.", "Hi", "Why?",
               "List three fruits and two vegetables, please."]
    lens = [30, 18, 26, 22, 12, 28, 20, 16]
    no_cache = dict(no_think, cache_prompt=False)

    def ask(i):
        r = client.chat.completions.create(model="tiny-test", messages=[{"role": "user", "content": prompts[i]}],
                                           max_tokens=lens[i], temperature=0, extra_body=no_cache)
        return r.choices[0].message.content

    alone = [ask(i) for i in range(8)]
    together = [None] * 8

    def worker(i):
        together[i] = ask(i)

    _, _, m0 = raw(port, "GET", "/metrics", None, auth)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    _, _, m1 = raw(port, "GET", "/metrics", None, auth)

    def metric(m, name):
        v = re.search(r"^%s (\S+)$" % name, m.decode(), re.M)
        return float(v.group(1)) if v else -1.0

    steps = metric(m1, "ds4_batch_steps_total") - metric(m0, "ds4_batch_steps_total")
    seqs = metric(m1, "ds4_batch_sequences_total") - metric(m0, "ds4_batch_sequences_total")
    check(together == alone, "8 concurrent greedy requests equal the same requests served alone")
    check(steps > 0 and seqs / steps > 1.5,
          "8 concurrent requests share forward passes (%d sequences over %d steps)" % (seqs, steps))

    # --- prefix cache: a multi-turn conversation with the cache on and off gives the same text ---
    def conversation(cache):
        msgs, texts, cached, usage_ok = [], [], [], True
        for q in ["Tell me a story about a small boat.", "And then what happened?", "How did it end?"]:
            msgs.append({"role": "user", "content": q})
            r = client.chat.completions.create(model="tiny-test", messages=msgs, max_tokens=20, temperature=0,
                                               extra_body=dict(no_think, cache_prompt=cache))
            u = r.usage
            hit = (u.model_extra or {}).get("prompt_cache_hit_tokens")
            miss = (u.model_extra or {}).get("prompt_cache_miss_tokens")
            usage_ok = usage_ok and hit == u.prompt_tokens_details.cached_tokens and hit + miss == u.prompt_tokens
            texts.append(r.choices[0].message.content)
            cached.append(u.prompt_tokens_details.cached_tokens)
            msgs.append({"role": "assistant", "content": r.choices[0].message.content})
        return texts, cached, usage_ok

    off_texts, off_cached, off_ok = conversation(False)
    on_texts, on_cached, on_ok = conversation(True)
    check(on_texts == off_texts, "prefix cache on vs off: the 3-turn conversation's replies are identical")
    check(all(c == 0 for c in off_cached) and all(c > 0 for c in on_cached[1:]) and all(c % 16 == 0 for c in on_cached),
          "cached_tokens: 0 with cache_prompt false, > 0 (multiples of the 16-token block) on later turns with it "
          "(off %s, on %s)" % (off_cached, on_cached))
    check(off_ok and on_ok, "usage: prompt_cache_hit_tokens = cached_tokens, hit + miss = prompt_tokens")
    _, _, m2 = raw(port, "GET", "/metrics", None, auth)
    check(metric(m2, "ds4_prefix_cache_hits_total") >= 2 and metric(m2, "ds4_prefix_cache_bytes") > 0,
          "/metrics: prefix-cache hits %d, bytes %d" % (metric(m2, "ds4_prefix_cache_hits_total"),
                                                        metric(m2, "ds4_prefix_cache_bytes")))

    # --- stop string across token boundaries ---
    if len(text) >= 8:
        stop = text[3:6]
        s = client.chat.completions.create(model="tiny-test", messages=msgs, max_tokens=24, temperature=0,
                                           extra_body=no_think, stop=[stop])
        check(s.choices[0].message.content == text[:text.find(stop)] and s.choices[0].finish_reason == "stop",
              "stop string %r: text cut before its first occurrence, finish_reason 'stop'" % stop)
        ss = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="tiny-test", messages=msgs, max_tokens=24, temperature=0, extra_body=no_think, stop=stop,
            stream=True) if c.choices)
        check(ss == text[:text.find(stop)], "stop string, streamed: same cut")

    # --- seeded sampling repeats ---
    def sampled(seed):
        return client.chat.completions.create(model="tiny-test", messages=msgs, max_tokens=12, temperature=0.9,
                                              top_p=0.95, seed=seed, extra_body={"top_k": 40, "min_p": 0.01,
                                                                                 **no_think}).choices[0].message.content
    check(sampled(7) == sampled(7), "the same seed gives the same sampled text")

    # --- a tools conversation (tool call + tool result) is accepted and rendered ---
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                "parameters": {"type": "object",
                                                               "properties": {"city": {"type": "string"}}}}}]
    conv = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "reasoning_content": "I need the tool.",
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    tr = client.chat.completions.create(model="tiny-test", messages=conv, tools=tools, max_tokens=4, temperature=0)
    check(tr.choices[0].finish_reason in ("length", "stop", "tool_calls") and tr.usage.prompt_tokens > 100,
          "tools conversation accepted (prompt %d tokens with the tools block)" % tr.usage.prompt_tokens)

    # --- tokenize / detokenize ---
    st, _, d = raw(port, "POST", "/tokenize", json.dumps({"content": "the baker"}), auth)
    toks = json.loads(d)["tokens"] if st == 200 else []
    st2, _, d2 = raw(port, "POST", "/detokenize", json.dumps({"tokens": toks}), auth)
    check(st == 200 and st2 == 200 and json.loads(d2)["content"] == "the baker", "tokenize/detokenize round trip")

    # --- bad inputs ---
    chat = "/v1/chat/completions"
    good = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    def status_of(body, headers=None, path=chat, raw_body=None):
        return raw(port, "POST", path, raw_body if raw_body is not None else json.dumps(body),
                   auth if headers is None else headers)

    st, _, d = status_of(None, raw_body=b'{"messages": [')
    check(st == 400 and error_of(d).get("code") == "invalid_json", "malformed JSON -> 400 (%d)" % st)
    deep = b'{"messages": [{"role": "user", "content": "hi"}], "temperature": ' + b"[" * 30000 + b"]" * 30000 + b"}"
    st, _, d = status_of(None, raw_body=deep)
    check(st == 400 and "nests deeper than 128" in error_of(d).get("message", ""),
          "JSON nested 30000 levels deep -> 400, server alive (%d)" % st)
    st, _, d = status_of(None, raw_body=b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}')
    check(st == 400 and error_of(d).get("code") == "invalid_utf8", "invalid UTF-8 -> 400 (%d)" % st)
    st, _, d = status_of({**good, "temperature": "hot"})
    check(st == 400 and error_of(d).get("param") == "temperature", "wrong type -> 400 naming the field (%d)" % st)
    st, _, d = status_of({**good, "messages": "hi"})
    check(st == 400 and error_of(d).get("param") == "messages", "messages not an array -> 400 (%d)" % st)
    st, _, d = status_of({**good, "temperature": 5})
    check(st == 400, "temperature out of range -> 400 (%d)" % st)
    try:
        client.chat.completions.create(model="x", messages=good["messages"], extra_body={"foo": 1})
        check(False, "unknown field -> 400")
    except openai.BadRequestError as e:
        check("foo" in str(e), "unknown field -> 400 naming it (openai.BadRequestError)")
    for field, value in (("n", 2), ("repeat_penalty", 1.1), ("ignore_eos", True), ("frequency_penalty", 0.5),
                         ("response_format", {"type": "json_object"}), ("tool_choice", "required")):
        st, _, d = status_of({**good, field: value})
        check(st == 400 and field in error_of(d).get("message", ""),
              "unimplemented %s=%s -> 400 naming it (%d)" % (field, json.dumps(value), st))
    st, _, d = status_of({**good, "n_predict": 5})
    check(st == 400 and "n_predict" in error_of(d).get("message", ""), "n_predict disagreeing with max_tokens -> 400 (%d)" % st)
    st, _, d = status_of({"messages": good["messages"], "n_predict": 3, "thinking": {"type": "disabled"}})
    check(st == 200 and json.loads(d)["usage"]["completion_tokens"] <= 3, "llama.cpp's n_predict = max_tokens (%d)" % st)
    st, _, d = status_of({**good, "top_logprobs": 2})
    check(st == 400 and error_of(d).get("param") == "top_logprobs", "top_logprobs without logprobs -> 400 (%d)" % st)
    st, _, d = status_of({**good, "logprobs": True, "top_logprobs": 21})
    check(st == 400 and error_of(d).get("param") == "top_logprobs", "top_logprobs 21 -> 400 (%d)" % st)
    st, _, d = status_of({"prompt": "x", "logprobs": 6}, path="/v1/completions")
    check(st == 400 and error_of(d).get("param") == "logprobs", "completions logprobs 6 -> 400 (%d)" % st)
    # A huge or garbage Content-Length is refused from the headers, before any body byte is read:
    # the answer comes at once, then the connection closes.
    for cl, want in (("10000000000", 413), ("-1", 400), ("12ab", 400)):
        t0 = time.time()
        so = socket.create_connection(("127.0.0.1", port), timeout=10)
        so.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                    "Content-Type: application/json\r\nContent-Length: %s\r\n\r\n{\"mess" % (key, cl)).encode())
        reply = b""
        try:
            while True:
                b = so.recv(65536)
                if not b:
                    break
                reply += b
        except socket.timeout:
            pass
        so.close()
        dt = time.time() - t0
        head, _, body = reply.partition(b"\r\n\r\n")
        code = (error_of(body) or {}).get("code")
        check(head.startswith(b"HTTP/1.1 %d" % want) and code in ("request_too_large", "bad_content_length") and dt < 3,
              "Content-Length %s -> %d JSON error from the headers, connection closed, in %.2f s (%r)"
              % (cl, want, dt, head[:40]))
    st, _, d = status_of({**good, "messages": [{"role": "wizard", "content": "x"}]})
    check(st == 400, "unknown role -> 400 (%d)" % st)
    st, _, d = status_of({"messages": [{"role": "user", "content": "bread " * 1500}]})
    msg = error_of(d).get("message", "")
    check(st == 400 and "1024" in msg and re.search(r"has \d{4,} tokens", msg) is not None,
          "prompt longer than the context -> 400 naming the sizes (%r)" % msg)
    # The same 9 KB body as `curl -d` sends it (form-urlencoded): read as JSON, not refused with
    # the HTTP library's 8 KiB form limit.
    st, _, d = status_of({"messages": [{"role": "user", "content": "bread " * 1500}]},
                         headers={**auth, "Content-Type": "application/x-www-form-urlencoded"})
    check(st == 400 and "1024" in error_of(d).get("message", ""),
          "9 KB form-urlencoded body -> read as JSON (%d %r)" % (st, error_of(d).get("message", "")))
    st, _, d = status_of({**good, "max_tokens": 5000})
    msg = error_of(d).get("message", "")
    check(st == 400 and "5000" in msg and "1024" in msg, "max_tokens beyond the context -> 400 (%r)" % msg)
    st, _, d = status_of({"messages": [{"role": "user", "content": "x"}] * 65})
    check(st == 400 and "64" in error_of(d).get("message", ""), "too many messages -> 400 (%d)" % st)
    st, _, d = status_of(None, raw_body=json.dumps({"messages": [{"role": "user", "content": "x" * 70000}]}))
    check(st == 413 and error_of(d).get("code") == "request_too_large", "body too large -> 413 (%d)" % st)
    st, _, d = status_of(good, headers={"Authorization": "Bearer wrong"})
    check(st == 401 and error_of(d).get("code") == "invalid_api_key", "wrong API key -> 401 (%d)" % st)
    try:
        openai.OpenAI(base_url=base, api_key="nope", max_retries=0).models.list()
        check(False, "openai client with a wrong key -> 401")
    except openai.AuthenticationError:
        check(True, "openai client with a wrong key -> openai.AuthenticationError")
    st, _, d = raw(port, "GET", "/v1/nothing", None, auth)
    check(st == 404 and "error" in json.loads(d), "unknown endpoint -> 404 JSON error (%d)" % st)

    # --- bounded queue (503 + Retry-After) and disconnects freeing slots ---
    # 12 streams hold the 8 slots and the 4 queue places; more requests get 503.
    streams = []
    for i in range(12):
        s = client.chat.completions.create(model="tiny-test", messages=[{"role": "user", "content": "go %d" % i}],
                                           max_tokens=200, temperature=0, stream=True, extra_body=no_think)
        streams.append(s)
    time.sleep(0.5)
    st, hd, d = status_of(good)
    check(st == 503 and hd.get("Retry-After") == "1" and error_of(d).get("code") == "server_busy",
          "queue full -> 503 with Retry-After (%d)" % st)
    for s in streams:
        s.close()  # client disconnects
    deadline = time.time() + 20
    processing = None
    while time.time() < deadline:
        _, _, m = raw(port, "GET", "/metrics", None, auth)
        vals = dict(re.findall(r"^(ds4_requests_(?:processing|queued)) (\S+)$", m.decode(), re.M))
        processing = (float(vals.get("ds4_requests_processing", -1)), float(vals.get("ds4_requests_queued", -1)))
        if processing == (0.0, 0.0):
            break
        time.sleep(0.25)
    check(processing == (0.0, 0.0), "disconnected clients free their slots and queue places (%s)" % (processing,))
    st, _, _ = status_of(good)
    check(st == 200, "the server serves again after the disconnects (%d)" % st)
    _, _, m = raw(port, "GET", "/metrics", None, auth)
    check(b"ds4_requests_cancelled_total" in m and b"ds4_generated_tokens_total" in m, "/metrics in Prometheus text")


D = "\uff5cDSML\uff5c"
SCRIPTED = ("I should call the tool.</think>Checking.\n\n<" + D + "tool_calls>\n<" + D +
            "invoke name=\"get_weather\">\n<" + D + "parameter name=\"city\" string=\"true\">Paris</" + D +
            "parameter>\n<" + D + "parameter name=\"days\" string=\"false\">3</" + D + "parameter>\n</" + D +
            "invoke>\n</" + D + "tool_calls>")


def run_tool_checks(port):
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="none", max_retries=0, timeout=60)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    r = client.chat.completions.create(model="tiny-test", messages=msgs, tools=tools, max_tokens=1000)
    m = r.choices[0].message
    calls = m.tool_calls or []
    check(r.choices[0].finish_reason == "tool_calls" and m.content == "Checking." and
          (m.model_extra or {}).get("reasoning_content") == "I should call the tool.",
          "scripted DSML: reasoning, content and finish_reason 'tool_calls' split out (%s, %r, %r, %d tokens)" % (
              r.choices[0].finish_reason, m.content, (m.model_extra or {}).get("reasoning_content"),
              r.usage.completion_tokens))
    check(len(calls) == 1 and calls[0].function.name == "get_weather" and calls[0].id and
          json.loads(calls[0].function.arguments) == {"city": "Paris", "days": 3},
          "scripted DSML: one OpenAI tool call with JSON arguments")
    # Streamed: tool_calls deltas assemble to the same call; no markup reaches content/reasoning.
    content, reasoning, acc, finish = [], [], {}, None
    for ch in client.chat.completions.create(model="tiny-test", messages=msgs, tools=tools, max_tokens=1000,
                                             stream=True):
        for c in ch.choices:
            if c.delta.content:
                content.append(c.delta.content)
            rc = (c.delta.model_extra or {}).get("reasoning_content")
            if rc:
                reasoning.append(rc)
            for tc in c.delta.tool_calls or []:
                e = acc.setdefault(tc.index, {"name": "", "arguments": ""})
                e["name"] += (tc.function.name or "") if tc.function else ""
                e["arguments"] += (tc.function.arguments or "") if tc.function else ""
            if c.finish_reason:
                finish = c.finish_reason
    leaked = [p for p in content + reasoning if "DSML" in p or "\uff5c" in p or "</think" in p]
    check("".join(content) == "Checking." and "".join(reasoning) == "I should call the tool." and not leaked,
          "scripted DSML, streamed: no marker fragment in any delta (%d content deltas)" % len(content))
    check(finish == "tool_calls" and list(acc) == [0] and acc[0]["name"] == "get_weather" and
          json.loads(acc[0]["arguments"]) == {"city": "Paris", "days": 3},
          "scripted DSML, streamed: tool_calls deltas give the same call (%s, %r)" % (finish, acc))
    # Round trip: the assistant turn with its call and the tool's result go back in.
    back = msgs + [{"role": "assistant", "content": m.content,
                    "reasoning_content": (m.model_extra or {}).get("reasoning_content"),
                    "tool_calls": [{"id": c.id, "type": "function",
                                    "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                   for c in calls]},
                   {"role": "tool", "tool_call_id": calls[0].id if calls else "x", "content": "sunny, 21 C"}]
    r2 = client.chat.completions.create(model="tiny-test", messages=back, tools=tools, max_tokens=1000)
    check(r2.choices[0].finish_reason == "tool_calls" and r2.usage.prompt_tokens > r.usage.prompt_tokens,
          "tool result round trip accepted (prompt %d -> %d tokens)" % (r.usage.prompt_tokens, r2.usage.prompt_tokens))


if __name__ == "__main__":
    sys.exit(main())
