"""Connect's protocol over HTTP/1.1 with JSON, on the standard library.

A unary call is a POST of a JSON body to /distlock.v1.LockService/<Method>;
an error is a non-200 status with {"code", "message"}. A server stream is
a POST of one enveloped message (a flags byte, a 4-byte big-endian length,
the JSON) answered by envelopes, the last flagged 0x02 with any error.
"""

import http.client
import json
import socket
import struct
import threading
import urllib.parse

from .errors import DistlockError, Unavailable, from_code

SERVICE = "/distlock.v1.LockService/"


class NoAnswer(Unavailable):
    """The call was sent and no answer came: it may have taken effect.

    Acquisitions are retried with their request id, which makes the retry
    return what the first call got."""


class Transport:
    """Calls to one service, over kept-alive connections."""

    def __init__(self, url, token=None, timeout=10.0):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"service URL {url!r}: want http://host:port or https://host:port")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._base = u.path.rstrip("/")
        self._headers = {"Connect-Protocol-Version": "1"}
        if token:
            self._headers["Authorization"] = "Bearer " + token
        self.timeout = timeout
        self._mu = threading.Lock()
        self._idle = []

    def _connect(self, timeout):
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=timeout)

    def _take(self, timeout):
        with self._mu:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            return self._connect(timeout)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _give(self, conn):
        with self._mu:
            if len(self._idle) < 16:
                self._idle.append(conn)
                return
        conn.close()

    def unary(self, method, body, timeout=None):
        """Makes one call and returns the answer's fields, or raises."""
        timeout = self.timeout if timeout is None else timeout
        data = json.dumps(body).encode()
        headers = dict(self._headers, **{"Content-Type": "application/json"})
        conn = self._take(timeout)
        try:
            conn.request("POST", self._base + SERVICE + method, data, headers)
            resp = conn.getresponse()
            payload = resp.read()
        except ConnectionRefusedError as e:  # nothing was sent
            conn.close()
            raise Unavailable("unavailable", f"{method}: {self._host}:{self._port} refused the connection") from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise NoAnswer("unavailable", f"{method}: no answer: {e}") from e
        if resp.will_close:
            conn.close()
        else:
            self._give(conn)
        if resp.status != 200:
            raise _error(resp.status, payload)
        return json.loads(payload) if payload else {}

    def stream(self, method, body, timeout=None, on_conn=None):
        """Makes a server-streaming call; returns a Stream of its answers.

        timeout bounds the connection and the answer's headers (None: no
        bound); reading the stream then has none. on_conn(conn), if given,
        is called once connected, so that another thread can end the call
        (conn.sock.shutdown) while it waits."""
        msg = json.dumps(body).encode()
        headers = dict(self._headers, **{"Content-Type": "application/connect+json"})
        conn = self._connect(timeout)
        try:
            conn.connect()
            if on_conn is not None:
                on_conn(conn)
            conn.request("POST", self._base + SERVICE + method, struct.pack(">BI", 0, len(msg)) + msg, headers)
            resp = conn.getresponse()
            if resp.status != 200:
                raise _error(resp.status, resp.read())
            if conn.sock is not None:
                conn.sock.settimeout(None)
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Unavailable("unavailable", f"{method}: {e}") from e
        except DistlockError:
            conn.close()
            raise
        return Stream(conn, resp)

    def close(self):
        """Closes the idle connections."""
        with self._mu:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class Stream:
    """The answers of a server-streaming call: iterate, then close."""

    def __init__(self, conn, resp):
        self._conn = conn
        self._resp = resp
        self._mu = threading.Lock()
        self._reading = False  # a thread is in __next__
        self._closed = False

    def header(self, name):
        """A header of the answer, or None."""
        return self._resp.getheader(name)

    def __iter__(self):
        return self

    def __next__(self):
        with self._mu:
            if self._closed:
                raise Unavailable("unavailable", "the stream was closed")
            self._reading = True
        try:
            head = self._resp.read(5)
            if len(head) < 5:
                raise Unavailable("unavailable", "the stream ended without its end message")
            flags, n = struct.unpack(">BI", head)
            payload = self._resp.read(n)
            msg = json.loads(payload) if payload else {}
        except (OSError, http.client.HTTPException, ValueError) as e:
            self._done(True)
            raise Unavailable("unavailable", f"the stream broke: {e}") from e
        except BaseException:
            self._done(True)
            raise
        if flags & 0x02:
            self._done(True)
            err = msg.get("error")
            if err:
                raise from_code(err.get("code", "unknown"), err.get("message", ""))
            raise StopIteration
        self._done(False)
        return msg

    def _done(self, end):
        """Ends a read; closes the call if end, or if close() came meanwhile."""
        with self._mu:
            self._reading = False
            end = end or self._closed
            if end:
                self._closed = True
        if end:
            self._resp.close()
            self._conn.close()

    def close(self):
        """Ends the call, also from another thread while one reads it: that
        read then ends (with Unavailable) and closes what it was reading."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            reading = self._reading
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a read in progress
            except OSError:
                pass
        if not reading:
            self._resp.close()
            self._conn.close()


def _error(status, payload):
    try:
        err = json.loads(payload)
        return from_code(err.get("code", "unknown"), err.get("message", ""))
    except ValueError:
        return DistlockError("unknown", f"HTTP {status}: {payload[:200]!r}")
