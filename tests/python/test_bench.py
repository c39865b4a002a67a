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
