"""Starts a real `distlock serve` (the binary DISTLOCK_BIN names) on a free
loopback port over its embedded store, with a token file of two tenants."""

import json
import os
import subprocess
import tempfile
from contextlib import contextmanager

import pytest

import distlock

TOKENS = {
    "alpha": "alpha-client-token-00001",
    "beta": "beta-client-token-000001",
    "viewer": "alpha-viewer-token-00001",
    "admin": "alpha-admin-token-000001",
}


@contextmanager
def running_service(*flags):
    """A serve process of its own, with extra flags (over the embedded store
    unless they name a --backend): yields (process, url); stops it after."""
    binary = os.environ.get("DISTLOCK_BIN")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("DISTLOCK_BIN must name a distlock binary: go build -o /tmp/distlock . (in cmd/distlock), "
                    "then DISTLOCK_BIN=/tmp/distlock python3 -m pytest; make test does both")
    # The embedded store syncs its log to disk on every write; a disk that
    # takes seconds over a sync now and then would stall the tests that
    # long. In memory (/dev/shm, where the machine has it) it does not.
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
        tokens = os.path.join(d, "tokens")
        with open(tokens, "w") as f:
            f.write(f"{TOKENS['alpha']} alpha client\n{TOKENS['beta']} beta client\n"
                    f"{TOKENS['viewer']} alpha viewer\n{TOKENS['admin']} alpha admin\n")
        os.chmod(tokens, 0o600)
        store = [] if "--backend" in flags else ["--data-dir", os.path.join(d, "data")]
        proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--tokens", tokens, *store, "-o", "json", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            text = ""
            for line in proc.stdout:  # the first JSON object says where it listens
                text += line
                if line.startswith("}"):
                    break
            yield proc, json.loads(text)["url"]
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            proc.wait()
            proc.stdout.close()


@pytest.fixture(scope="session")
def service():
    with running_service() as (_, url):
        yield url


@pytest.fixture
def clients(service):
    """Three clients of the service, as tenant alpha."""
    cs = [distlock.Client(service, token=TOKENS["alpha"]) for _ in range(3)]
    yield cs
    for c in cs:
        c.close()
