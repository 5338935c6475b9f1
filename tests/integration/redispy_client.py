#!/usr/bin/env python3
"""redis-py, the stock Python Redis client, against sluiced.

    redispy_client.py SOCKET DEPLOYMENT

Run by tests/integration/test_daemon_compat.c with Debian's python3 and its
python3-redis. Each part connects with redis-py's defaults (only the socket
path is given, and the protocol where stated), acquires a slot and settles
it, names itself with CLIENT SETNAME and reads CLIENT INFO, STATUS and
SELECT 0, then prints one line the C test asserts:

  "redis-py defaults ok: ... resp=N"  nothing but the socket path: RESP2 in
                                      redis-py 4 (Debian 12's), RESP3 (HELLO
                                      3 on connect) from redis-py 8.1 on;
  "redis-py resp2 ok: ..."            protocol=2 (redis-py 4: the defaults);
  "redis-py resp3 ok: ..."            protocol=3, when the installed
                                      redis-py has it (5.0 and later);
  "raw-socket resp3 ok: ..."          otherwise RESP3 through client.py's
                                      own parser (HELLO 3 on a plain
                                      socket), the line saying why.

Any surprise exits 1 with a message on stderr.
"""
import os
import sys

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import SluiceClient  # noqa: E402


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def has_protocol_3():
    """redis-py 5.0 added protocol=3; 4.x has no such argument."""
    return int(redis.__version__.split(".")[0]) >= 5


def run_redispy(sock, dep, protocol=None):
    """protocol None: redis-py's default."""
    kwargs = {"unix_socket_path": sock, "socket_timeout": 30}
    if protocol is not None:
        kwargs["protocol"] = protocol
    r = redis.Redis(**kwargs)
    check(r.ping() is True, "PING")
    grant, waited, reserved = r.execute_command("ACQUIRE", dep, "TOKENS", 10)
    grant = text(grant)
    check(grant.startswith(dep + ":") and reserved == 10, "grant %r %r" % (grant, reserved))
    check(text(r.execute_command("SETTLE", grant, "TOKENS", 7, "STATUS", "ok")) in ("OK", True), "SETTLE")
    name = "py-resp%s" % (protocol or "-default")
    check(r.client_setname(name) is True, "CLIENT SETNAME")
    check(text(r.client_getname()) == name, "CLIENT GETNAME")
    cid = r.client_id()
    mine = [c for c in r.client_list() if int(c["id"]) == cid]
    check(len(mine) == 1 and mine[0]["name"] == name, "CLIENT LIST %r" % mine)
    info = r.client_info()  # parses every integer field of Redis' line
    resp = int(info["resp"])
    check(info["id"] == cid and resp == (protocol or resp), "CLIENT INFO %r" % info)
    status = r.execute_command("STATUS", dep)
    if resp == 3:
        check(isinstance(status, dict), "STATUS in RESP3 is a map: %r" % type(status))
        status = {text(k): text(v) for k, v in status.items()}
    else:
        check(isinstance(status, list), "STATUS in RESP2 is a flat array")
        status = dict(zip(map(text, status[0::2]), map(text, status[1::2])))
    check(status["deployment"] == dep, "STATUS %r" % status)
    check(text(r.execute_command("SELECT", 0)) in ("OK", True), "SELECT 0")
    check(r.info("clients")["connected_clients"] >= 1, "INFO clients")
    try:
        r.execute_command("ACQUIRE", "no-such-deployment")
        raise AssertionError("an unknown deployment was granted")
    except redis.ResponseError as e:
        check("unknown deployment" in str(e), "error %s" % e)
    r.close()
    return "grant=%s waited_ms=%d reserved=%d name=%s lib-name=%s resp=%d" % (
        grant, waited, reserved, name, info.get("lib-name", ""), resp)


def run_raw_resp3(sock, dep):
    c = SluiceClient(sock, timeout=30, protocol=3)
    hello = c.hello
    check(hello["server"] == "sluiced" and hello["proto"] == 3 and hello["modules"] == [], "HELLO %r" % hello)
    grant, waited, reserved = c.acquire(dep, tokens=10)
    check(c.settle(grant, tokens=7) == "OK", "SETTLE")
    check(c.call("CLIENT", "SETNAME", "raw-resp3") == "OK", "CLIENT SETNAME")
    check(c.call("CLIENT", "GETNAME") == "raw-resp3", "CLIENT GETNAME")
    st = c.call("STATUS", dep)
    check(isinstance(st, dict) and st["deployment"] == dep, "STATUS is a map: %r" % (st,))
    info = c.call("CLIENT", "INFO")  # a verbatim string, format stripped
    check(" resp=3 " in info and " name=raw-resp3 " in info, "CLIENT INFO %r" % info)
    c.close()
    return "grant=%s waited_ms=%d reserved=%d hello_id=%d status=map resp=3" % (grant, waited, reserved,
                                                                              hello["id"])


def main(argv):
    if len(argv) != 3:
        print("usage: redispy_client.py SOCKET DEPLOYMENT", file=sys.stderr)
        return 2
    sock, dep = argv[1], argv[2]
    try:
        print("redis-py defaults ok: version=%s %s" % (redis.__version__, run_redispy(sock, dep)))
        # A client configured with a database other than 0 is told why.
        try:
            redis.Redis(unix_socket_path=sock, db=1, socket_timeout=30).ping()
            raise AssertionError("db=1 was accepted")
        except redis.RedisError as e:
            check("one database" in str(e), "SELECT 1 error %s" % e)
        if has_protocol_3():
            print("redis-py resp2 ok: version=%s %s" % (redis.__version__, run_redispy(sock, dep, 2)))
            print("redis-py resp3 ok: version=%s %s" % (redis.__version__, run_redispy(sock, dep, 3)))
        else:
            print("redis-py resp2 ok: version=%s (its defaults: redis-py 4 speaks RESP2 only)" % redis.__version__)
            print("raw-socket resp3 ok: redis-py %s has no protocol=3 (5.0 added it), so RESP3 is checked "
                  "with client.py's parser: %s" % (redis.__version__, run_raw_resp3(sock, dep)))
        return 0
    except Exception as e:  # noqa: BLE001 - a test script: report anything
        print("redispy_client failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
