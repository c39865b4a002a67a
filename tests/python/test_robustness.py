"""Issue 34, findings 5 and 6: hostile but well-formed input against the
release binary. Each test reproduced its finding on the binary before the fix.

  structured output  5,000 choices and 5,000 integer enum values work; {"$ref": "#"}
                     and an a <-> b $ref cycle are 400s; an output the grammar
                     matcher cannot continue ends with finish_reason
                     "grammar_dead_end", never "stop" (all of these were 200 with
                     text "" or a stuck prefix, and "stop")
  tool messages      role "tool" without tool_call_id, and assistant tool_calls
                     whose arguments are not JSON, are 400s (were accepted)
  HTTP               connections that send their header or body too slowly are
                     closed after --http-header-timeout / --http-body-timeout and
                     counted (20 slowloris connections were open after 55 s)
  disk tier          a FIFO named *.kvb in the tier's directory is skipped (start-up
                     hung forever); on a file system others filled, writes pause and
                     kv_disk_writes_enabled reads 0 until there is room again (it
                     read 1 while every write failed with ENOSPC)
"""
import os
import re
import select
import socket
import subprocess
import time

import httpx
import pytest

from conftest import MODEL, Server


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server("--max-num-seqs", "8", "--kv-cache-memory", "128MiB", "--max-model-len", "1024")


def complete(srv, prompt, max_tokens=16, **extra):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}
    return httpx.post(srv.base_url + "/v1/completions", json=body, timeout=120)


def chat(srv, messages, **extra):
    body = {"model": MODEL, "messages": messages, "max_tokens": 4, "temperature": 0, **extra}
    return httpx.post(srv.base_url + "/v1/chat/completions", json=body, timeout=120)


def metric_samples(srv, name):
    """{labels text: value} of every sample of `name`."""
    text = httpx.get(srv.base_url + "/metrics", timeout=10).text
    return {m.group(1): float(m.group(2))
            for m in re.finditer(rf"^{re.escape(name)}\{{([^}}]*)\}} ([0-9.e+-]+)$", text, re.M)}


def metric(srv, name, label):
    return sum(v for k, v in metric_samples(srv, name).items() if label in k)


# --- structured output -------------------------------------------------------------------------------------------

def test_five_thousand_choices_work(srv):
    choices = [f"item-{i}" for i in range(5000)]
    r = complete(srv, "Pick an item:", structured_outputs={"choice": choices})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["finish_reason"] == "stop" and c["text"] in choices, c


def test_five_thousand_integer_enum_values_work(srv):
    values = [i * 7 - 300 for i in range(5000)]
    schema = {"type": "integer", "enum": values}
    r = complete(srv, "A number:", response_format={"type": "json_schema",
                                                    "json_schema": {"name": "n", "schema": schema}})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["finish_reason"] == "stop" and int(c["text"]) in values, c


@pytest.mark.parametrize("schema", [
    {"$ref": "#"},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
], ids=["self", "a-b-cycle"])
def test_ref_cycles_that_match_nothing_are_400(srv, schema):
    r = complete(srv, "JSON:", structured_outputs={"json": schema})
    assert r.status_code == 400, r.text
    assert "matches no text" in r.json()["error"]["message"]


def test_an_output_the_matcher_cannot_continue_is_not_stop(srv):
    # Only "x" may come first, 13 times; each x doubles the pending "y"/"z"
    # endings, so the 13th goes past the matcher's 4,096 stacks.
    depth = 13
    rules = [f's{i} ::= "x" s{i + 1} "y" | "x" s{i + 1} "z"' for i in range(depth)]
    grammar = "root ::= s0\n" + "\n".join(rules) + f'\ns{depth} ::= "x"\n'
    r = complete(srv, "Write x:", max_tokens=40, structured_outputs={"grammar": grammar})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["finish_reason"] == "grammar_dead_end", c
    assert set(c["text"]) <= {"x"} and len(c["text"]) < depth, c
    assert metric(srv, "omnibus:request_success_total", 'finished_reason="grammar_dead_end"') >= 1


def test_a_start_beyond_the_matchers_bounds_is_400(srv):
    grammar = "root ::= " + " | ".join(f'"x{i}"' for i in range(5000))
    r = complete(srv, "x:", structured_outputs={"grammar": grammar})
    assert r.status_code == 400, r.text
    assert "4096" in r.json()["error"]["message"]


# --- tool messages -----------------------------------------------------------------------------------------------

def test_a_tool_message_without_tool_call_id_is_400(srv):
    r = chat(srv, [{"role": "user", "content": "Weather in Paris?"},
                   {"role": "tool", "content": "22 C"}])
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "messages[1].tool_call_id"


def test_unparsable_tool_call_arguments_are_400(srv):
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": '}}
    r = chat(srv, [{"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": None, "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": "c1", "content": "22 C"}])
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "messages[1].tool_calls[0].function.arguments"
    call["function"]["arguments"] = '{"city": "Paris"}'
    assert chat(srv, [{"role": "user", "content": "Weather in Paris?"},
                      {"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "c1", "content": "22 C"}]).status_code == 200


# --- HTTP read timeouts ------------------------------------------------------------------------------------------

def wait_all_closed(socks, trickle, limit_s=30):
    """Keeps sending `trickle` on every open socket (as slowloris does) until the server has closed
    them all; the sockets it did not close within limit_s."""
    open_socks = list(socks)
    deadline = time.time() + limit_s
    while open_socks and time.time() < deadline:
        readable, _, _ = select.select(open_socks, [], [], 0.25)
        for s in readable:
            try:
                data = s.recv(4096)
            except ConnectionError:
                data = b""
            if not data:
                open_socks.remove(s)
                s.close()
        for s in open_socks:
            try:
                s.sendall(trickle)
            except OSError:
                pass
    return open_socks


def test_slow_headers_and_bodies_are_closed_and_counted(start_server):
    srv = start_server("--kv-cache-memory", "64MiB", "--max-model-len", "512",
                       "--http-header-timeout", "1", "--http-body-timeout", "1")
    before_h = metric(srv, "omnibus:http_read_timeouts_total", 'phase="header"')
    before_b = metric(srv, "omnibus:http_read_timeouts_total", 'phase="body"')
    slow_headers = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(20)]
    for s in slow_headers:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    assert wait_all_closed(slow_headers, b"X-Slow: 1\r\n") == []
    slow_bodies = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(5)]
    for s in slow_bodies:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000\r\n\r\n{")
    assert wait_all_closed(slow_bodies, b" ") == []
    assert metric(srv, "omnibus:http_read_timeouts_total", 'phase="header"') >= before_h + 20
    assert metric(srv, "omnibus:http_read_timeouts_total", 'phase="body"') >= before_b + 5
    assert httpx.get(srv.base_url + "/health", timeout=10).status_code == 200


# --- disk tier ---------------------------------------------------------------------------------------------------

def test_a_fifo_in_the_disk_tier_does_not_hang_start_up(tmp_path):
    kv_dir = tmp_path / "kv"
    args = ("--kv-cache-memory", "64MiB", "--max-model-len", "1024", "--kv-offload-dir", str(kv_dir))
    first = Server(args, tmp_path / "first.log")
    first.wait_ready()
    assert first.stop() == 0
    (ns_dir,) = [d for d in kv_dir.iterdir() if d.is_dir()]
    fifo = ns_dir / ("ab" * 8 + ".kvb")
    os.mkfifo(fifo)
    second = Server(args, tmp_path / "second.log")
    try:
        second.wait_ready(timeout=60)
        assert "not a regular file" in second.output()
        assert metric(second, "omnibus:kv_disk_skipped_files_total", 'reason="foreign"') == 1
        assert metric(second, "omnibus:kv_disk_enabled", "") == 1
        assert fifo.is_fifo()
    finally:
        if second.proc.poll() is None:
            assert second.stop() == 0
        else:
            second.stop()


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs (root only; skipped elsewhere), unmounted at the end."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4M", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def wait_for(check, limit_s=60):
    """Polls /metrics through `check` until it holds (the disk tier writes on its own thread)."""
    deadline = time.time() + limit_s
    while not check():
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def test_a_full_file_system_pauses_disk_writes_and_says_so(small_fs, tmp_path):
    s = Server(("--kv-cache-memory", "64MiB", "--max-model-len", "2048", "--kv-offload-dir", str(small_fs / "kv")),
               tmp_path / "serve.log")
    try:
        s.wait_ready(timeout=60)
        # Someone else fills the disk, leaving less than two of our 360 KiB blocks.
        st = os.statvfs(small_fs)
        (small_fs / "fill").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 500 * 1024))
        for i in range(3):
            assert complete(s, f"Story {i}: " + "the quick brown fox jumps over the lazy dog " * 30,
                            max_tokens=2).status_code == 200
        wait_for(lambda: metric(s, "omnibus:kv_disk_write_drops_total", "") >= 10)
        # Before the fix: 1, with a failed write (and an eviction) for every block.
        assert metric(s, "omnibus:kv_disk_writes_enabled", "") == 0
        assert metric(s, "omnibus:kv_disk_write_errors_total", "") == 0
        assert "writes paused" in s.output()

        (small_fs / "fill").unlink()
        assert complete(s, "Another story: " + "a stitch in time saves nine " * 40, max_tokens=2).status_code == 200
        wait_for(lambda: metric(s, "omnibus:kv_disk_written_blocks_total", "") > 0)
        assert metric(s, "omnibus:kv_disk_writes_enabled", "") == 1
        assert "writes resumed" in s.output()
    finally:
        assert s.stop() == 0
