"""Fixtures that run a real `omnibus serve` for the tests.

OMNIBUS_BIN: the omnibus binary (default: build/omnibus); OMNIBUS_MODELS_DIR:
where the bundled models live (the binary also looks in models/).
Each server listens on a free loopback port and is stopped with SIGTERM at the
end; a test fails if it did not exit cleanly.
"""
import os
import pathlib
import signal
import socket
import subprocess
import time

import httpx
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = os.environ.get("OMNIBUS_TEST_MODEL", "smollm2-135m")


def omnibus_bin():
    return os.environ.get("OMNIBUS_BIN", str(ROOT / "build" / "omnibus"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, args, log_path, model=MODEL, env=None):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "w")
        cmd = [omnibus_bin(), "serve", "-m", model, "--port", str(self.port)] + list(args)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT,
                                     env=None if env is None else {**os.environ, **env})

    def wait_ready(self, timeout=180):
        deadline = time.time() + timeout
        saw_loading = False
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"omnibus serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                r = httpx.get(self.base_url + "/health", timeout=2)
                if r.status_code == 200:
                    return saw_loading
                saw_loading = saw_loading or r.status_code == 503
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"omnibus serve not ready after {timeout} s:\n{self.output()}")

    def output(self):
        self.log.flush()
        return pathlib.Path(self.log_path).read_text(errors="replace")[-4000:]

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        self.log.close()
        return self.proc.returncode

    def metrics(self):
        """The /metrics samples as {name: value}, labels dropped (one model)."""
        out = {}
        for line in httpx.get(self.base_url + "/metrics", timeout=10).text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            base = name.split("{", 1)[0]
            if "le=" in name or "finished_reason=" in name:
                base = name.replace('model_name="' + MODEL + '",', "").replace('{model_name="' + MODEL + '"}', "")
            out[base] = float(value)
        return out

    def wait_idle(self, timeout=60):
        """Waits until the engine runs nothing and holds no KV blocks; returns the metrics."""
        deadline = time.time() + timeout
        while True:
            m = self.metrics()
            if (m["omnibus:num_requests_running"] == 0 and m["omnibus:num_requests_waiting"] == 0
                    and m["omnibus:kv_cache_usage_perc"] == 0):
                return m
            if time.time() > deadline:
                raise AssertionError(f"engine not idle after {timeout} s: {m}")
            time.sleep(0.1)


@pytest.fixture(scope="session")
def start_server(tmp_path_factory):
    """Factory: start_server(*extra_args, model=MODEL, env=None) -> a ready Server, stopped at the
    session's end (env: variables added to the environment)."""
    servers = []

    def start(*args, model=MODEL, env=None):
        log = tmp_path_factory.mktemp("serve") / "serve.log"
        s = Server(args, log, model, env)
        servers.append(s)
        s.wait_ready()
        return s

    yield start
    failures = []
    for s in servers:
        rc = s.stop()
        if rc != 0:
            failures.append(f"exit code {rc}:\n{s.output()}")
    assert not failures, "\n".join(failures)


@pytest.fixture(scope="session")
def server(start_server):
    """The shared default server: SmolLM2, room for 256+ concurrent short streams."""
    return start_server("--max-num-seqs", "256", "--kv-cache-memory", "256MiB", "--max-model-len", "2048",
                        "--enable-debug-endpoints")


@pytest.fixture
def base_url(server):
    return server.base_url
