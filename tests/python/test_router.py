"""omnibus as a worker of vllm-router (the vLLM project's router, PyPI
vllm-router): the official openai client through the router answers as one
replica does, errors pass through, cache_aware keeps a prefix on one replica,
power_of_two reads /get_load, a killed replica is dropped and rejoins when it
restarts, and replicas in other network namespaces serve through veth pairs.

Each cluster is a few `omnibus serve -t 1` replicas behind one router
(tests/python/router_harness.py); all of it is stopped by PID at the end.
"""
import concurrent.futures
import os
import subprocess
import time
import uuid

import httpx
import openai
import pytest

from router_harness import MODEL, Cluster, Replica, free_port, router_bin

REPLICA_ARGS = ["--kv-cache-memory", "64MiB", "--max-model-len", "2048"]

pytestmark = pytest.mark.skipif(
    subprocess.run([router_bin(), "--help"], capture_output=True).returncode != 0 if os.path.exists(router_bin())
    else True, reason="vllm-router is not installed (scripts/setup.sh installs it in .venv)")


def client(url, timeout=60):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=timeout)


@pytest.fixture(scope="module")
def cluster():
    with Cluster(2, policy="cache_aware", replica_args=REPLICA_ARGS) as c:
        yield c


# --- answers through the router equal one replica's --------------------------------------------------------------

def completion(cl, prompt, stream):
    kw = dict(model=MODEL, prompt=prompt, max_tokens=8, temperature=0)
    if not stream:
        r = cl.completions.create(**kw)
        return r.choices[0].text, r.usage
    chunks = list(cl.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[-1].usage is not None
    return "".join(c.choices[0].text for c in chunks if c.choices), chunks[-1].usage


def chat(cl, content, stream):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": content}], max_tokens=8, temperature=0)
    if not stream:
        r = cl.chat.completions.create(**kw)
        return r.choices[0].message.content, r.usage
    chunks = list(cl.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks[-1].usage


@pytest.mark.parametrize("kind", [completion, chat], ids=["completions", "chat"])
@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_answers_equal_one_replica(cluster, kind, stream):
    via, direct = client(cluster.url), client(cluster.replicas[1].url)
    for prompt in ("The capital of France is", "List three colors:"):
        text, usage = kind(via, prompt, stream)
        want, want_usage = kind(direct, prompt, stream)
        assert text == want, cluster.logs()
        assert usage.prompt_tokens == want_usage.prompt_tokens
        assert usage.completion_tokens == want_usage.completion_tokens
        assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens >= 0


def test_models_through_router(cluster):
    models = client(cluster.url).models.list()
    assert MODEL in [m.id for m in models.data], cluster.logs()


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 4, "temperature": 3}),
    ("/v1/completions", {"model": "no-such-model", "prompt": "x", "max_tokens": 4}),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 100000}),
    ("/v1/chat/completions", {"model": MODEL, "messages": [], "max_tokens": 4}),
], ids=["temperature", "model", "context_length", "empty_messages"])
def test_errors_pass_through(cluster, path, body):
    """The worker's 4xx and OpenAI error JSON reach the client unchanged."""
    direct = httpx.post(cluster.replicas[0].url + path, json=body, timeout=30)
    via = httpx.post(cluster.url + path, json=body, timeout=30)
    assert 400 <= direct.status_code < 500
    assert via.status_code == direct.status_code, via.text + "\n" + cluster.logs()
    assert via.json() == direct.json()


def test_router_rejects_what_it_cannot_parse(cluster):
    """vllm-router deserializes the body into typed fields first: max_tokens -1 (an
    u32 there) never reaches the worker; the router answers 422 in plain text, where
    omnibus would answer 400 with OpenAI error JSON. Pinned so that a router upgrade
    that changes it shows up here."""
    body = {"model": MODEL, "prompt": "x", "max_tokens": -1}
    assert httpx.post(cluster.replicas[0].url + "/v1/completions", json=body).status_code == 400
    via = httpx.post(cluster.url + "/v1/completions", json=body, timeout=30)
    assert via.status_code == 422 and "max_tokens" in via.text, via.text


def test_openai_exceptions_through_router(cluster):
    cl = client(cluster.url)
    with pytest.raises(openai.BadRequestError) as e:
        cl.completions.create(model=MODEL, prompt="x", max_tokens=4, temperature=3)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        cl.completions.create(model="no-such-model", prompt="x", max_tokens=4)


# --- cache_aware: a prefix stays on one replica ----------------------------------------------------------------------

PREFIX = ("You are the support assistant of a bicycle shop in Lyon. Be precise, polite and brief; "
          "quote prices in euros and never invent stock levels. ") * 6


def test_cache_aware_keeps_a_prefix_on_one_replica(cluster):
    before = [r.metrics() for r in cluster.replicas]
    cl = client(cluster.url)
    cached = []
    for q in ("Do you repair tyres?", "When do you open?", "Do you sell helmets?", "Can I rent a bike?"):
        r = cl.completions.create(model=MODEL, prompt=PREFIX + "Question: " + q + " Answer:", max_tokens=2,
                                  temperature=0)
        cached.append(r.usage.prompt_tokens_details.cached_tokens)
    after = [r.metrics() for r in cluster.replicas]
    served = [a["omnibus:request_success_total"] - b["omnibus:request_success_total"]
              for a, b in zip(after, before)]
    hits = [a["omnibus:prefix_cache_hits_total"] - b["omnibus:prefix_cache_hits_total"]
            for a, b in zip(after, before)]
    assert sorted(served) == [0, 4], f"served per replica {served}\n{cluster.logs()}"
    assert min(cached[1:]) >= 64, cached  # the shared prefix is several 16-token blocks
    assert max(hits) >= sum(cached[1:])


# --- power_of_two reads /get_load -------------------------------------------------------------------------------------

def test_power_of_two(tmp_path):
    probe = Replica("probe", tmp_path, REPLICA_ARGS).start()
    try:
        probe.wait_ready()
        r = httpx.get(probe.url + "/get_load", timeout=5)
    finally:
        probe.stop()
    assert r.status_code == 200 and isinstance(r.json()["load"], int), r.text
    with Cluster(2, policy="power_of_two", replica_args=REPLICA_ARGS, log_dir=tmp_path / "c") as c:
        for rep in c.replicas:
            assert httpx.get(rep.url + "/get_load", timeout=5).json()["load"] == 0
        # The router's /get_loads reads each worker's /get_load (-1 where a worker has none).
        deadline = time.time() + 10
        while True:
            loads = httpx.get(c.url + "/get_loads", timeout=5).json()["workers"]
            if all(w["load"] >= 0 for w in loads):
                break
            assert time.time() < deadline, f"router never read /get_load: {loads}\n{c.logs()}"
            time.sleep(0.1)
        cl = client(c.url)
        prompts = [f"Count from {i} to {i + 5}:" for i in range(12)]
        with concurrent.futures.ThreadPoolExecutor(12) as ex:
            texts = list(ex.map(lambda p: cl.completions.create(model=MODEL, prompt=p, max_tokens=4,
                                                                 temperature=0).choices[0].text, prompts))
        assert all(texts), c.logs()
        # 12 concurrent requests: the less loaded of two gets each, so both replicas serve.
        served = [rep.metrics()["omnibus:request_success_total"] for rep in c.replicas]
        assert sum(served) == 12 and min(served) >= 1, f"served per replica {served}\n{c.logs()}"


# --- faults: SIGKILL a replica under load, restart it ---------------------------------------------------------------

def run_stream(url, prompt, max_tokens):
    """-> (text, finish_reason or None, error or None); truncated streams have no finish_reason."""
    text, finish = "", None
    try:
        for chunk in client(url, timeout=30).completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens,
                                                                 temperature=0, stream=True,
                                                                 extra_body={"ignore_eos": True}):
            for ch in chunk.choices:
                text += ch.text
                finish = ch.finish_reason or finish
    except Exception as e:  # noqa: BLE001 - any client-side error is an acceptable end
        return text, finish, e
    return text, finish, None


def test_killed_replica_is_dropped_and_rejoins(tmp_path):
    with Cluster(2, policy="round_robin", replica_args=REPLICA_ARGS, log_dir=tmp_path) as c:
        dead, alive = c.replicas
        prompts = [f"Story {i}: once upon a time" for i in range(4)]
        n_tokens = 96
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            futs = [ex.submit(run_stream, c.url, p, n_tokens) for p in prompts]
            # Both replicas are decoding (round_robin: two streams each) before the kill.
            deadline = time.time() + 20
            while True:
                m = [r.metrics() for r in c.replicas]
                if all(x["omnibus:num_requests_running"] >= 1 and x["omnibus:generation_tokens_total"] >= 2
                       for x in m):
                    break
                assert time.time() < deadline, f"{m}\n{c.logs()}"
                time.sleep(0.02)
            c.kill(0)
            t0 = time.time()
            results = [f.result(timeout=60) for f in futs]  # a hang fails here, not in CI's timeout
        assert time.time() - t0 < 45
        ok = [r for r in results if r[1] == "length" and r[2] is None]
        broken = [r for r in results if not (r[1] == "length" and r[2] is None)]
        assert len(ok) >= 2 and len(broken) >= 1, f"{results}\n{c.logs()}"
        # The survivor's streams are unaffected: the same text as a direct request.
        for p, r in zip(prompts, results):
            if r in ok:
                assert r[0] == run_stream(alive.url, p, n_tokens)[0]
        # The router drops the dead replica: every later request succeeds on the survivor.
        took = c.wait_worker(0, healthy=False, timeout=5)
        before = alive.metrics()["omnibus:request_success_total"]
        cl = client(c.url, timeout=30)
        for i in range(4):
            assert cl.completions.create(model=MODEL, prompt=f"Hello {i}", max_tokens=2, temperature=0).choices
        assert alive.metrics()["omnibus:request_success_total"] == before + 4
        # Restarted on the same port, it rejoins and gets requests again.
        c.restart(0)
        c.wait_worker(0, healthy=True, timeout=10)
        for i in range(4):
            cl.completions.create(model=MODEL, prompt=f"Again {i}", max_tokens=2, temperature=0)
        assert dead.metrics()["omnibus:request_success_total"] >= 1, c.logs()
        print(f"killed replica's streams ended with: {[(len(t), f, repr(e)[:80]) for t, f, e in broken]}; "
              f"router reported it unhealthy {took:.2f} s after the survivors finished")


# --- network namespaces: replicas behind veth pairs -----------------------------------------------------------------

def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.fixture
def netns_pair():
    """Two namespaces, one per replica, each joined to the test's own namespace (the
    router's) by a veth pair on its own /24: yields ([ns_a, ns_b], [ip_a, ip_b])."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    tag = uuid.uuid4().hex[:6]
    made = []
    try:
        hosts = []
        for i in range(2):
            n = f"omb{tag}{i}"
            r = sh("ip", "netns", "add", n)
            if r.returncode != 0:
                pytest.skip(f"`ip netns add` failed: {r.stderr.strip()}")
            made.append(n)
            inner, outer = f"vo{tag}{i}w", f"vo{tag}{i}r"  # interface names have <= 15 chars
            sub = f"10.{231 + i}.{int(tag[:2], 16)}"
            for s in [("ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", n),
                      ("ip", "-n", n, "addr", "add", f"{sub}.2/24", "dev", inner),
                      ("ip", "addr", "add", f"{sub}.1/24", "dev", outer),
                      ("ip", "-n", n, "link", "set", inner, "up"),
                      ("ip", "-n", n, "link", "set", "lo", "up"),
                      ("ip", "link", "set", outer, "up")]:
                r = sh(*s)
                if r.returncode != 0:
                    pytest.skip(f"`{' '.join(s)}` failed: {r.stderr.strip()}")
            hosts.append(f"{sub}.2")
        yield made, hosts
    finally:
        for n in made:  # deleting a namespace deletes the veth end in it, and with it the peer
            sh("ip", "netns", "del", n)
        for i in range(2):
            sh("ip", "link", "del", f"vo{tag}{i}r")  # in case the namespace was not made


def test_replicas_in_network_namespaces(netns_pair, tmp_path):
    """Router -> replica traffic crosses a veth pair into another namespace."""
    nss, hosts = netns_pair
    prompt = "The capital of France is"
    with Cluster(2, policy="round_robin", replica_args=REPLICA_ARGS, log_dir=tmp_path, hosts=hosts, netns=nss) as c:
        assert c.router.workers() == {f"http://{h}:{r.port}": True for h, r in zip(hosts, c.replicas)}
        via = client(c.url).completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0)
        direct = client(c.replicas[0].url).completions.create(model=MODEL, prompt=prompt, max_tokens=8,
                                                              temperature=0)
        assert via.choices[0].text == direct.choices[0].text, c.logs()
        served = [r.metrics()["omnibus:request_success_total"] for r in c.replicas]
        assert sum(served) == 2, served
