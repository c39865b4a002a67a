// omnibus chat page: streams /v1/chat/completions (SSE) and polls
// /v1/engine/state for the engine panel. Plain browser JavaScript, no build step.
"use strict";

const $ = (id) => document.getElementById(id);
const conversation = [];           // [{role, content}] of the conversation so far
let controller = null;        // AbortController of the answer being streamed
let modelName = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api_key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  $("empty-hint")?.remove();
  const div = document.createElement("div");
  div.className = "msg " + role;
  const span = document.createElement("span");
  span.className = "text";
  span.textContent = text;
  div.appendChild(span);
  $("messages").appendChild(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

function numberField(id) {
  const v = $(id).value.trim();
  return v === "" ? undefined : Number(v);
}

function requestBody() {
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...conversation);
  const body = {
    messages, stream: true, stream_options: { include_usage: true },
    temperature: numberField("temperature"), top_p: numberField("top_p"), top_k: numberField("top_k"),
    max_tokens: numberField("max_tokens"), repetition_penalty: numberField("repetition_penalty"),
    seed: numberField("seed"),
  };
  if (modelName) body.model = modelName;
  const stops = $("stop_strings").value.split("\n").filter((s) => s.length > 0);
  if (stops.length) body.stop = stops;
  return body;
}

// Reads an SSE response, calling onEvent(parsed JSON) per `data:` event.
async function readSse(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, end);
      buf = buf.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onEvent(JSON.parse(data));
      }
    }
  }
}

async function send(text) {
  conversation.push({ role: "user", content: text });
  addMessage("user", text);
  const div = addMessage("assistant", "");
  div.classList.add("streaming");
  const span = div.querySelector(".text");
  const meta = document.createElement("div");
  meta.className = "meta";
  div.appendChild(meta);
  setBusy(true);
  controller = new AbortController();
  const t0 = performance.now();
  let tFirst = null, nChunks = 0, finish = null, usage = null;
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(requestBody()), signal: controller.signal,
    });
    if (!r.ok) {
      const err = await r.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || r.statusText);
    }
    await readSse(r, (chunk) => {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices || []) {
        if (c.delta && c.delta.content) {
          if (tFirst === null) tFirst = performance.now();
          span.textContent += c.delta.content;
          nChunks++;
          div.scrollIntoView({ block: "end" });
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    });
  } catch (e) {
    if (e.name === "AbortError") {
      finish = "stopped";
    } else {
      div.classList.add("error");
      span.textContent += (span.textContent ? "\n" : "") + "Error: " + e.message;
      finish = "error";
    }
  } finally {
    div.classList.remove("streaming");
    setBusy(false);
    controller = null;
  }
  conversation.push({ role: "assistant", content: span.textContent });
  const secs = (performance.now() - t0) / 1000;
  const n = usage ? usage.completion_tokens : nChunks;
  const ttft = tFirst === null ? "–" : ((tFirst - t0) / 1000).toFixed(2) + " s";
  meta.textContent = `${n} tokens · ${secs.toFixed(2)} s · ${(n / Math.max(secs, 1e-3)).toFixed(1)} tok/s · ` +
                     `first token ${ttft} · ${finish || "done"}`;
  div.dataset.finish = finish || "";
  div.classList.add("done");
}

// Without --api-key the engine's state is a debug endpoint (off unless
// --enable-debug-endpoints): then the page shows health and model only.
async function pollBasics() {
  const h = await fetch("/health");
  $("health").textContent = h.ok ? "ready" : "loading";
  $("health").className = "health " + (h.ok ? "ok" : "bad");
  if (h.ok && !modelName) {
    const m = await (await fetch("/v1/models", { headers: headers() })).json();
    if (m.data && m.data.length) {
      modelName = m.data[0].id;
      $("model-name").textContent = modelName;
    }
  }
  $("state-updated").textContent = "engine state: --enable-debug-endpoints or --api-key";
}

async function pollState() {
  try {
    const r = await fetch("/v1/engine/state", { headers: headers() });
    if (r.status === 404) return await pollBasics();
    const s = await r.json();
    if (!r.ok) throw new Error((s.error && s.error.message) || r.statusText);
    $("health").textContent = s.state;
    $("health").className = "health " + (s.state === "ready" ? "ok" : "bad");
    if (s.model && !modelName) {
      modelName = s.model;
      $("model-name").textContent = s.model;
    }
    if (s.state !== "loading") {
      $("state-running").textContent = s.num_requests_running;
      $("state-waiting").textContent = s.num_requests_waiting;
      $("state-kv").textContent = `${s.kv_blocks_used} / ${s.kv_blocks_total}`;
      $("state-tps").textContent = s.generation_tokens_per_s.toFixed(1);
      $("state-preemptions").textContent = s.num_preemptions;
      $("state-steps").textContent = s.engine_steps;
      $("state-tokens").textContent = s.generation_tokens_total;
      $("state-kv-bar").style.width = (100 * s.kv_cache_usage).toFixed(1) + "%";
    }
    $("state-updated").textContent = new Date().toLocaleTimeString();
  } catch (e) {
    $("health").textContent = "unreachable";
    $("health").className = "health bad";
  }
}

$("composer").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || controller) return;
  $("prompt").value = "";
  send(text);
});
$("prompt").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("clear").addEventListener("click", () => {
  if (controller) controller.abort();
  conversation.length = 0;
  $("messages").innerHTML = "";
});

pollState();
setInterval(pollState, 500);
