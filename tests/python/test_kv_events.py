"""KV-cache events (docs/kv-events.md): a subscriber that replays the ZeroMQ
stream rebuilds exactly the prefix cache's block hashes, live (SUB) and late
(replay from seq 0), through a workload that fills and evicts a small pool;
a refused endpoint exits 2 and names it."""
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import msgpack
import pytest
import zmq

from conftest import MODEL, free_port, omnibus_bin

END_SEQ = (-1).to_bytes(8, "big", signed=True)


def rebuild(keys, payload):
    """Applies one batch to the set of block hashes; returns the event tags."""
    ts, events, dp_rank = msgpack.unpackb(payload)
    assert isinstance(ts, float) and dp_rank == 0
    tags = []
    for e in events:
        tag = e["type"]
        tags.append(tag)
        if tag == "BlockStored":
            assert e["medium"] == "CPU" and e["lora_id"] is None and e["lora_name"] is None
            assert len(e["token_ids"]) == len(e["block_hashes"]) * e["block_size"]
            assert e["parent_block_hash"] is None or e["parent_block_hash"] in keys
            for h in e["block_hashes"]:
                assert h not in keys
                keys.add(h)
        elif tag == "BlockRemoved":
            for h in e["block_hashes"]:
                keys.remove(h)
        else:
            assert tag == "AllBlocksCleared"
            keys.clear()
    return tags


class Subscriber:
    """A SUB socket on its own thread: every batch's seq and payload, in order."""

    def __init__(self, endpoint):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(endpoint)
        self.batches = []  # (seq, topic, payload)
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            if self.sock.poll(50):
                topic, seq, payload = self.sock.recv_multipart()
                self.batches.append((int.from_bytes(seq, "big"), topic, payload))

    def stream(self, replay_endpoint, published, timeout=10):
        """The whole stream from seq 0, as a real subscriber rebuilds it: the live
        batches, preceded by the ones sent before the subscription reached the
        server (ZeroMQ's slow joiner), fetched from the replay socket. Returns once
        it holds `published` events (the server's omnibus:kv_events_published_total
        after the workload), so no wait depends on how fast the server sends.
        Batches are (seq, topic or None for replayed ones, payload)."""
        deadline = time.time() + timeout
        while True:
            live = list(self.batches)
            assert live or time.time() < deadline, "the subscriber received no batch"
            if live:
                head = [(seq, None, p) for seq, p in replay_all(replay_endpoint, 0) if seq < live[0][0]]
                got = head + live
                n = sum(len(msgpack.unpackb(p)[1]) for _, _, p in got)
                assert n <= published, "more events arrived than the server published"
                if n == published:
                    return got
                assert time.time() < deadline, f"{n} of {published} published events arrived"
            time.sleep(0.05)

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close(linger=0)
        self.ctx.term()


def replay_all(endpoint, start=0):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(endpoint)
    sock.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    try:
        while True:
            assert sock.poll(5000), "no end marker from the replay socket"
            empty, seq, payload = sock.recv_multipart()
            assert empty == b""
            if seq == END_SEQ:
                assert payload == b""
                return out
            out.append((int.from_bytes(seq, "big"), payload))
    finally:
        sock.close(linger=0)
        ctx.term()


def cached_block_hashes(base_url):
    r = httpx.get(base_url + "/v1/engine/kv_blocks", timeout=10)
    r.raise_for_status()  # the server runs with --enable-debug-endpoints
    body = r.json()
    assert body["n_cached"] == len(body["block_hashes"])
    return set(body["block_hashes"])


@pytest.fixture(scope="module")
def events_server(start_server):
    pub, replay = free_port(), free_port()
    # 6 MiB: ~16 blocks of 16 tokens for smollm2-135m; the workload's prompts need ~40.
    s = start_server("--kv-cache-memory", "6MiB", "--max-model-len", "192", "--max-num-seqs", "4",
                     "--kv-events-endpoint", f"tcp://*:{pub}",
                     "--kv-events-replay-endpoint", f"tcp://*:{replay}", "--kv-events-topic", "kv",
                     "--enable-debug-endpoints")
    s.kv_endpoint = f"tcp://127.0.0.1:{pub}"
    s.kv_replay_endpoint = f"tcp://127.0.0.1:{replay}"
    return s


def workload(base_url):
    """Distinct long prompts (some twice, so some blocks are hits), four at a time."""
    prompts = [f"Document {i}: " + " ".join(f"w{i}x{j}" for j in range(25)) for i in range(6)]
    prompts += prompts[:2]

    def send(p):
        r = httpx.post(base_url + "/v1/completions", timeout=60,
                       json={"model": MODEL, "prompt": p, "max_tokens": 2, "temperature": 0})
        assert r.status_code == 200, r.text

    with ThreadPoolExecutor(4) as ex:
        list(ex.map(send, prompts))


def test_subscriber_rebuilds_the_cached_blocks(events_server):
    s = events_server
    published_before = s.metrics()["omnibus:kv_events_published_total"]
    sub = Subscriber(s.kv_endpoint)
    try:
        workload(s.base_url)
        s.wait_idle()
        batches = sub.stream(s.kv_replay_endpoint, s.metrics()["omnibus:kv_events_published_total"])
    finally:
        sub.close()
    assert published_before == 0, "events were published before the workload"
    seqs = [b[0] for b in batches]
    assert seqs == list(range(len(seqs))), "a gap in the sequence numbers"
    assert all(b[1] in (b"kv", None) for b in batches)
    assert batches[-1][1] == b"kv", "the live stream (SUB) did not carry the workload's end"
    keys, tags = set(), []
    for _, _, payload in batches:
        tags += rebuild(keys, payload)
    assert "BlockStored" in tags and "BlockRemoved" in tags, "the workload should fill and evict the pool"
    m = s.metrics()
    assert m["omnibus:kv_events_published_total"] == len(tags)
    assert m["omnibus:kv_events_dropped_total"] == 0
    assert keys == cached_block_hashes(s.base_url)


def test_late_subscriber_replays_from_zero(events_server):
    s = events_server
    workload(s.base_url)  # on its own too (the tests may run alone)
    s.wait_idle()
    batches = replay_all(s.kv_replay_endpoint, 0)
    assert [seq for seq, _ in batches] == list(range(len(batches)))
    keys = set()
    for _, payload in batches:
        rebuild(keys, payload)
    tail = replay_all(s.kv_replay_endpoint, len(batches) // 2)
    assert tail == batches[len(batches) // 2:]
    assert keys == cached_block_hashes(s.base_url)


def test_flush_cache_is_one_all_blocks_cleared(events_server):
    s = events_server
    sub = Subscriber(s.kv_endpoint)
    try:
        workload(s.base_url)
        s.wait_idle()
        n_before = len(sub.stream(s.kv_replay_endpoint, s.metrics()["omnibus:kv_events_published_total"]))
        r = httpx.post(s.base_url + "/flush_cache", timeout=30)
        assert r.status_code == 200, r.text
        batches = sub.stream(s.kv_replay_endpoint, s.metrics()["omnibus:kv_events_published_total"])
    finally:
        sub.close()
    after = batches[n_before:]
    assert len(after) == 1, "the flush should be one batch"
    assert rebuild({1, 2}, after[0][2]) == ["AllBlocksCleared"]
    assert cached_block_hashes(s.base_url) == set()
    # A late subscriber replaying everything ends with the empty set too.
    keys = set()
    for _, payload in replay_all(s.kv_replay_endpoint, 0):
        rebuild(keys, payload)
    assert keys == set()


def test_refused_endpoint_exits_2_and_names_it():
    r = subprocess.run([omnibus_bin(), "serve", "-m", MODEL, "--port", "0",
                        "--kv-events-endpoint", "tcp://*:notaport"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert "tcp://*:notaport" in r.stderr
