"""A multi-replica omnibus cluster behind vllm-router, for tests and benchmarks.

    with Cluster(2, policy="cache_aware") as c:
        httpx.post(c.url + "/v1/completions", json=...)
        c.kill(0); c.wait_worker(0, healthy=False)
        c.restart(0); c.wait_worker(0, healthy=True)

Every process is started by this module and stopped by PID (SIGTERM, then
SIGKILL after a timeout), on exit of the `with` block, on Cluster.stop(), and
by a finalizer if a Cluster is dropped without either (a failing test), so no
replica or router outlives its test. Readiness is polled (/health of each
replica, /health and /list_workers of the router), never slept for.

OMNIBUS_BIN: the omnibus binary (default: build/omnibus); OMNIBUS_MODELS_DIR:
where the models live; VLLM_ROUTER_BIN: the router (default: vllm-router next
to this Python interpreter, i.e. the venv's).
"""
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref

import httpx

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = os.environ.get("OMNIBUS_TEST_MODEL", "smollm2-135m")

# Health checking tuned so that a dead worker is dropped within ~1-2 s and a
# restarted one rejoins as fast: one probe a second, one failure (or success)
# flips the state; workers are polled every second at startup.
ROUTER_HEALTH_ARGS = [
    "--health-check-interval-secs", "1",
    "--health-failure-threshold", "1",
    "--health-success-threshold", "1",
    "--health-check-timeout-secs", "1",
    "--worker-startup-check-interval", "1",
    "--worker-startup-timeout-secs", "60",
]


def omnibus_bin():
    return os.environ.get("OMNIBUS_BIN", str(ROOT / "build" / "omnibus"))


def router_bin():
    if "VLLM_ROUTER_BIN" in os.environ:
        return os.environ["VLLM_ROUTER_BIN"]
    here = pathlib.Path(sys.executable).parent / "vllm-router"
    return str(here) if here.exists() else (shutil.which("vllm-router") or "vllm-router")


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def parse_metrics(text):
    """Prometheus text -> {name: value}, labels dropped (histogram buckets skipped)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip() or "le=" in line:
            continue
        name, value = line.rsplit(" ", 1)
        base = name.split("{", 1)[0]
        out[base] = out.get(base, 0.0) + float(value)
    return out


class Process:
    """A child process with its output in a log file; stopped by PID."""

    def __init__(self, name, cmd, log_path, netns=None):
        self.name = name
        self.cmd = list(cmd)
        self.log_path = pathlib.Path(log_path)
        self.netns = netns
        self.proc = None

    def start(self):
        log = open(self.log_path, "a")
        log.write(f"\n=== {' '.join(self.cmd)}\n")
        log.flush()
        # `ip netns exec` execs the command, so the PID is the server's.
        full = (["ip", "netns", "exec", self.netns] if self.netns else []) + self.cmd
        self.proc = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=ROOT, start_new_session=True)
        log.close()
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL, as a crash would."""
        if self.alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()

    def stop(self, timeout=15):
        """SIGTERM, then SIGKILL after `timeout` s. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def output(self, chars=4000):
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class Replica(Process):
    """One `omnibus serve` replica. Its port is kept across restarts."""

    def __init__(self, name, log_dir, args=(), threads=1, host="127.0.0.1", port=None, netns=None,
                 model=MODEL, listen_host=None):
        self.host = host
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}"
        cmd = [omnibus_bin(), "serve", "-m", model, "-t", str(threads), "--host", listen_host or host,
               "--port", str(self.port), "--grace-period", "5"] + list(args)
        super().__init__(name, cmd, pathlib.Path(log_dir) / f"{name}.log", netns)

    def wait_ready(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready after {timeout} s:\n{self.output()}")

    def metrics(self):
        return parse_metrics(httpx.get(self.url + "/metrics", timeout=10).text)


class Router(Process):
    def __init__(self, worker_urls, log_dir, policy="round_robin", args=(), host="127.0.0.1", netns=None):
        self.host = host
        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        self.worker_urls = list(worker_urls)
        cmd = [router_bin(), "--worker-urls", *self.worker_urls, "--policy", policy, "--host", host,
               "--port", str(self.port), "--prometheus-port", str(free_port()), "--prometheus-host", host,
               *ROUTER_HEALTH_ARGS, *args]
        super().__init__("router", cmd, pathlib.Path(log_dir) / "router.log", netns)

    def workers(self):
        """{worker url: healthy?} as the router reports it (GET /list_workers, /workers)."""
        r = httpx.get(self.url + "/workers", timeout=5)
        if r.status_code == 200:
            body = r.json()
            items = body.get("workers", body) if isinstance(body, dict) else body
            out = {}
            for w in items:
                if isinstance(w, dict):
                    out[w.get("url")] = bool(w.get("is_healthy", w.get("healthy", True)))
            if out:
                return out
        body = httpx.get(self.url + "/list_workers", timeout=5).json()
        return {u: True for u in body.get("urls", [])}

    def _rebind(self):
        """New free ports for --port and --prometheus-port (another process took one between
        free_port() and the router's bind), then start again."""
        self.port = free_port()
        self.cmd[self.cmd.index("--port") + 1] = str(self.port)
        self.cmd[self.cmd.index("--prometheus-port") + 1] = str(free_port())
        self.url = f"http://{self.host}:{self.port}"
        self.start()

    def wait_ready(self, timeout=90):
        deadline = time.time() + timeout
        rebinds = 0
        while time.time() < deadline:
            if not self.alive():
                this_run = self.output().rsplit("\n=== ", 1)[-1]  # since the last start()
                if "Address already in use" in this_run and rebinds < 3:
                    rebinds += 1
                    self._rebind()
                    continue
                raise RuntimeError(f"router exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    w = self.workers()
                    if all(w.get(u) for u in self.worker_urls):
                        return self
            except (httpx.TransportError, ValueError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"router not ready after {timeout} s:\n{self.output()}")


class Cluster:
    """N omnibus replicas (`-t threads`) behind vllm-router with `policy`."""

    def __init__(self, n=2, policy="round_robin", replica_args=(), router_args=(), threads=1, log_dir=None,
                 hosts=None, netns=None, router_host="127.0.0.1", router_netns=None, listen_hosts=None):
        self._tmp = None
        if log_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="omnibus-cluster-")
            log_dir = self._tmp
        self.log_dir = pathlib.Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        hosts = hosts or ["127.0.0.1"] * n
        netns = netns or [None] * n
        listen_hosts = listen_hosts or [None] * n
        self.replicas = [Replica(f"replica{i}", self.log_dir, replica_args, threads, hosts[i], netns=netns[i],
                                 listen_host=listen_hosts[i]) for i in range(n)]
        self.router = Router([r.url for r in self.replicas], self.log_dir, policy, router_args, router_host,
                             router_netns)
        self._finalizer = weakref.finalize(self, Cluster._stop_all, [self.router, *self.replicas])

    @property
    def url(self):
        return self.router.url

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
        for p in procs:  # router first: no new requests reach a stopping replica
            codes[p.name] = p.stop()
        return codes

    def stop(self):
        """Stops the router, then the replicas. Returns {name: exit code}."""
        return self._finalizer()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def kill(self, i):
        self.replicas[i].kill()

    def restart(self, i):
        r = self.replicas[i]
        if r.alive():
            r.stop()
        r.start()
        r.wait_ready()

    def wait_worker(self, i, healthy, timeout=10):
        """Polls the router until it reports replica i healthy (or not)."""
        url = self.replicas[i].url
        deadline = time.time() + timeout
        seen = None
        while time.time() < deadline:
            try:
                seen = self.router.workers()
                if bool(seen.get(url)) == healthy:
                    return time.time() - (deadline - timeout)
            except (httpx.TransportError, ValueError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"router did not report {url} healthy={healthy} within {timeout} s "
                             f"(last: {seen})\n{self.logs()}")

    def logs(self, chars=3000):
        parts = [f"--- {p.name} ({p.log_path}):\n{p.output(chars)}" for p in [self.router, *self.replicas]]
        return "\n".join(parts)
