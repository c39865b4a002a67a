"""`omnibus bench` engine mode: the --json report carries the keys scripts and
plots rely on (issue "The engine"), with values consistent with the workload."""
import json
import subprocess

from conftest import MODEL, ROOT, omnibus_bin

REQUIRED = ["num_requests", "duration_s", "request_throughput", "output_throughput", "ttft_ms", "tpot_ms",
            "itl_ms", "e2e_ms", "peak_kv_usage", "kv_waste", "preemptions", "mean_batch_size"]


def run_bench(tmp_path, *args):
    out = tmp_path / "bench.json"
    cmd = [omnibus_bin(), "bench", "-m", MODEL, "-t", "2", "--json", str(out)] + list(args)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text()), p.stdout


def test_engine_report_keys_and_phases(tmp_path):
    n, inp, outp = 6, 24, 8
    j, stdout = run_bench(tmp_path, "--num-requests", str(n), "--concurrency", str(n), "--input-len", str(inp),
                          "--output-len", str(outp), "--max-num-batched-tokens", str(n * inp))
    for k in REQUIRED:
        assert k in j, k
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(j[k]) >= {"p50", "p90", "p99", "mean"}
        assert 0 <= j[k]["p50"] <= j[k]["p90"] <= j[k]["p99"]
    assert j["num_requests"] == n
    assert j["total_output_tokens"] == n * outp
    assert abs(j["output_throughput"] - n * outp / j["duration_s"]) < 1e-6 * j["output_throughput"]
    assert j["preemptions"] == 0
    # The generation phase starts at the last first token: it holds at least
    # that request's other tokens and at most every request's (all prompts
    # fit one step's budget, but the engine may start before all are submitted).
    assert outp - 1 <= j["generation_phase_tokens"] <= n * (outp - 1)
    assert abs(j["prompt_phase_s"] + j["generation_phase_s"] - j["duration_s"]) < 1e-3
    assert j["generation_throughput"] > 0 and "generation phase" in stdout


def test_no_phase_split_for_poisson_arrivals(tmp_path):
    j, stdout = run_bench(tmp_path, "--num-requests", "3", "--request-rate", "50", "--input-len", "8",
                          "--output-len", "4")
    assert j["num_requests"] == 3 and j["total_output_tokens"] == 12
    assert "generation_throughput" not in j and "generation phase" not in stdout


def test_single_stream_at_depth(tmp_path):
    """--depth D (llama-bench's -d): pp and tg run after a D-token context the prefix cache
    serves (the bench fails if it does not); the report names the depth."""
    j, stdout = run_bench(tmp_path, "--pp", "32", "--tg", "8", "--depth", "600", "-r", "1")
    assert j["depth"] == 600 and j["pp"] == 32 and j["tg"] == 8
    assert j["pp_tok_s"] > 0 and j["tg_tok_s"] > 0
    assert "| pp32 @ d600 |" in stdout and "| tg8 @ d600 |" in stdout
    p = subprocess.run([omnibus_bin(), "bench", "-m", MODEL, "--pp", "8", "--tg", "0", "--depth", "64",
                        "--no-prefix-caching"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode != 0 and "--depth needs the prefix cache" in p.stderr


def test_long_prompt_arrival_report(tmp_path):
    """--long-prompt L: an L-token prompt arrives once the streams decode; the report splits the
    streams' ITL into before it came and while it waited, and gives its TTFT against the same
    length on the idle engine."""
    j, stdout = run_bench(tmp_path, "--num-requests", "3", "--concurrency", "3", "--input-len", "8",
                          "--output-len", "80", "--long-prompt", "400")
    lp = j["long_prompt"]
    assert lp["tokens"] == 400
    assert lp["ttft_ms"] > 0 and lp["ttft_alone_ms"] > 0
    assert abs(lp["ttft_ratio"] - lp["ttft_ms"] / lp["ttft_alone_ms"]) < 1e-9
    # Each of the 3 streams had 8 tokens before the arrival, decoding together for at least 3
    # intervals each after the last first token; some tokens came while
    # the long prompt waited (every step carries part of it, and the streams keep decoding).
    assert lp["itl_alone_samples"] >= 9 and lp["itl_during_samples"] >= 1
    assert 0 < lp["itl_alone_ms"]["p50"] <= lp["itl_alone_ms"]["p99"]
    assert "long prompt         400 tokens" in stdout
    assert j["total_output_tokens"] == 3 * 80  # the long prompt is not part of the workload


def expected_decode_bytes(path):
    """The file bytes a decode token reads, computed here with gguf-py: every tensor but an
    untied token embedding; of a mixture of experts' expert tensors, n_expert_used of n_expert."""
    from gguf import GGUFReader
    reader = GGUFReader(str(path))
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    def field(key):
        f = reader.fields.get(f"{arch}.{key}")
        return int(f.parts[-1][0]) if f is not None else 0
    n_expert, n_used = field("expert_count"), field("expert_used_count")
    untied = any(t.name == "output.weight" for t in reader.tensors)
    total = 0
    for t in reader.tensors:
        if untied and t.name == "token_embd.weight":
            continue
        total += int(t.n_bytes) // n_expert * n_used if n_expert and "_exps" in t.name else int(t.n_bytes)
    return total


def test_single_stream_read_probe(tmp_path):
    """--read-probe: a read probe after each timed tg run; the report's bytes a token match
    gguf-py's count for a tied head (SmolLM2), an untied one and a mixture of experts, and the ratio is the decode's
    GiB/s over the probe's, run by run; dense models also get the weights probe (the same loops over the packed
    weights' own pages)."""
    models = [(MODEL, ROOT / "models" / "smollm2-135m.gguf"),
              (str(ROOT / "models" / "random" / "llama3.gguf"), ROOT / "models" / "random" / "llama3.gguf"),
              (str(ROOT / "models" / "random" / "qwen3moe.gguf"), ROOT / "models" / "random" / "qwen3moe.gguf")]
    for model, path in models:
        out = tmp_path / "probe.json"
        p = subprocess.run([omnibus_bin(), "bench", "-m", model, "-t", "2", "--pp", "0", "--tg", "8", "-r", "2",
                            "--read-probe", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, p.stderr
        j = json.loads(out.read_text())
        assert j["decode_bytes_per_token"] == expected_decode_bytes(path), model
        assert len(j["read_probe_gib_s_all"]) == len(j["tg_gib_s_all"]) == len(j["tg_tok_s_all"]) == 2
        for tok_s, gib_s, probe, ratio in zip(j["tg_tok_s_all"], j["tg_gib_s_all"], j["read_probe_gib_s_all"],
                                              j["tg_of_read_probe_all"]):
            assert probe > 0
            assert abs(gib_s - tok_s * j["decode_bytes_per_token"] / 2**30) < 1e-9 * gib_s
            assert abs(ratio - gib_s / probe) < 1e-9 * ratio
        assert "weight stream" in p.stdout and "decode/probe" in p.stdout
        if "moe" in model:  # a token reads only its routed experts: no weights probe
            assert "weights_probe_gib_s_all" not in j and "weights probe" not in p.stdout
            continue
        # the weights probe: the same loops over the packed weights (the file's bytes a token
        # reads but the norms, in packed layouts a little larger), its ratio pass time x tok/s
        packed = j["packed_weight_bytes"]
        assert 0.95 <= packed / j["decode_bytes_per_token"] < 1.25, (model, packed)
        for tok_s, probe, ratio in zip(j["tg_tok_s_all"], j["weights_probe_gib_s_all"],
                                       j["tg_of_weights_probe_all"]):
            assert probe > 0
            assert abs(ratio - tok_s * packed / (probe * 2**30)) < 1e-9 * ratio
        assert "decode/weights probe" in p.stdout
