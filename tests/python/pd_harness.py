"""A prefill/decode (PD) omnibus cluster behind vllm-router's PD mode, for tests and benchmarks.

    with PdCluster(n_prefill=1, n_decode=1) as c:
        httpx.post(c.url + "/v1/completions", json=...)   # the router's base URL
        c.prefill[0].metrics(); c.decode[0].kill()          # router_harness.Replica objects
        c.kv_port(c.prefill[0])                             # its --kv-transfer-port

Each prefill worker runs
    omnibus serve ... --kv-role prefill --kv-transfer-host 127.0.0.1 --kv-transfer-port P
                      --kv-transfer-secret-file LOG_DIR/kv-secret --kv-transfer-peers 127.0.0.1
and each decode worker the same with `--kv-role decode` (a free port each; the
secret, written once per cluster with mode 600, is shared by all workers);
the router is
    vllm-router --vllm-pd-disaggregation --prefill URL [--prefill URL ...] --decode URL [--decode URL ...]
                --prefill-policy round_robin --decode-policy round_robin + router_harness's health flags.
What vllm-router 0.1.17's PD mode sends (seen with stub workers): first the
request to a prefill worker, non-streaming, with `max_tokens: 1,
min_tokens: 1, stream: false`, stream_options dropped, and
`kv_transfer_params: {do_remote_decode: true, do_remote_prefill: false,
remote_engine_id/remote_block_ids/remote_host/remote_port: null}`; then, once
that answer is complete, the original request (streaming or not) to a decode
worker with the top-level `kv_transfer_params` object of the prefill answer
copied verbatim (if the answer has none it logs "No kv_transfer_params for
prefill ..., decode will proceed without them" and sends the request as is).
The decode answer goes back to the client unchanged, SSE chunks as they come.
Both requests carry the same X-Request-Id,
`___prefill_addr_HOST:PORT___decode_addr_HOST:PORT_<uuid>`. Chat requests
are split the same way.

KV flags: they are passed only when `kv_transfer=True` AND the binary knows
them (`--kv-role` in `omnibus serve --help`). A binary built before the KV
transfer landed has no such flags; then the workers start without any --kv-*
flag and PD mode still works, by recomputation: the prefill worker answers
the max_tokens=1 request and the decode worker prefills the prompt again.
`PdCluster.kv_flags` says which one happened; `kv_port()` then returns None.

The processes, readiness polling and cleanup are router_harness's: every
process is stopped by PID (router first) on exit of the `with` block, on
stop(), on an exception in start(), and by a finalizer if the cluster is
dropped without either. OMNIBUS_BIN, OMNIBUS_MODELS_DIR, VLLM_ROUTER_BIN as
for router_harness.
"""
import functools
import hashlib
import hmac
import json
import os
import pathlib
import secrets
import subprocess
import tempfile
import time
import weakref

import httpx

from router_harness import MODEL, ROUTER_HEALTH_ARGS, Process, Replica, Router, free_port, omnibus_bin, router_bin


@functools.lru_cache(maxsize=None)
def _serve_help(binary):
    try:
        return subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def kv_transfer_supported(binary=None):
    """True when `omnibus serve` has the --kv-role flag (the KV transfer between workers)."""
    return "--kv-role" in _serve_help(binary or omnibus_bin())


def kv_security_args(log_dir, peers="127.0.0.1"):
    """--kv-transfer-secret-file (a fresh 600 file in log_dir, kept if present) and --kv-transfer-peers."""
    path = pathlib.Path(log_dir) / "kv-secret"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    return ["--kv-transfer-secret-file", str(path), "--kv-transfer-peers", peers]


def sign_offer(params, secret):
    """params with omnibus.mac made as a prefill worker holding `secret` (bytes) makes it
    (server/kv_transfer_params.h, offer_signed_text): for tests that alter a field on purpose, to reach
    the decode worker's checks behind the signature."""
    part = {k: params.get(k) for k in ("remote_engine_id", "remote_request_id", "remote_block_ids",
                                       "remote_host", "remote_port")}
    part["omnibus"] = {k: v for k, v in params["omnibus"].items() if k != "mac"}
    text = "omnibus-offer\n" + json.dumps(part, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    mac = hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()
    return dict(params, omnibus=dict(params["omnibus"], mac=mac))


class PdRouter(Router):
    """vllm-router in vLLM PD mode. wait_ready() and workers() are Router's."""

    def __init__(self, prefill_urls, decode_urls, log_dir, policy="round_robin", args=(), host="127.0.0.1",
                 netns=None):
        self.host = host
        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        self.prefill_urls = list(prefill_urls)
        self.decode_urls = list(decode_urls)
        self.worker_urls = self.prefill_urls + self.decode_urls
        cmd = [router_bin(), "--vllm-pd-disaggregation"]
        for u in self.prefill_urls:
            cmd += ["--prefill", u]
        for u in self.decode_urls:
            cmd += ["--decode", u]
        # With both given, --policy (default cache_aware) is ignored (the router logs so even without --policy).
        cmd += ["--prefill-policy", policy, "--decode-policy", policy,
                "--host", host, "--port", str(self.port), "--prometheus-port", str(free_port()),
                "--prometheus-host", host, *ROUTER_HEALTH_ARGS, *args]
        Process.__init__(self, "router", cmd, pathlib.Path(log_dir) / "router.log", netns)


class PdCluster:
    """n_prefill prefill workers and n_decode decode workers (`-t threads` each) behind vllm-router PD mode."""

    def __init__(self, n_prefill=1, n_decode=1, prefill_args=(), decode_args=(), threads=1, kv_transfer=True,
                 netns=None, log_dir=None, model=None, policy="round_robin", router_args=(),
                 kv_host="127.0.0.1", kv_peers=None):
        self._tmp = None
        self.kv_peers = kv_peers or kv_host
        if log_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="omnibus-pd-cluster-")
            log_dir = self._tmp
        self.log_dir = pathlib.Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.model = model or MODEL
        self.kv_flags = bool(kv_transfer) and kv_transfer_supported()
        self._kv_ports = {}
        self.prefill = [self._replica(f"prefill{i}", "prefill", prefill_args, threads, netns, kv_host)
                        for i in range(n_prefill)]
        self.decode = [self._replica(f"decode{i}", "decode", decode_args, threads, netns, kv_host)
                       for i in range(n_decode)]
        self.router = PdRouter([r.url for r in self.prefill], [r.url for r in self.decode], self.log_dir,
                               policy, router_args, netns=netns)
        self._finalizer = weakref.finalize(self, PdCluster._stop_all, [self.router, *self.prefill, *self.decode])

    def _replica(self, name, role, args, threads, netns, kv_host):
        args = list(args)
        port = None
        if self.kv_flags:
            port = free_port()
            args += ["--kv-role", role, "--kv-transfer-host", kv_host, "--kv-transfer-port", str(port),
                     *kv_security_args(self.log_dir, peers=self.kv_peers)]
        r = Replica(name, self.log_dir, args, threads, netns=netns, model=self.model)
        self._kv_ports[name] = port
        return r

    @property
    def url(self):
        return self.router.url

    @property
    def replicas(self):
        return [*self.prefill, *self.decode]

    def kv_secret(self):
        """The workers' shared secret (bytes), as they read it."""
        return (self.log_dir / "kv-secret").read_text().strip().encode()

    def kv_port(self, replica):
        """The --kv-transfer-port given to `replica` (None when no KV flags were passed)."""
        return self._kv_ports[replica.name]

    def start(self):
        try:
            for r in self.replicas:
                r.start()
            for r in self.replicas:
                r.wait_ready()
            self.router.start()
            self.router.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def _stop_all(procs):
        codes = {}
        for p in procs:  # router first: no new requests reach a stopping worker
            codes[p.name] = p.stop()
        return codes

    def stop(self):
        """Stops the router, then the workers. Returns {name: exit code}."""
        return self._finalizer()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def wait_worker(self, replica, healthy, timeout=10):
        """Polls the router until it reports `replica` healthy (or not)."""
        deadline = time.time() + timeout
        seen = None
        while time.time() < deadline:
            try:
                seen = self.router.workers()
                if bool(seen.get(replica.url)) == healthy:
                    return time.time() - (deadline - timeout)
            except (httpx.TransportError, ValueError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"router did not report {replica.url} healthy={healthy} within {timeout} s "
                             f"(last: {seen})\n{self.logs()}")

    def logs(self, chars=3000):
        return "\n".join(f"--- {p.name} ({p.log_path}):\n{p.output(chars)}" for p in [self.router, *self.replicas])
