"""Trust boundaries (docs/security.md, issue 34): what a client of the HTTP API, or a process on the
same host, must not be able to do.

- A default server (no --kv-role) has no KV-transfer service: kv_transfer_params are a 400 saying how
  to turn it on, and /v1/engine/* (every cached block hash) are 404 without --api-key.
- Tenants with different cache_salt (or gateway header) never see each other's cached tokens.
- On a PD pair: offers are signed; a remote_host outside --kv-transfer-peers is a 400 and nothing
  connects (a listener on that address sees no connection); pins are capped
  (--kv-transfer-max-pinned); a UCX peer holding a claim can neither read nor write the owner's memory
  (tests/attacker/ucx_attacker.c) and fetches only the offered blocks.
"""
import hashlib
import hmac
import json
import pathlib
import re
import secrets
import socket
import struct
import subprocess
import time

import httpx
import pytest

from conftest import ROOT
from pd_harness import sign_offer

PROMPT = "The secret launch code of tenant A is 7-4-1-9-3-3-8, and the backup code is 2-2-6."


def completion(base_url, prompt, headers=None, **kw):
    r = httpx.post(base_url + "/v1/completions", headers=headers or {}, timeout=60,
                   json={"prompt": prompt, "max_tokens": 1, "temperature": 0, **kw})
    return r


def cached(r):
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


# --- a default server ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plain(start_server):
    return start_server("--max-model-len", "1024", "--kv-cache-memory", "64MiB")


def test_default_server_refuses_kv_transfer_params(plain):
    for params in ({"do_remote_decode": True}, {"do_remote_prefill": True, "remote_host": "127.0.0.1"}):
        r = completion(plain.base_url, "hello", kv_transfer_params=params)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "kv_transfer_disabled"
        assert "--kv-role" in r.text and "--kv-transfer-secret-file" in r.text
    assert httpx.get(plain.base_url + "/get_server_info", timeout=10).json()["kv_transfer"] is None
    assert "kv_transfer_offers_total" not in httpx.get(plain.base_url + "/metrics", timeout=10).text


def test_engine_debug_endpoints_are_off_without_a_key(plain):
    for path in ("/v1/engine/kv_blocks", "/v1/engine/state"):
        r = httpx.get(plain.base_url + path, timeout=10)
        assert r.status_code == 404, (path, r.text)
        assert "--enable-debug-endpoints" in r.text


def test_tenants_with_different_salts_never_see_each_others_cached_tokens(plain):
    assert cached(completion(plain.base_url, PROMPT, cache_salt="tenant-a")) == 0
    assert cached(completion(plain.base_url, PROMPT, cache_salt="tenant-a")) >= 16  # a's repeats still hit
    # A guess of a's prompt by b, or by a client without a salt, learns nothing.
    assert cached(completion(plain.base_url, PROMPT, cache_salt="tenant-b")) == 0
    assert cached(completion(plain.base_url, PROMPT + " ")) == 0
    r = completion(plain.base_url, PROMPT, cache_salt=7)
    assert r.status_code == 400 and "cache_salt" in r.text


def test_the_gateway_header_decides_the_tenant(start_server):
    s = start_server("--max-model-len", "1024", "--kv-cache-memory", "64MiB",
                     "--prefix-cache-salt-header", "X-Tenant-Id")
    a, b = {"X-Tenant-Id": "a"}, {"X-Tenant-Id": "b"}
    assert cached(completion(s.base_url, PROMPT, headers=a)) == 0
    assert cached(completion(s.base_url, PROMPT, headers=a)) >= 16
    assert cached(completion(s.base_url, PROMPT, headers=b)) == 0
    # No body cache_salt reaches a's blocks when the gateway says b, or says nothing.
    assert cached(completion(s.base_url, PROMPT, headers=b, cache_salt="a")) == 0
    assert cached(completion(s.base_url, PROMPT, cache_salt="a")) == 0


# --- a prefill worker and a decode worker ------------------------------------------------------

def secret_file(tmp):
    path = pathlib.Path(tmp) / "kv-secret"
    path.write_text(secrets.token_hex(32) + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def pd(start_server, tmp_path_factory):
    secret = secret_file(tmp_path_factory.mktemp("kv"))
    common = ["--max-model-len", "1024", "--kv-cache-memory", "64MiB", "-t", "1",
              "--kv-transfer-secret-file", str(secret), "--kv-transfer-peers", "127.0.0.1",
              "--kv-transfer-host", "127.0.0.1"]
    prefill_port, decode_port = free_port(), free_port()
    prefill = start_server(*common, "--kv-role", "prefill", "--kv-transfer-port", str(prefill_port),
                           "--kv-transfer-max-pinned", "12")
    decode = start_server(*common, "--kv-role", "decode", "--kv-transfer-port", str(decode_port))
    return prefill, decode, secret.read_text().strip().encode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offer(prefill, prompt):
    r = completion(prefill.base_url, prompt, kv_transfer_params={"do_remote_decode": True})
    assert r.status_code == 200, r.text
    return r.json().get("kv_transfer_params")


def test_a_remote_host_outside_the_peers_is_never_connected_to(pd):
    prefill, decode, secret = pd
    prompt = "Port scan probe: " + "word " * 60
    good = offer(prefill, prompt)
    with socket.socket() as listener:
        listener.bind(("127.0.0.2", 0))  # loopback, but not a listed peer
        listener.listen(8)
        listener.settimeout(2.0)
        elsewhere = dict(good, remote_host="127.0.0.2", remote_port=listener.getsockname()[1])
        for params, code in ((elsewhere, "kv_transfer_unauthenticated"),  # altered: the signature fails
                             (sign_offer(elsewhere, secret), "kv_transfer_peer_not_allowed")):  # signed: not a peer
            r = completion(decode.base_url, prompt, kv_transfer_params=params)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["code"] == code, r.text
        with pytest.raises(socket.timeout):
            listener.accept()
    m = httpx.get(decode.base_url + "/metrics", timeout=10).text
    assert re.search(r'kv_transfer_rejected_total\{[^}]*reason="unsigned"\} [1-9]', m), m
    assert re.search(r'kv_transfer_rejected_total\{[^}]*reason="peer"\} [1-9]', m), m
    # The genuine offer still works, once.
    assert completion(decode.base_url, prompt, kv_transfer_params=good, max_tokens=4).status_code == 200
    assert completion(decode.base_url, prompt, kv_transfer_params=good).status_code == 400


def test_pins_are_capped(pd):
    prefill, _, _ = pd
    refused = lambda: float(re.search(r"kv_transfer_pins_refused_total\{[^}]*\} (\S+)",
                                      httpx.get(prefill.base_url + "/metrics", timeout=10).text).group(1))
    before = refused()
    big = offer(prefill, "Pin the pool: " + "token " * 300)  # ~19 blocks > the 12 allowed
    assert big is None
    assert refused() == before + 1
    small = offer(prefill, "A short prompt: " + "x " * 40)
    assert small is not None and 0 < len(small["remote_block_ids"]) <= 12


def side_channel(port, secret, message):
    body = json.dumps(message)
    ts = int(time.time() * 1000)
    env = json.dumps({"msg": body, "ts": ts,
                      "mac": hmac.new(secret, f"{ts}\n{body}".encode(), hashlib.sha256).hexdigest()}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">I", len(env)) + env)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    reply = json.loads(data[4:])
    return json.loads(reply["msg"]) if "msg" in reply else reply


def kv_pool_address(pid, n_bytes):
    """The start of the owner's KV pool: its largest private anonymous read-write mapping."""
    best = None
    for line in pathlib.Path(f"/proc/{pid}/maps").read_text().splitlines():
        f = line.split()
        if len(f) == 5 and f[1] == "rw-p":
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            if hi - lo >= n_bytes and (best is None or hi - lo > best[1] - best[0]):
                best = (lo, hi)
    assert best, "no mapping as large as the pool"
    return best[0]


def owner_bytes(pid, addr, n):
    with open(f"/proc/{pid}/mem", "rb") as f:
        f.seek(addr)
        return f.read(n)


def attacker(*args):
    exe = ROOT / "build" / "ucx_attacker"
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_a_ucx_peer_with_a_claim_reads_only_the_offered_blocks(pd):
    prefill, decode, secret = pd
    prompt = "The other tenant's document: " + "alpha beta gamma " * 30
    want = completion(prefill.base_url, prompt, max_tokens=8).json()["choices"][0]["text"]
    params = offer(prefill, prompt)
    port = params["remote_port"]
    unauth = side_channel(port, b"x" * 32, {"type": "claim"})
    assert unauth == {"ok": False, "error": "unauthenticated"}
    claim = side_channel(port, secret, {"type": "claim", "id": params["remote_request_id"],
                                        "blocks": params["remote_block_ids"],
                                        "keys": params["omnibus"]["block_hashes"],
                                        "compat": params["omnibus"]["compat"]})
    assert claim["ok"], claim
    assert "rkey" not in claim and "base" not in claim  # nothing to address the owner's memory with
    layout, address, token = claim["layout"], claim["worker_address"], claim["token"]
    pool = kv_pool_address(prefill.proc.pid, layout["bytes"])
    for addr in (pool, pool + layout["k_offset"][0] + params["remote_block_ids"][0] * layout["k_block_bytes"]):
        # A read never answers (the owner has no RMA handlers: UCX drops the request).
        assert attacker(address, token, "get", hex(addr)) in ("get timeout", "get failed")
        # A write is acknowledged by the transport at best, and lands nowhere.
        before = owner_bytes(prefill.proc.pid, addr, 64)
        assert attacker(address, token, "put", hex(addr)) in ("put timeout", "put failed", "put completed")
        assert owner_bytes(prefill.proc.pid, addr, 64) == before != b"X" * 64
    kb = layout["k_block_bytes"]
    mine = params["remote_block_ids"][0]
    other = next(b for b in range(layout["n_blocks"]) if b not in params["remote_block_ids"])
    k0 = layout["k_offset"][0]
    assert attacker(address, token, "fetch", str(k0 + mine * kb), str(kb)) == f"fetch data {kb}"
    assert attacker(address, token, "fetch", str(k0 + other * kb), str(kb)).startswith("fetch refused")
    assert attacker(address, token, "fetch", str(k0 + mine * kb + 1), str(kb)).startswith("fetch refused")
    assert attacker(address, "00" * 16, "fetch", str(k0 + mine * kb), str(kb)).startswith("fetch refused")
    # The owner is unharmed: the same prompt gives the same answer from its (unwritten) cache.
    assert prefill.proc.poll() is None
    again = completion(prefill.base_url, prompt, max_tokens=8).json()["choices"][0]["text"]
    assert again == want
    m = httpx.get(prefill.base_url + "/metrics", timeout=10).text
    assert re.search(r'kv_transfer_rejected_total\{[^}]*reason="fetch"\} [1-9]', m), m
    assert re.search(r'kv_transfer_rejected_total\{[^}]*reason="seal"\} [1-9]', m), m
