"""Disaggregated prefill and decode behind vllm-router's PD mode (docs/disaggregation.md).

Outputs through `vllm-router --vllm-pd-disaggregation` (a prefill worker and a
decode worker moving KV blocks over UCX) are bit-identical to one `omnibus
serve`, for both bundled models and the f16, q8 and kivi2 caches, greedy and
seeded, streaming or not; the decode worker pulls only what its own prefix
cache lacks; forged kv_transfer_params get 400 and never touch the pool; a
prefill worker that dies before the pull, a decode worker that never pulls
(the timeout) or dies mid-stream leave nothing pinned; workers in separate
network namespaces move blocks with UCX over TCP on veth pairs.
"""
import concurrent.futures
import os
import random
import struct
import subprocess
import time
import uuid

import httpx
import openai
import pytest

from pd_harness import PdCluster, kv_security_args, kv_transfer_supported, sign_offer
from router_harness import Replica, free_port, parse_metrics, router_bin

WORKER_ARGS = ["--kv-cache-memory", "96MiB", "--max-model-len", "2048", "--served-model-name", "m"]

pytestmark = [
    pytest.mark.skipif(not os.path.exists(router_bin()) and router_bin() == "vllm-router",
                       reason="vllm-router is not installed (scripts/setup.sh installs it in .venv)"),
    pytest.mark.skipif(not kv_transfer_supported(), reason="this omnibus binary has no --kv-role"),
]

WORDS = ("river stone lantern quiet orbit maple signal harbor velvet ember canyon meadow copper "
         "falcon glacier pepper thunder willow amber cobalt").split()


def client(url, timeout=120):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=timeout)


def text(seed, n_words):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def workload(n=64, tenants=8):
    """n requests over `tenants` shared prefixes (~100-200 tokens), half greedy and half seeded,
    a quarter streamed."""
    reqs = []
    for i in range(n):
        prefix = f"Tenant {i % tenants} notes: " + text(1000 + i % tenants, 60 + 15 * (i % tenants))
        body = {"prompt": prefix + f"\nQuestion {i}: " + text(i, 6 + i % 5), "max_tokens": 8}
        if i % 2:
            body.update(temperature=0.8, seed=100 + i)
        else:
            body.update(temperature=0)
        reqs.append((body, i % 4 == 3))
    return reqs


def f32(x):
    """The engine's float32 value behind a JSON number. vllm-router re-serializes the bodies it
    forwards, and its f64 parsing can move a number by one double ulp (-1.9195938110351562 becomes
    -1.9195938110351565): far below float32's resolution, so the float32 values compare exactly."""
    return struct.unpack("f", struct.pack("f", x))[0]


def logprob_entries(lp):
    """A completion choice's logprobs as the engine's exact float32 values: each token with its
    logprob and top-2."""
    if lp is None:
        return []
    return [(t, f32(lp_), tuple(sorted((k, f32(v)) for k, v in top.items())) if top else ())
            for t, lp_, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs or [None] * len(lp.tokens))]


def run(url, reqs, workers=8):
    """Each request's (text, prompt tokens, logprobs): the logprobs are compared exactly too, so a KV
    block that moved with one bit changed shows even where the sampled text does not."""
    cl = client(url)

    def one(item):
        body, stream = item
        kw = dict(body, model="m", logprobs=2)
        if not stream:
            r = cl.completions.create(**kw)
            return r.choices[0].text, r.usage.prompt_tokens, logprob_entries(r.choices[0].logprobs)
        chunks = list(cl.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
        lps = [e for c in chunks if c.choices for e in logprob_entries(c.choices[0].logprobs)]
        return ("".join(c.choices[0].text for c in chunks if c.choices), chunks[-1].usage.prompt_tokens, lps)

    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        return list(ex.map(one, reqs))


def metric(replica, name):
    return parse_metrics(httpx.get(replica.url + "/metrics", timeout=10).text).get(name, 0.0)


def pulled_blocks(replica):
    text_ = httpx.get(replica.url + "/metrics", timeout=10).text
    out = {}
    for line in text_.splitlines():
        if line.startswith("omnibus:kv_transfer_blocks_total{"):
            direction = line.split('direction="', 1)[1].split('"', 1)[0]
            out[direction] = float(line.rsplit(" ", 1)[1])
    return out


def wait_metric(replica, name, want, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metric(replica, name) == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"{replica.name}: {name} != {want} after {timeout} s (now {metric(replica, name)})\n"
                         f"{replica.output()}")


# --- bit-identical to one server -------------------------------------------------------------------------------------

@pytest.mark.parametrize("model,kv_dtype", [("smollm2-135m", "f16"), ("smollm2-135m", "q8"), ("smollm2-135m", "kivi2"),
                                            ("gemma3-270m", "f16"), ("gemma3-270m", "q8"), ("gemma3-270m", "kivi2")])
def test_pd_outputs_equal_one_server(model, kv_dtype, tmp_path):
    args = WORKER_ARGS + ["--kv-cache-dtype", kv_dtype]
    reqs = workload()
    single = Replica("single", tmp_path, args, threads=1, model=model).start()
    try:
        single.wait_ready()
        want = run(single.url, reqs)
    finally:
        single.stop()
    # Eight requests at a time pin ~80 blocks of this small pool, past the default bound of 25%
    # (--kv-transfer-max-pinned, test_security.py), beyond which prompts are computed on the decode
    # worker; here every prompt is to move.
    prefill_args = args + ["--kv-transfer-max-pinned", "100%"]
    with PdCluster(prefill_args=prefill_args, decode_args=args, log_dir=tmp_path, model=model) as c:
        got = run(c.url, reqs)
        for i, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"request {i} ({reqs[i]}): PD {g!r} != single {w!r}\n{c.logs()}"
        blocks = pulled_blocks(c.decode[0])
        # Every request's prompt blocks were pulled or found in the decode worker's own cache.
        assert blocks["pulled"] > 0, (blocks, c.logs())
        assert blocks["pulled"] + blocks["local"] >= sum((p - 1) // 16 for _, p, _ in want), blocks
        # The shared prefixes are found in the decode worker's own cache after their first pull: for kivi2
        # too, whose fp16 window rows move with the blocks (else every hit would be cut back and pulled again).
        assert blocks["local"] > blocks["pulled"], (blocks, c.logs())
        assert metric(c.decode[0], "omnibus:kv_transfer_fallbacks_total") == 0, c.logs()
        wait_metric(c.prefill[0], "omnibus:kv_transfer_pinned_blocks", 0)
        served = pulled_blocks(c.prefill[0])["served"]
        assert served == blocks["pulled"], (served, blocks)
        print(f"{model} {kv_dtype}: decode pulled {blocks['pulled']:.0f} blocks "
              f"({metric(c.decode[0], 'omnibus:kv_transfer_bytes_total') / 2**20:.1f} MiB), "
              f"found {blocks['local']:.0f} in its own cache")
        if kv_dtype == "kivi2":
            check_kivi2_window(c)


def test_pd_decode_worker_speculating_answers_as_one_server(tmp_path):
    """Issue 36's decode side of disaggregation: a decode worker with prompt lookup on (every guess
    verified: --no-spec-backoff, so drafts surely run) continues sequences whose prompt K/V it
    pulled, drafting on top of imported blocks and dropping refused guesses, and answers exactly
    what one plain server answers, logprobs included."""
    reqs = workload(n=24)
    single = Replica("single", tmp_path, WORKER_ARGS, threads=1).start()
    try:
        single.wait_ready()
        want = run(single.url, reqs)
    finally:
        single.stop()
    spec = ["--speculative", "ngram", "--no-spec-backoff"]
    with PdCluster(prefill_args=WORKER_ARGS + ["--kv-transfer-max-pinned", "100%"],
                   decode_args=WORKER_ARGS + spec, log_dir=tmp_path) as c:
        got = run(c.url, reqs)
        for i, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"request {i} ({reqs[i]}): PD+spec {g!r} != single {w!r}\n{c.logs()}"
        assert pulled_blocks(c.decode[0])["pulled"] > 0, c.logs()
        assert metric(c.decode[0], "omnibus:spec_decode_num_draft_tokens_total") > 0, c.logs()


def check_kivi2_window(c):
    """kivi2's offer names the exported fp16 window rows; a decode worker refuses a window of the wrong
    size (400, nothing claimed) and computes the prompt itself when the window is missing."""
    prompt = "Window check: " + text(23, 80)
    good = prefill_params(c, prompt)
    window = good["omnibus"]["window"]
    assert window["bytes"] > 0 and window["offset"] > 0, good
    for name, w in {"wrong size": dict(window, bytes=window["bytes"] + 1), "negative": dict(window, offset=-1),
                    "not an object": 5}.items():
        # Signed again (as a prefill worker with a bug would): the decode worker's own checks refuse it.
        r = decode(c, prompt, sign_offer(dict(good, omnibus=dict(good["omnibus"], window=w)), c.kv_secret()))
        assert r.status_code == 400 and "omnibus.window" in r.text, (name, r.status_code, r.text)
    fallbacks = metric(c.decode[0], "omnibus:kv_transfer_fallbacks_total")
    no_window = sign_offer(dict(good, omnibus={k: v for k, v in good["omnibus"].items() if k != "window"}),
                           c.kv_secret())
    assert decode(c, prompt, no_window).status_code == 200
    assert metric(c.decode[0], "omnibus:kv_transfer_fallbacks_total") == fallbacks + 1
    wait_metric(c.prefill[0], "omnibus:kv_transfer_pinned_blocks", 0)  # released, not pulled


# --- only the missing blocks move ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pd(tmp_path_factory):
    d = tmp_path_factory.mktemp("pd")
    with PdCluster(prefill_args=WORKER_ARGS + ["--kv-transfer-timeout", "2"], decode_args=WORKER_ARGS,
                   log_dir=d) as c:
        yield c


def test_second_request_pulls_only_its_new_blocks(pd):
    cl = client(pd.url)
    shared = "System: " + text(7, 150)
    before = pulled_blocks(pd.decode[0])
    a = cl.completions.create(model="m", prompt=shared + " first question", max_tokens=4, temperature=0)
    mid = pulled_blocks(pd.decode[0])
    b = cl.completions.create(model="m", prompt=shared + " second question, a longer one " + text(8, 40),
                              max_tokens=4, temperature=0)
    after = pulled_blocks(pd.decode[0])
    na, nb = (a.usage.prompt_tokens - 1) // 16, (b.usage.prompt_tokens - 1) // 16
    assert mid["pulled"] - before["pulled"] == na
    assert a.usage.prompt_tokens_details.cached_tokens == 0
    # b shares a's blocks but the one where the prompts part (at least na - 1 of them).
    local = after["local"] - mid["local"]
    assert local >= na - 1 and after["pulled"] - mid["pulled"] == nb - local, (na, nb, mid, after)
    assert b.usage.prompt_tokens_details.cached_tokens == local * 16


# --- faults --------------------------------------------------------------------------------------------------------

def prefill_params(c, prompt):
    r = httpx.post(c.prefill[0].url + "/v1/completions", timeout=60, json={
        "prompt": prompt, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}})
    assert r.status_code == 200, r.text
    return r.json()["kv_transfer_params"]


def decode(c, prompt, params):
    return httpx.post(c.decode[0].url + "/v1/completions", timeout=60, json={
        "prompt": prompt, "max_tokens": 4, "temperature": 0, "kv_transfer_params": params})


def test_forged_params_get_400_and_leave_the_pool_alone(pd):
    prompt = "Forgery check: " + text(21, 80)
    good = prefill_params(pd, prompt)
    other = prefill_params(pd, "Someone else's prompt: " + text(22, 80))
    used_before = metric(pd.decode[0], "omnibus:kv_cache_blocks_used")
    cases = {
        "wrong type": dict(good, remote_block_ids="0,1,2"),
        "negative id": dict(good, remote_block_ids=[-1] + good["remote_block_ids"][1:]),
        "bad port": dict(good, remote_port=70000),
        "flag type": dict(good, do_remote_prefill="yes"),
        "not omnibus": {k: v for k, v in good.items() if k != "omnibus"},
        "other prompt's hashes": dict(good, omnibus=other["omnibus"], remote_block_ids=other["remote_block_ids"]),
        "other request's blocks": dict(good, remote_block_ids=other["remote_block_ids"][:len(good["remote_block_ids"])]),
        "unknown id": dict(good, remote_request_id="omnibus-" + "0" * 32),
        "incompatible": dict(good, omnibus=dict(good["omnibus"], compat=good["omnibus"]["compat"].replace(
            "kv_dtype=f16", "kv_dtype=q8"))),
    }
    for name, params in cases.items():
        r = decode(pd, prompt, params)
        assert r.status_code == 400, (name, r.status_code, r.text)
        assert "kv_transfer_params" in r.text, (name, r.text)
        if name not in ("not omnibus", "flag type"):  # what a decode worker acts on is signed by the prefill worker
            assert "not signed by a prefill worker of this deployment" in r.text, (name, r.text)
    # Signed again (a prefill worker of the deployment with a bug, or a stolen secret): the decode
    # worker's own checks behind the signature still refuse each of these.
    behind = {
        "other prompt's hashes": ("do not match this request's prompt",
                                  dict(good, omnibus=other["omnibus"], remote_block_ids=other["remote_block_ids"])),
        "unknown id": ("refused the transfer", dict(good, remote_request_id="omnibus-" + "0" * 32)),
        "incompatible": ("kv_dtype: prefill worker q8, this worker f16", cases["incompatible"]),
        "wrong type": ("remote_block_ids", cases["wrong type"]),
    }
    for name, (needle, params) in behind.items():
        r = decode(pd, prompt, sign_offer(params, pd.kv_secret()))
        assert r.status_code == 400 and needle in r.text, (name, r.status_code, r.text)
    assert metric(pd.decode[0], "omnibus:kv_cache_blocks_used") == used_before == 0
    # The genuine params still work after all that, once.
    r = decode(pd, prompt, good)
    assert r.status_code == 200, r.text
    assert decode(pd, prompt, good).status_code == 400  # used up
    assert httpx.post(pd.decode[0].url + "/v1/completions", timeout=60, json={
        "prompt": "x", "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}).status_code == 400
    wait_metric(pd.prefill[0], "omnibus:kv_transfer_pinned_blocks", 0)  # `other` timed out (2 s)


def test_unpulled_blocks_are_unpinned_at_the_timeout(pd):
    t0 = metric(pd.prefill[0], "omnibus:kv_transfer_timeouts_total")
    params = prefill_params(pd, "Never pulled: " + text(31, 90))
    assert metric(pd.prefill[0], "omnibus:kv_transfer_pinned_blocks") == len(params["remote_block_ids"]) > 0
    wait_metric(pd.prefill[0], "omnibus:kv_transfer_pinned_blocks", 0, timeout=10)
    assert metric(pd.prefill[0], "omnibus:kv_transfer_timeouts_total") == t0 + 1
    wait_metric(pd.prefill[0], "omnibus:kv_cache_blocks_used", 0)


def test_prefill_worker_gone_before_the_pull_means_computing_here(tmp_path):
    with PdCluster(prefill_args=WORKER_ARGS, decode_args=WORKER_ARGS, log_dir=tmp_path) as c:
        prompt = "Orphaned: " + text(41, 90)
        params = prefill_params(c, prompt)
        want = httpx.post(c.prefill[0].url + "/v1/completions", timeout=60,
                          json={"prompt": prompt, "max_tokens": 4, "temperature": 0}).json()["choices"][0]["text"]
        c.prefill[0].kill()
        r = decode(c, prompt, params)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == want
        assert metric(c.decode[0], "omnibus:kv_transfer_fallbacks_total") == 1
        assert metric(c.decode[0], "omnibus:kv_cache_blocks_used") == 0


def test_decode_worker_dying_mid_stream_leaves_nothing_pinned(tmp_path):
    with PdCluster(prefill_args=WORKER_ARGS + ["--kv-transfer-timeout", "3"], decode_args=WORKER_ARGS,
                   log_dir=tmp_path) as c:
        cl = client(c.url, timeout=30)
        s = cl.completions.create(model="m", prompt="Long story: " + text(51, 120), max_tokens=400,
                                  temperature=0, stream=True, extra_body={"ignore_eos": True})
        next(iter(s))
        c.decode[0].kill()
        with pytest.raises(Exception):
            for _ in s:
                pass
        wait_metric(c.prefill[0], "omnibus:kv_transfer_pinned_blocks", 0, timeout=10)
        wait_metric(c.prefill[0], "omnibus:kv_cache_blocks_used", 0)
        assert c.prefill[0].alive()


# --- network namespaces: UCX over TCP on veth pairs -----------------------------------------------------------------

def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.fixture
def routed_netns_pair():
    """Two namespaces, each joined to the test's namespace by a veth pair on its own /24 and routed
    through it (ip_forward), so they reach each other: yields ([ns_a, ns_b], [ip_a, ip_b])."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    tag = uuid.uuid4().hex[:6]
    made = []
    forward = open("/proc/sys/net/ipv4/ip_forward").read().strip()
    try:
        hosts = []
        for i in range(2):
            n = f"omd{tag}{i}"
            r = sh("ip", "netns", "add", n)
            if r.returncode != 0:
                pytest.skip(f"`ip netns add` failed: {r.stderr.strip()}")
            made.append(n)
            inner, outer = f"vd{tag}{i}w", f"vd{tag}{i}r"
            sub = f"10.{241 + i}.{int(tag[:2], 16)}"
            for s in [("ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", n),
                      ("ip", "-n", n, "addr", "add", f"{sub}.2/24", "dev", inner),
                      ("ip", "addr", "add", f"{sub}.1/24", "dev", outer),
                      ("ip", "-n", n, "link", "set", inner, "up"),
                      ("ip", "-n", n, "link", "set", "lo", "up"),
                      ("ip", "link", "set", outer, "up"),
                      ("ip", "-n", n, "route", "add", "default", "via", f"{sub}.1")]:
                r = sh(*s)
                if r.returncode != 0:
                    pytest.skip(f"`{' '.join(s)}` failed: {r.stderr.strip()}")
            hosts.append(f"{sub}.2")
        if sh("sysctl", "-qw", "net.ipv4.ip_forward=1").returncode != 0:
            pytest.skip("cannot enable ip_forward")
        yield made, hosts
    finally:
        sh("sysctl", "-qw", f"net.ipv4.ip_forward={forward}")
        for n in made:
            sh("ip", "netns", "del", n)
        for i in range(2):
            sh("ip", "link", "del", f"vd{tag}{i}r")


def test_workers_in_separate_network_namespaces(routed_netns_pair, tmp_path, monkeypatch):
    nss, hosts = routed_netns_pair
    monkeypatch.setenv("UCX_TLS", "tcp")  # across namespaces: the veth pairs, not shared memory
    roles = []
    for i, role in enumerate(["prefill", "decode"]):
        r = Replica(role, tmp_path, WORKER_ARGS + ["--kv-role", role, "--kv-transfer-host", hosts[i],
                                                   "--kv-transfer-port", str(free_port()),
                                                   *kv_security_args(tmp_path, peers=",".join(hosts))],
                    host=hosts[i], netns=nss[i])
        roles.append(r.start())
    from pd_harness import PdRouter
    router = PdRouter([roles[0].url], [roles[1].url], tmp_path)
    try:
        for r in roles:
            r.wait_ready()
        router.start()
        router.wait_ready()
        prompt = "Across namespaces: " + text(61, 80)
        via = client(router.url).completions.create(model="m", prompt=prompt, max_tokens=8, temperature=0)
        blocks = pulled_blocks(roles[1])
        assert blocks["pulled"] == (via.usage.prompt_tokens - 1) // 16 > 0, (blocks, roles[1].output())
        direct = client(roles[0].url).completions.create(model="m", prompt=prompt, max_tokens=8, temperature=0)
        assert via.choices[0].text == direct.choices[0].text
    finally:
        router.stop()
        for r in roles:
            r.stop()
