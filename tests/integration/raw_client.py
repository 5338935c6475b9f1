#!/usr/bin/python3
"""Plain HTTP clients as the callers of a proxy (or of `sluice mock`
directly): Python's httpx (Debian's python3-httpx) or the curl command,
each speaking the provider's wire format by hand, the way a service
without an SDK does.

  /usr/bin/python3 raw_client.py CLIENT API BASE MODEL N CONCURRENCY STREAM MAX_RETRIES API_KEY [MAX_TOKENS [TAG]]

  CLIENT       httpx | curl (one `curl` process per attempt)
  API          openai     POST BASE/v1/chat/completions, Authorization: Bearer KEY
               azure      POST BASE/openai/deployments/MODEL/chat/completions?api-version=2024-10-21, api-key: KEY
               anthropic  POST BASE/v1/messages, x-api-key: KEY, anthropic-version: 2023-06-01
  STREAM       yes | no   (OpenAI streams ask stream_options.include_usage)
  MAX_RETRIES  429 and 5xx answers are retried this many times, after the
               answer's retry-after-ms, else Retry-After (seconds), else 1 s
               (each wait at most 60 s), as the SDKs do

N requests, CONCURRENCY at a time (threads); each prints one JSON line on
stdout when it ends, with the fields of sdk_client.js:
  {"tag","sdk","i","status","stream","events","complete","input_tokens",
   "output_tokens","text_chars","t","ms","error","attempts"}
(t: when the request started, wall clock, ms since the epoch; ms: how
long it took, retries included) and a last line {"tag","summary":{...}}.
With SLUICE_START_FILE set in the environment, the client first imports
and builds what it needs, prints {"tag","ready":1} and waits until that
file exists before its first request (so a fleet of clients starts at one
moment). Exit 0 when every request was answered 200 and complete, 1
otherwise, 2 on bad arguments.
"""
import json
import os
import subprocess
import sys
import threading
import time

PROMPT = ("the quick brown fox jumps over the lazy dog while the governor paces the fleet exactly at its "
          "quota ") * 4
TIMEOUT_S = 120


def usage_exit():
    sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
    sys.exit(2)


def parse_args(argv):
    if len(argv) < 10:
        usage_exit()
    a = {"client": argv[1], "api": argv[2], "base": argv[3].rstrip("/"), "model": argv[4], "n": int(argv[5]),
         "concurrency": int(argv[6]), "stream": argv[7] == "yes", "retries": int(argv[8]), "key": argv[9],
         "max_tokens": int(argv[10]) if len(argv) > 10 else 32}
    a["tag"] = argv[11] if len(argv) > 11 else a["client"]
    if a["client"] not in ("httpx", "curl") or a["api"] not in ("openai", "azure", "anthropic") or a["n"] < 0 \
            or a["concurrency"] < 1 or a["retries"] < 0:
        usage_exit()
    return a


def request_of(a):
    """URL, headers and JSON body of one call."""
    body = {"model": a["model"], "max_tokens": a["max_tokens"], "messages": [{"role": "user", "content": PROMPT}]}
    headers = {"content-type": "application/json"}
    if a["api"] == "anthropic":
        url = a["base"] + "/v1/messages"
        headers.update({"x-api-key": a["key"], "anthropic-version": "2023-06-01"})
    elif a["api"] == "azure":
        url = "%s/openai/deployments/%s/chat/completions?api-version=2024-10-21" % (a["base"], a["model"])
        headers["api-key"] = a["key"]
        del body["model"]
    else:
        url = a["base"] + "/v1/chat/completions"
        headers["authorization"] = "Bearer " + a["key"]
    if a["stream"]:
        body["stream"] = True
        if a["api"] != "anthropic":
            body["stream_options"] = {"include_usage": True}
    return url, headers, json.dumps(body)


class Answer:
    """What one attempt got: status, headers (lower-case names), and the body
    or the SSE events (data texts with their event names)."""

    def __init__(self):
        self.status, self.headers, self.body, self.events, self.error = 0, {}, b"", [], None


def sse_events(lines):
    """(event name, data) pairs from SSE lines (str, without line ends)."""
    name, data = None, []
    for line in lines:
        if line == "":
            if data:
                yield name, "\n".join(data)
            name, data = None, []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    if data:
        yield name, "\n".join(data)


def attempt_httpx(client, a, url, headers, body):
    ans = Answer()
    try:
        with client.stream("POST", url, headers=headers, content=body) as r:
            ans.status = r.status_code
            ans.headers = {k.lower(): v for k, v in r.headers.items()}
            if a["stream"] and r.status_code == 200:
                # httpx 0.23 (Debian 12) keeps the line ends; later ones drop them.
                ans.events = list(sse_events(line.rstrip("\r\n") for line in r.iter_lines()))
            else:
                ans.body = r.read()
    except Exception as e:  # noqa: BLE001 - any transport failure is reported
        ans.error = "%s: %s" % (type(e).__name__, e)
    return ans


def attempt_curl(a, url, headers, body):
    ans = Answer()
    cmd = ["curl", "-sS", "-N", "--max-time", str(TIMEOUT_S), "-D", "-", "-X", "POST", url, "--data-binary", "@-"]
    for k, v in headers.items():
        cmd += ["-H", "%s: %s" % (k, v)]
    try:
        p = subprocess.run(cmd, input=body.encode(), capture_output=True, timeout=TIMEOUT_S + 10, check=False)
    except Exception as e:  # noqa: BLE001
        ans.error = "%s: %s" % (type(e).__name__, e)
        return ans
    if p.returncode != 0:
        ans.error = "curl exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip()[:200])
        return ans
    out = p.stdout
    # -D - puts the header block(s) first; a 100 Continue would be one more.
    while True:
        head, sep, rest = out.partition(b"\r\n\r\n")
        if not sep:
            ans.error = "curl: no header block in the output"
            return ans
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        out = rest
        if status != 100:
            break
    ans.status = status
    for line in lines[1:]:
        k, _, v = line.partition(":")
        ans.headers[k.strip().lower()] = v.strip()
    if a["stream"] and status == 200:
        ans.events = list(sse_events(line.rstrip("\r") for line in out.decode().split("\n")))
    else:
        ans.body = out
    return ans


def judge(a, ans, rec):
    """Fills rec's usage, events and complete from a 200 answer."""
    if a["api"] == "anthropic":
        if not a["stream"]:
            m = json.loads(ans.body)
            u = m.get("usage") or {}
            rec["input_tokens"] = (u.get("input_tokens", 0) + u.get("cache_read_input_tokens", 0)
                                   + u.get("cache_creation_input_tokens", 0))
            rec["output_tokens"] = u.get("output_tokens", 0)
            rec["text_chars"] = sum(len(b.get("text", "")) for b in m.get("content", []))
            rec["complete"] = int(bool(u) and bool(m.get("stop_reason")))
            return
        start = delta = None
        stopped = False
        for name, data in ans.events:
            ev = json.loads(data)
            rec["events"] += 1
            if ev.get("type") != name:
                rec["error"] = "event %s carries type %s" % (name, ev.get("type"))
            if name == "message_start":
                start = ev["message"]
            elif name == "content_block_delta":
                rec["text_chars"] += len(ev["delta"].get("text", ""))
            elif name == "message_delta":
                delta = ev
            elif name == "message_stop":
                stopped = True
        u = (start or {}).get("usage") or {}
        rec["input_tokens"] = (u.get("input_tokens", 0) + u.get("cache_read_input_tokens", 0)
                               + u.get("cache_creation_input_tokens", 0))
        rec["output_tokens"] = ((delta or {}).get("usage") or {}).get("output_tokens", 0)
        rec["complete"] = int(bool(start and delta and delta.get("usage") and stopped and not rec["error"]))
        return
    if not a["stream"]:
        c = json.loads(ans.body)
        u = c.get("usage") or {}
        rec["input_tokens"], rec["output_tokens"] = u.get("prompt_tokens", 0), u.get("completion_tokens", 0)
        rec["text_chars"] = len(((c.get("choices") or [{}])[0].get("message") or {}).get("content") or "")
        rec["complete"] = int(bool(u) and bool((c.get("choices") or [{}])[0].get("finish_reason")))
        return
    finished, usage, done, after = False, None, False, 0
    for _, data in ans.events:
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        rec["events"] += 1
        if usage is not None or done:
            after += 1
        ch = (chunk.get("choices") or [{}])[0] if chunk.get("choices") else {}
        rec["text_chars"] += len((ch.get("delta") or {}).get("content") or "")
        if ch.get("finish_reason"):
            finished = True
        if chunk.get("usage"):
            usage = chunk["usage"]
    rec["input_tokens"] = (usage or {}).get("prompt_tokens", 0)
    rec["output_tokens"] = (usage or {}).get("completion_tokens", 0)
    rec["complete"] = int(finished and usage is not None and done and after == 0)


def retry_wait_s(ans):
    h = ans.headers
    try:
        if "retry-after-ms" in h:
            return min(60.0, max(0.0, float(h["retry-after-ms"]) / 1000))
        if "retry-after" in h:
            return min(60.0, max(0.0, float(h["retry-after"])))
    except ValueError:
        pass
    return 1.0


def main():
    a = parse_args(sys.argv)
    url, headers, body = request_of(a)
    lock = threading.Lock()
    nxt = [0]
    summary = {"requests": 0, "ok": 0, "complete": 0, "status": {}, "input_tokens": 0, "output_tokens": 0}
    client = None
    if a["client"] == "httpx":
        import httpx  # Debian's python3-httpx
        client = httpx.Client(timeout=TIMEOUT_S, limits=httpx.Limits(max_connections=a["concurrency"]))

    def one(i):
        t0 = time.monotonic()
        rec = {"t": round(time.time() * 1000, 1), "tag": a["tag"], "sdk": a["client"], "i": i, "status": 0,
               "events": 0, "complete": 0, "input_tokens": 0, "output_tokens": 0, "text_chars": 0, "error": None,
               "attempts": 0, "stream": int(a["stream"])}
        while True:
            rec["attempts"] += 1
            ans = attempt_httpx(client, a, url, headers, body) if client else attempt_curl(a, url, headers, body)
            rec["status"], rec["error"] = ans.status, ans.error
            retry = ans.status == 429 or ans.status >= 500
            if not retry or rec["attempts"] > a["retries"]:
                break
            time.sleep(retry_wait_s(ans))
        if ans.status == 200:
            try:
                judge(a, ans, rec)
            except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
                rec["complete"], rec["error"] = 0, "bad answer: %s: %s" % (type(e).__name__, e)
        elif ans.status and not rec["error"]:
            rec["error"] = (ans.body or b"").decode(errors="replace")[:300]
        rec["ms"] = round((time.monotonic() - t0) * 1000, 1)
        with lock:
            summary["requests"] += 1
            summary["ok"] += ans.status == 200
            summary["complete"] += rec["complete"]
            key = str(rec["status"])
            summary["status"][key] = summary["status"].get(key, 0) + 1
            summary["input_tokens"] += rec["input_tokens"]
            summary["output_tokens"] += rec["output_tokens"]
            sys.stdout.write(json.dumps(rec) + "\n")
            sys.stdout.flush()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= a["n"]:
                return
            one(i)

    start_file = os.environ.get("SLUICE_START_FILE")
    if start_file:
        sys.stdout.write(json.dumps({"tag": a["tag"], "ready": 1}) + "\n")
        sys.stdout.flush()
        while not os.path.exists(start_file):
            time.sleep(0.005)
    threads = [threading.Thread(target=worker) for _ in range(min(a["concurrency"], max(a["n"], 1)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if client:
        client.close()
    sys.stdout.write(json.dumps({"tag": a["tag"], "summary": summary}) + "\n")
    sys.exit(0 if summary["ok"] == a["n"] and summary["complete"] == a["n"] else 1)


if __name__ == "__main__":
    main()
