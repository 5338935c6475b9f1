#!/usr/bin/env python3
"""A sluiced client in plain Python (standard library only: socket).

sluiced speaks RESP2 on a UNIX socket, so a client is a few lines: encode
each command as an array of bulk strings, read one reply. The class below
is the snippet docs/protocol.md shows, plus RESP3: SluiceClient(path,
protocol=3) sends HELLO 3 and reads RESP3's types (maps become dicts, `_`
None). Run as a script it is the second language of the daemon tests
(tests/integration/test_daemon.c; redispy_client.py uses its RESP3 mode):

    client.py SOCKET DEPLOYMENT

acquires a slot, settles it with forwarded provider headers, asks the retry
budget and reads STATUS, prints one summary line starting with
"python client ok:" and exits 0; any surprise exits 1 with a message.
"""
import socket
import sys


class SluiceError(Exception):
    """An error reply: .code is its first word (ERR, SHED, NORETRY, ...)."""

    def __init__(self, line):
        super().__init__(line)
        self.code = line.split(" ", 1)[0]
        # SHED and NORETRY carry retry-after-ms=<n>.
        self.retry_after_ms = None
        for word in line.split():
            if word.startswith("retry-after-ms="):
                self.retry_after_ms = int(word.split("=", 1)[1])
        self.reason = line.split()[1] if self.code == "SHED" else None


class SluiceClient:
    def __init__(self, path, timeout=None, protocol=2):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.hello = None
        if protocol == 3:
            # The reply to HELLO 3 is already RESP3: a map.
            self.hello = self.call("HELLO", 3)
            if not isinstance(self.hello, dict) or self.hello.get("proto") != 3:
                raise ValueError("HELLO 3 answered %r" % (self.hello,))

    def close(self):
        self.sock.close()

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self._reply()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("sluiced closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _blob(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("sluiced closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data.decode()

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise SluiceError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._blob(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        # RESP3 (after HELLO 3).
        if kind == b"%":
            return dict((self._reply(), self._reply()) for _ in range(int(rest)))
        if kind == b"~":
            return set(self._reply() for _ in range(int(rest)))
        if kind == b"_":
            return None
        if kind == b"#":
            return rest == b"t"
        if kind == b",":
            return float(rest)
        if kind == b"=":
            return self._blob(int(rest))[4:]  # drop the format, "txt:"
        raise ValueError("unexpected reply %r" % line)

    # The commands, with Python-shaped results.
    def acquire(self, deployment, tokens=0, maxwait_ms=None):
        args = ["ACQUIRE", deployment, "TOKENS", tokens]
        if maxwait_ms is not None:
            args += ["MAXWAIT", maxwait_ms]
        grant_id, waited_ms, reserved = self.call(*args)
        return grant_id, waited_ms, reserved

    def settle(self, grant_id, tokens=None, status="ok", headers=()):
        args = ["SETTLE", grant_id]
        if tokens is not None:
            args += ["TOKENS", tokens]
        args += ["STATUS", status]
        for name, value in headers:
            args += ["HEADER", name, value]
        return self.call(*args)

    def retry(self, deployment):
        try:
            return self.call("RETRY", deployment) == 1
        except SluiceError as e:
            if e.code == "NORETRY":
                return False
            raise

    def status(self, deployment):
        st = self.call("STATUS", deployment)
        return st if isinstance(st, dict) else dict(zip(st[0::2], st[1::2]))


def main(argv):
    if len(argv) != 3:
        print("usage: client.py SOCKET DEPLOYMENT", file=sys.stderr)
        return 2
    path, dep = argv[1], argv[2]
    c = SluiceClient(path, timeout=30)
    try:
        if c.call("PING") != "PONG":
            raise AssertionError("PING did not answer PONG")
        grant_id, waited, reserved = c.acquire(dep, tokens=20)
        if not grant_id.startswith(dep + ":") or reserved != 20:
            raise AssertionError("unexpected grant %r %r %r" % (grant_id, waited, reserved))
        ok = c.settle(grant_id, tokens=15, status="ok",
                      headers=[("x-ratelimit-remaining-requests", "5"),
                               ("x-ratelimit-reset-requests", "1s")])
        if ok != "OK":
            raise AssertionError("SETTLE answered %r" % ok)
        allowed = c.retry(dep)
        st = c.status(dep)
        if st.get("deployment") != dep or st.get("mode") not in ("redis", "local"):
            raise AssertionError("unexpected STATUS %r" % st)
        try:
            c.call("ACQUIRE", "no-such-deployment")
            raise AssertionError("an unknown deployment was granted")
        except SluiceError as e:
            if e.code != "ERR" or "unknown deployment" not in str(e):
                raise
        print("python client ok: grant=%s waited_ms=%d reserved=%d retry=%s mode=%s"
              % (grant_id, waited, reserved, "allowed" if allowed else "refused", st["mode"]))
        return 0
    except Exception as e:  # noqa: BLE001 - a test script: report anything
        print("python client failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
