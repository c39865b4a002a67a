"""What the benchmark clients that start their own servers share: a free
port, waiting for /health, stopping a server, and the CPU's name for the
report. Imported by the scripts beside it (run as tools/bench/NAME.py)."""
import signal
import socket
import subprocess
import time

import httpx


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base, proc, timeout=300.0, log_path=None):
    """Until GET base/health answers 200; RuntimeError if proc exits first or time runs out."""
    where = f" (log: {log_path})" if log_path else ""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before becoming healthy{where}")
        try:
            if httpx.get(base + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server did not become healthy in time{where}")


def stop(proc):
    """SIGINT, then SIGKILL after 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"
