#!/usr/bin/env python3
"""budget_fleet: budgets in money once in real time (issue 25).

64 callers on 3 sluiced agents (UNIX sockets, RESP) draw from one daily
budget that their demand exceeds tenfold. Each call: ACQUIRE with a
1 000..3 000-token prompt and a max output of 1 000; the "provider" (this
script, at its price list: USD 2.50 and 10.00 per million input and
output tokens) bills a prompt up to 10 % below the estimate and any output
up to the max, after 20..120 ms. 5 % of the calls are cancelled while
waiting (the connection is closed: the agent gives the reservation back),
5 % after the send (SETTLE ... STATUS cancelled without usage: charged in
full). Judged by the provider's bill, not the governor's:

  - never over: the bill never exceeds the budget;
  - all of it usable: what the budget charged for the calls sent before
    the first `budget` shed is at least 98 % of it;
  - the ledger in Redis (day_spent) is at least the bill and at most the
    budget.

Usage: budget_fleet.py --sockets A,B,C --redis-cli "redis-cli -s R" --budget USD
Exit 0 when all three hold, 1 otherwise. Run by tests/bench/budget_fleet.sh.
"""
import argparse
import random
import socket
import subprocess
import sys
import threading
import time

PRICE_IN = 2_500_000  # 1e-12 USD per token: USD 2.50 per million
PRICE_OUT = 10_000_000  # USD 10.00 per million


def resp_cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Conn:
    def __init__(self, path):
        self.path = path
        self.s = None
        self.buf = b""

    def open(self):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(self.path)
        self.buf = b""

    def close(self):
        if self.s:
            self.s.close()
        self.s = None

    def _line(self, deadline):
        while b"\r\n" not in self.buf:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            self.s.settimeout(left)
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _reply(self, deadline):
        line = self._line(deadline)
        t, rest = line[:1], line[1:]
        if t in (b"+", b"-", b":"):
            return (t, rest.decode())
        if t == b"$":
            n = int(rest)
            while len(self.buf) < n + 2:
                self.s.settimeout(None)
                self.buf += self.s.recv(65536)
            v, self.buf = self.buf[:n], self.buf[n + 2:]
            return (b"$", v.decode())
        if t == b"*":
            return (b"*", [self._reply(None)[1] for _ in range(int(rest))])
        raise ValueError(line)

    def call(self, *args, timeout=None):
        self.s.sendall(resp_cmd(*args))
        return self._reply(None if timeout is None else time.monotonic() + timeout)


class Ledger:
    def __init__(self):
        self.lock = threading.Lock()
        self.sends = []  # (t, billed pico, charged micro)
        self.first_shed = None
        self.sheds = 0
        self.cancel_wait = 0
        self.cancel_sent = 0
        self.errors = 0


def caller(i, sock, calls, led, seed, deployment, tenant):
    rng = random.Random(seed * 1000 + i)
    c = Conn(sock)
    c.open()
    for _ in range(calls):
        est_in = rng.randint(1000, 3000)
        max_out = 1000
        cancel_wait = rng.random() < 0.05
        cancel_sent = not cancel_wait and rng.random() < 0.0526
        try:
            t, v = c.call("ACQUIRE", deployment, "INPUT", est_in, "OUTPUT", max_out, "TENANT", tenant, "MAXWAIT",
                          "2000", timeout=rng.uniform(0.0, 0.05) if cancel_wait else None)
        except TimeoutError:
            # Gone while waiting: the agent gives the reservation back (or,
            # if it was granted meanwhile, Redis charges it at its lease end).
            c.close()
            c.open()
            with led.lock:
                led.cancel_wait += 1
            continue
        if t == b"-":
            if v.startswith("SHED budget"):
                with led.lock:
                    led.sheds += 1
                    now = time.monotonic()
                    if led.first_shed is None or now < led.first_shed:
                        led.first_shed = now
            else:
                with led.lock:
                    led.errors += 1
            continue
        grant = v[0]
        sent = time.monotonic()
        used_in = est_in - rng.randint(0, est_in // 10)
        used_out = rng.randint(0, max_out)
        billed = used_in * PRICE_IN + used_out * PRICE_OUT
        reserved = (est_in * PRICE_IN + max_out * PRICE_OUT + 999_999) // 1_000_000
        time.sleep(rng.uniform(0.02, 0.12))
        if cancel_sent:
            c.call("SETTLE", grant, "STATUS", "cancelled")
            charged = reserved
        else:
            c.call("SETTLE", grant, "INPUT", used_in, "OUTPUT", used_out)
            charged = (billed + 999_999) // 1_000_000
        with led.lock:
            led.sends.append((sent, billed, charged))
            if cancel_sent:
                led.cancel_sent += 1
    c.close()


def hget(cli, key, field):
    out = subprocess.run(cli.split() + ["HGET", key, field], capture_output=True, text=True).stdout.strip()
    return int(out) if out else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sockets", required=True, help="the agents' sockets, comma-separated")
    ap.add_argument("--redis-cli", required=True, help="how to run redis-cli against the fleet's Redis")
    ap.add_argument("--budget", type=float, required=True, help="the daily budget configured, USD")
    ap.add_argument("--callers", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--deployment", default="gpt")
    ap.add_argument("--tenant", default="t1")
    a = ap.parse_args()
    socks = a.sockets.split(",")
    # Demand: ten times the budget at the calls' mean price (about USD 0.0095).
    calls = int(10 * a.budget / 0.0095 / a.callers) + 1
    led = Ledger()
    t0 = time.monotonic()
    threads = [threading.Thread(target=caller, args=(i, socks[i % len(socks)], calls, led, a.seed, a.deployment,
                                                    a.tenant)) for i in range(a.callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    key = "sluice:{$budgets}:b:team"
    # Settles are fire and forget; a grant abandoned as it arrived is charged
    # at its lease end (the agents' looks every 2 s sweep it).
    deadline = time.monotonic() + 60
    while hget(a.redis_cli, key, "day_reserved") and time.monotonic() < deadline:
        time.sleep(0.5)
    spent = hget(a.redis_cli, key, "day_spent")
    reserved = hget(a.redis_cli, key, "day_reserved")
    budget_pico = round(a.budget * 1e12)
    bill = sum(s[1] for s in led.sends)
    charged = sum(s[2] for s in led.sends)
    before = sum(s[2] for s in led.sends if led.first_shed is None or s[0] <= led.first_shed)
    print(f"budget_fleet: {a.callers} callers x {calls} calls on {len(socks)} agents in {took:.1f} s: "
          f"{len(led.sends)} sent, {led.sheds} shed budget, {led.cancel_wait} cancelled waiting, "
          f"{led.cancel_sent} cancelled after the send, {led.errors} errors")
    print(f"budget_fleet: the provider's bill {bill / 1e12:.6f} USD of {a.budget} ({100 * bill / budget_pico:.2f} %); "
          f"charged before the first shed {100 * before * 1e6 / budget_pico:.2f} %; "
          f"Redis day_spent {spent / 1e6:.6f} (the calls' own charges {charged / 1e6:.6f}), reserved {reserved}")
    ok = True
    if bill > budget_pico:
        print("budget_fleet: FAIL: the bill exceeds the budget")
        ok = False
    if before * 1e6 < 0.98 * budget_pico:
        print("budget_fleet: FAIL: less than 98 % charged before the first budget shed")
        ok = False
    if spent * 1_000_000 < bill or spent > round(a.budget * 1e6) or reserved:
        print("budget_fleet: FAIL: Redis' ledger is below the bill, above the budget, or still holds reservations")
        ok = False
    if led.errors:
        print("budget_fleet: FAIL: acquire errors")
        ok = False
    print("budget_fleet: PASS" if ok else "budget_fleet: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
