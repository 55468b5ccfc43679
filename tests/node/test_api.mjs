// The OpenAI API surface as applications use it, through the official `openai` client on the
// tiny synthetic model (random weights, so every guarantee here comes from the server, not the
// model): structured outputs that always parse and validate, strict and forced tool calls within
// the budget, logprobs, logit_bias and penalties, streamed n choices, GET /v1/models/{id}, and the
// Responses API (items, the SDK's stream events, previous_response_id, the store, a tool loop).
// Usage: node test_api.mjs OSPREY_BINARY
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { assert, finish, startServer, test } from "./harness.mjs";

const osprey = process.argv[2];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "osprey-api-"));
const modelDir = path.join(tmp, "tiny");
execFileSync(osprey, ["synth", "--preset", "tiny", "--seed", "3", "--out", modelDir, "--quiet"]);
const server = await startServer(osprey, modelDir, ["--max-batch", "16", "--max-seq-len", "1024"]);
const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
const model = "tiny";
const show = (x) => JSON.stringify(x);
const user = (content) => [{ role: "user", content }];

async function expectStatus(promise, status) {
  try {
    await promise;
  } catch (e) {
    assert(e.status === status, `expected HTTP ${status}, got ${e.status}: ${e.message}`);
    return e;
  }
  throw new Error(`expected HTTP ${status}, the request succeeded`);
}

// ------------------------------------------------------------------ schemas and a validator
// A seeded generator of schemas from the supported subset, and an independent validator.
function rng(seed) {
  let s = BigInt(seed) * 6364136223846793005n + 1442695040888963407n;
  return (n) => {
    s = (s * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
    return Number((s >> 33n) % BigInt(n));
  };
}
function randomSchema(pick, depth = 0) {
  const kind = depth >= 2 ? 2 + pick(7) : pick(9);
  switch (kind) {
    case 0: {
      const properties = {}, required = [];
      for (let i = 0, n = 1 + pick(3); i < n; ++i) {
        const name = ["id", "name", "score", "tags", "when", "ok"][pick(6)] + (i ? `_${i}` : "");
        properties[name] = randomSchema(pick, depth + 1);
        if (pick(3)) required.push(name);
      }
      return { type: "object", properties, required, additionalProperties: false };
    }
    case 1: {
      const s = { type: "array", items: randomSchema(pick, depth + 1), maxItems: 1 + pick(3) };
      if (pick(2)) s.minItems = 1;
      return s;
    }
    case 2: return { type: "string", maxLength: 3 + pick(10), ...(pick(2) ? { minLength: 1 } : {}) };
    case 3: return { type: "string", format: ["date", "uuid", "ipv4", "date-time"][pick(4)] };
    case 4: return { type: "integer", minimum: -50 + pick(50), maximum: 10 + pick(1000) };
    case 5: return { type: "number", ...(pick(2) ? { minimum: 0 } : {}) };
    case 6: return { enum: ["red", "green", 7, null] };
    case 7: return { anyOf: [{ type: "boolean" }, { type: "null" }, { const: "x" }] };
    default: return { type: ["string", "null"], maxLength: 6 };
  }
}
const formats = {
  date: /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/,
  uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
  ipv4: /^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/,
  "date-time": /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/,
};
function valid(v, s) {
  if (s.anyOf) return s.anyOf.some((a) => valid(v, a));
  if ("const" in s) return JSON.stringify(v) === JSON.stringify(s.const);
  if (s.enum) return s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v));
  if (Array.isArray(s.type)) return s.type.some((t) => valid(v, { ...s, type: t }));
  switch (s.type) {
    case "null": return v === null;
    case "boolean": return typeof v === "boolean";
    case "string": {
      if (typeof v !== "string") return false;
      const n = [...v].length;
      if (n < (s.minLength ?? 0) || (s.maxLength !== undefined && n > s.maxLength)) return false;
      return !s.format || formats[s.format].test(v);
    }
    case "integer": case "number":
      if (typeof v !== "number" || (s.type === "integer" && !Number.isInteger(v))) return false;
      return !(s.minimum !== undefined && v < s.minimum) && !(s.maximum !== undefined && v > s.maximum);
    case "array":
      return Array.isArray(v) && v.length >= (s.minItems ?? 0) && v.length <= (s.maxItems ?? Infinity) && v.every((x) => valid(x, s.items));
    case "object":
      return v !== null && typeof v === "object" && !Array.isArray(v) && (s.required ?? []).every((k) => k in v) &&
             Object.entries(v).every(([k, x]) => k in s.properties && valid(x, s.properties[k]));
  }
  return false;
}
function parseValid(text, schema, what) {
  let v;
  try {
    v = JSON.parse(text);
  } catch {
    throw new Error(`${what}: not JSON: ${show(text)}`);
  }
  assert(valid(v, schema), `${what}: ${show(text)} does not validate against ${show(schema)}`);
  return v;
}

// ------------------------------------------------------------------ structured outputs
await test("response_format json_schema: random schemas, random weights, seeded sampling: every answer parses and validates", async () => {
  const pick = rng(7);
  const jobs = [];
  for (let i = 0; i < 24; ++i) {
    const schema = { type: "object", properties: { v: randomSchema(pick) }, required: ["v"], additionalProperties: false };
    jobs.push(client.chat.completions.create({ model, messages: user(`case ${i}`), max_tokens: 300, temperature: 1, seed: i,
      response_format: { type: "json_schema", json_schema: { name: `s${i}`, strict: true, schema } } })
      .then((r) => {
        const c = r.choices[0];
        assert(c.finish_reason === "stop", `case ${i}: finish ${c.finish_reason}: ${show(c.message)}`);
        parseValid(c.message.content, schema, `case ${i}`);
      }));
  }
  await Promise.all(jobs);
});

await test("response_format json_object: a JSON object every time, streamed too", async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({ model, messages: user("json please"), max_tokens: 200, temperature: 1, seed,
                                                     response_format: { type: "json_object" } });
    const v = JSON.parse(r.choices[0].message.content);
    assert(v && typeof v === "object" && !Array.isArray(v), show(r.choices[0].message.content));
  }
  let text = "";
  for await (const c of await client.chat.completions.create({ model, messages: user("json"), max_tokens: 120, temperature: 1,
                                                               seed: 9, stream: true, response_format: { type: "json_object" } }))
    text += c.choices[0]?.delta?.content ?? "";
  assert(typeof JSON.parse(text) === "object", show(text));
});

const forecast = { type: "function", function: { name: "forecast", strict: true, description: "Weather forecast",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 30 }, unit: { enum: ["c", "f"] },
                days: { type: "integer", minimum: 1, maximum: 7 } }, required: ["city", "unit", "days"], additionalProperties: false } } };
const lookup = { type: "function", function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } }, required: ["q"] } } };

await test("a forced call to a strict tool arrives within 300 tokens with valid arguments (named and required)", async () => {
  for (const [seed, tool_choice] of [[1, { type: "function", function: { name: "forecast" } }], [2, "required"], [3, "required"]]) {
    const r = await client.chat.completions.create({ model, messages: user("weather?"), max_tokens: 300, temperature: 1, seed,
                                                     tools: [forecast, lookup], tool_choice });
    const c = r.choices[0];
    assert(c.finish_reason === "tool_calls" && c.message.tool_calls?.length === 1, show(c));
    const call = c.message.tool_calls[0].function;
    if (call.name === "forecast") parseValid(call.arguments, forecast.function.parameters, "forecast");
    else parseValid(call.arguments, { type: "object", properties: { q: { type: "string" } }, required: ["q"] }, "lookup");
    assert(r.usage.completion_tokens <= 300, show(r.usage));
  }
});

await test("unsupported schema keywords are a 400 naming the keyword and the field", async () => {
  const e1 = await expectStatus(client.chat.completions.create({ model, messages: user("x"), max_tokens: 5,
    response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", patternProperties: { a: {} } } } } }), 400);
  assert(e1.error?.param === "response_format" && /patternProperties/.test(e1.message), show(e1.error));
  const bad = structuredClone(forecast);
  bad.function.parameters.properties.city.pattern = "(?=lookahead)";
  const e2 = await expectStatus(client.chat.completions.create({ model, messages: user("x"), max_tokens: 5, tools: [bad] }), 400);
  assert(e2.error?.param === "tools[0].function.parameters" && /pattern/.test(e2.message), show(e2.error));
});

// ------------------------------------------------------------------ logprobs, logit_bias, penalties
await test("chat logprobs: one entry per answer token, the greedy token on top, the same when streamed", async () => {
  const req = { model, messages: user("x"), max_tokens: 60, temperature: 0, logprobs: true, top_logprobs: 3,
                response_format: { type: "json_object" } };
  const r = await client.chat.completions.create(req);
  const entries = r.choices[0].logprobs?.content ?? [];
  assert(entries.length > 0, show(r.choices[0]));
  assert(entries.map((e) => e.token).join("") === r.choices[0].message.content, "tokens do not spell the content");
  for (const e of entries) {
    assert(e.logprob <= 0 && e.top_logprobs.length === 3 && Array.isArray(e.bytes), show(e));
    assert(e.top_logprobs[0].token === e.token && Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6, show(e));
    assert(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob, show(e));
  }
  const streamed = [];
  for await (const c of await client.chat.completions.create({ ...req, stream: true }))
    streamed.push(...(c.choices[0]?.logprobs?.content ?? []));
  assert(show(streamed.map((e) => [e.token, e.logprob])) === show(entries.map((e) => [e.token, e.logprob])), "stream differs");
});

await test("completions logprobs: parallel arrays, one per token; greedy takes the top one", async () => {
  const r = await client.completions.create({ model, prompt: [1, 2, 3], max_tokens: 8, temperature: 0, ignore_eos: true, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  assert(lp.tokens.length === 8 && lp.token_logprobs.length === 8 && lp.top_logprobs.length === 8, show(lp));
  for (let i = 0; i < 8; ++i) {
    const top = Object.values(lp.top_logprobs[i]);
    assert(Math.abs(Math.max(...top) - lp.token_logprobs[i]) < 1e-6, `token ${i}: ${show(lp.top_logprobs[i])} vs ${lp.token_logprobs[i]}`);
  }
});

await test("logit_bias steers greedy decoding; frequency_penalty and presence_penalty count the tokens written", async () => {
  // "hello" (24912 in o200k) biased by +100: greedy writes it every time. The penalties then lower
  // its logit by p per earlier occurrence (frequency) or by p once it occurred (presence), which
  // the log probabilities show against any other token of the top list.
  const run = async (extra) => (await client.completions.create({ model, prompt: [1, 2, 3], max_tokens: 6, temperature: 0,
    ignore_eos: true, logprobs: 5, logit_bias: { 24912: 100 }, ...extra })).choices[0].logprobs;
  const plain = await run({});
  assert(plain.tokens.every((t) => t === "hello"), show(plain.tokens));
  for (const [field, p, lowered] of [["frequency_penalty", 1.5, (i) => 1.5 * i], ["presence_penalty", 2, (i) => (i > 0 ? 2 : 0)]]) {
    const pen = await run({ [field]: p });
    assert(pen.tokens.every((t) => t === "hello"), show(pen.tokens));
    for (let i = 0; i < 6; ++i) {
      const other = Object.keys(plain.top_logprobs[i]).find((k) => k !== "hello" && k in pen.top_logprobs[i]);
      assert(other !== undefined, `step ${i}: no common alternative`);
      const gap = (lp) => lp.top_logprobs[i]["hello"] - lp.top_logprobs[i][other];
      assert(Math.abs(gap(pen) - (gap(plain) - lowered(i))) < 1e-3, `${field} step ${i}: gap ${gap(pen)} vs ${gap(plain)} - ${lowered(i)}`);
    }
  }
});

// ------------------------------------------------------------------ n and models
await test("streamed n choices: each choice's stream equals the non-streamed choice", async () => {
  const req = { model, messages: user("hi"), max_tokens: 12, temperature: 1, seed: 5, n: 3 };
  const whole = await client.chat.completions.create(req);
  const text = ["", "", ""], reasoning = ["", "", ""], finishes = [];
  for await (const c of await client.chat.completions.create({ ...req, stream: true }))
    for (const ch of c.choices) {
      text[ch.index] += ch.delta?.content ?? "";
      reasoning[ch.index] += ch.delta?.reasoning_content ?? "";
      if (ch.finish_reason) finishes[ch.index] = ch.finish_reason;
    }
  for (let i = 0; i < 3; ++i) {
    const m = whole.choices[i].message;
    assert(text[i] === (m.content ?? "") && reasoning[i] === (m.reasoning_content ?? ""), `choice ${i}: ${show([text[i], m])}`);
    assert(finishes[i] === whole.choices[i].finish_reason, `choice ${i}: ${finishes[i]}`);
  }
});

await test("GET /v1/models/{id} gives the context length; an unknown id is a 404", async () => {
  const m = await client.models.retrieve(model);
  assert(m.id === model && m.context_length === 1024, show(m));
  await expectStatus(client.models.retrieve("nope"), 404);
});

// ------------------------------------------------------------------ Responses
await test("fields the server does not know are a 400 naming them; identifiers are accepted", async () => {
  // vLLM's sampling extras would change the answer: refused, not dropped.
  for (const extra of [{ min_p: 0.1 }, { repetition_penalty: 1.2 }, { guided_json: { type: "object" } }, { frobnicate: 1 }]) {
    const key = Object.keys(extra)[0];
    const e = await expectStatus(client.chat.completions.create({ model, messages: user("hi"), max_tokens: 2, ...extra }), 400);
    assert(e.error?.param === key && /Unrecognized request argument supplied/.test(e.message), show(e.error));
  }
  // Chat-only fields on raw completions, and completion-only ones on chat.
  const e1 = await expectStatus(client.completions.create({ model, prompt: "hi", max_tokens: 2, tools: [] }), 400);
  assert(e1.error?.param === "tools", show(e1.error));
  const e2 = await expectStatus(client.chat.completions.create({ model, messages: user("hi"), max_tokens: 2, suffix: "" }), 400);
  assert(e2.error?.param === "suffix", show(e2.error));
  // stream_options as OpenAI's API takes it: with stream true, include_usage, nothing unknown.
  const e3 = await expectStatus(client.chat.completions.create({ model, messages: user("hi"), max_tokens: 2,
                                                                 stream_options: { include_usage: true } }), 400);
  assert(e3.error?.param === "stream_options", show(e3.error));
  const e4 = await expectStatus(client.chat.completions.create({ model, messages: user("hi"), max_tokens: 2, stream: true,
                                                                 stream_options: { continuous_usage_stats: true } }), 400);
  assert(e4.error?.param === "stream_options.continuous_usage_stats", show(e4.error));
  // Identifiers change nothing in the answer and are accepted; so are osprey's own top_k and ignore_eos.
  const ok = await client.chat.completions.create({ model, messages: user("hi"), max_tokens: 2, user: "u1", metadata: { a: "b" },
                                                    prompt_cache_key: "k", safety_identifier: "s", top_k: 5, ignore_eos: true });
  assert(ok.choices.length === 1, show(ok));
  const okc = await client.completions.create({ model, prompt: "hi", max_tokens: 2, user: "u1", echo: false, top_k: 5 });
  assert(okc.choices.length === 1, show(okc));
});

await test("nested fields are honoured or refused by path; no refusal leaves a generation running", async () => {
  const fn = (extra = {}) => ({ type: "function", function: { name: "f", ...extra } });
  const cases = [
    // An invalid tool is refused with tool_choice none too (it once crashed the server).
    [{ tool_choice: "none", tools: [{ type: "function", function: {} }] }, "tools"],
    [{ tool_choice: "none", tools: ["x"] }, "tools"],
    [{ tools: [fn({ strict: "yes" })] }, "tools"],
    [{ tools: [fn({ zz: 1 })] }, "tools"],
    [{ tools: [fn()], tool_choice: { type: "function", function: { name: "f" }, zz: 1 } }, "tool_choice"],
    [{ reasoning: "high" }, "reasoning"],
    [{ reasoning_effort: "low", reasoning: { effort: "high" } }, "reasoning_effort"],
    [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object" }, zz: 1 } } }, "response_format"],
    [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object" }, strict: "maybe" } } }, "response_format"],
    [{ max_tokens: -5, max_completion_tokens: 2 }, "max_tokens"],
    [{ top_k: 4294967296 }, "top_k"],
    [{ user: 7 }, "user"],
    [{ metadata: { a: 5 } }, "metadata"],
    [{ messages: [{ role: "user", content: "hi", zzz: 1 }] }, "messages"],
    [{ messages: [{ role: "system", content: "x", name: "boss" }, { role: "user", content: "hi" }] }, "messages"],
  ];
  for (const [extra, param] of cases) {
    const e = await expectStatus(client.chat.completions.create({ model, messages: user("hi"), max_tokens: 2, ...extra }), 400);
    assert(e.error?.param === param, `${show(extra)}: ${show(e.error)}`);
  }
  const before = await (await fetch(`${server.base}/metrics`)).text();
  const count = (text) => Number(/^osprey_requests_total (\S+)/m.exec(text)[1]);
  for (const extra of [{ store: "no" }, { stream: "yes" }, { parallel_tool_calls: "no" }, { reasoning: { generate_summary: "detailed" } },
                       { text: { format: { type: "json_schema", name: "x", schema: { type: "object" }, zz: 1 } } },
                       { tools: [{ type: "function", name: "f", zz: 1 }] }])
    await expectStatus(client.responses.create({ model, input: "hi", max_output_tokens: 8, ...extra }), 400);
  // Errors the chat mapping finds name the Responses field the client sent.
  for (const [extra, param] of [[{ text: { format: { type: "xml" } } }, "text.format"], [{ max_output_tokens: 0 }, "max_output_tokens"],
                                [{ reasoning: { effort: "none" } }, "reasoning.effort"]]) {
    const e = await expectStatus(client.responses.create({ model, input: "hi", ...extra }), 400);
    assert(e.error?.param === param, `${show(extra)}: ${show(e.error)}`);
  }
  const after = await (await fetch(`${server.base}/metrics`)).text();
  assert(count(after) === count(before), `refused requests reached the engine: ${count(before)} -> ${count(after)}`);
  // What passes is honoured: a user's name, an assistant message as the SDK returns it, agreeing
  // max_tokens and max_completion_tokens.
  const ok = await client.chat.completions.create({ model, max_tokens: 2, max_completion_tokens: 2, messages: [
    { role: "user", content: "hi", name: "alice" }, { role: "assistant", content: "hello", refusal: null, audio: null, annotations: [] },
    { role: "user", content: "again" }] });
  assert(ok.choices.length === 1 && ok.usage.completion_tokens <= 2, show(ok));
});

await test("responses: items, usage with reasoning tokens, the store, GET and DELETE", async () => {
  const r = await client.responses.create({ model, input: "Hello", max_output_tokens: 40, temperature: 0, instructions: "Be brief." });
  assert(r.object === "response" && r.id.startsWith("resp_") && Array.isArray(r.output), show(r));
  assert(["completed", "incomplete"].includes(r.status), r.status);
  if (r.status === "incomplete") assert(r.incomplete_details?.reason === "max_output_tokens", show(r.incomplete_details));
  assert(r.usage.output_tokens <= 40 && r.usage.input_tokens > 0 && "reasoning_tokens" in r.usage.output_tokens_details, show(r.usage));
  for (const item of r.output) assert(["reasoning", "message", "function_call"].includes(item.type), show(item));
  const got = await client.responses.retrieve(r.id);
  assert(got.id === r.id && show(got.output) === show(r.output), "GET differs");
  await client.responses.delete(r.id);
  await expectStatus(client.responses.retrieve(r.id), 404);
  const unstored = await client.responses.create({ model, input: "x", max_output_tokens: 5, store: false });
  await expectStatus(client.responses.retrieve(unstored.id), 404);
  await expectStatus(client.responses.create({ model, input: "x", previous_response_id: "resp_missing" }), 404);
  const e = await expectStatus(client.responses.create({ model, input: "x", frobnicate: 1 }), 400);
  assert(e.error?.param === "frobnicate", show(e.error));
  await expectStatus(client.responses.create({ model, input: "x", tools: [{ type: "web_search" }] }), 400);
});

await test("responses stream: the SDK's event sequence, deltas that add up to the final items", async () => {
  const stream = await client.responses.create({ model, input: "json", max_output_tokens: 150, temperature: 1, seed: 4, stream: true,
                                                 text: { format: { type: "json_object" } } });
  const types = [];
  let seq = -1, text = "", reasoning = "", final = null;
  for await (const ev of stream) {
    types.push(ev.type);
    assert(ev.sequence_number === seq + 1, `sequence ${ev.sequence_number} after ${seq}`);
    seq = ev.sequence_number;
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.reasoning_text.delta") reasoning += ev.delta;
    if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
  }
  assert(types[0] === "response.created" && types[1] === "response.in_progress", show(types.slice(0, 3)));
  assert(final && types.at(-1).startsWith("response.") && final.status === "completed", show(types.slice(-3)));
  const msg = final.output.find((i) => i.type === "message");
  assert(msg && msg.content[0].text === text && typeof JSON.parse(text) === "object", show(msg));
  const rs = final.output.find((i) => i.type === "reasoning");
  assert(!rs || rs.content[0].text === reasoning, "reasoning deltas differ");
  const opened = types.filter((t) => t === "response.output_item.added").length;
  assert(opened === final.output.length && opened === types.filter((t) => t === "response.output_item.done").length, show(types));
});

await test("responses tool loop: a strict forced call, then function_call_output through previous_response_id", async () => {
  const tools = [{ type: "function", name: "forecast", strict: true, parameters: forecast.function.parameters }];
  const first = await client.responses.create({ model, input: "weather in Oslo?", tools, tool_choice: "required",
                                                max_output_tokens: 300, temperature: 1, seed: 11 });
  const call = first.output.find((i) => i.type === "function_call");
  assert(call && call.name === "forecast" && call.call_id.startsWith("call_"), show(first.output));
  parseValid(call.arguments, forecast.function.parameters, "forecast");
  const second = await client.responses.create({ model, previous_response_id: first.id, tools, max_output_tokens: 20, temperature: 0,
    input: [{ type: "function_call_output", call_id: call.call_id, output: "{\"temp\": 3}" }] });
  assert(second.previous_response_id === first.id, show(second));
  // The follow-up's prompt holds the first turn and the result.
  assert(second.usage.input_tokens > first.usage.input_tokens + 10, `${second.usage.input_tokens} vs ${first.usage.input_tokens}`);
  const streamedArgs = [];
  for await (const ev of await client.responses.create({ model, input: "again", tools, tool_choice: "required", max_output_tokens: 300,
                                                        temperature: 1, seed: 12, stream: true }))
    if (ev.type === "response.function_call_arguments.delta") streamedArgs.push(ev.delta);
    else if (ev.type === "response.function_call_arguments.done") parseValid(ev.arguments, forecast.function.parameters, "streamed");
  assert(streamedArgs.length > 0, "no argument deltas");
});

await test("speculative: a request field, refused where it cannot run, the same tokens where it can", async () => {
  await expectStatus(client.chat.completions.create({ model, messages: user("hi"), max_tokens: 4, speculative: true }), 400);
  const s = await startServer(osprey, modelDir, ["--max-seq-len", "1024", "--speculative", "ngram:3", "--speculative-default", "off"]);
  const c = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
  for (const bad of [{ speculative: "yes" }, { speculative: true, logprobs: true }, { speculative: true, response_format: { type: "json_object" } },
                     { speculative: true, logit_bias: { "5": 3 } }]) {
    const e = await expectStatus(c.chat.completions.create({ model, messages: user("hi"), max_tokens: 4, ...bad }), 400);
    assert(/speculative/.test(e.message), e.message);
  }
  const ask = (cl, extra) => cl.chat.completions.create({ model, messages: user("count: a b c a b c a b"), max_tokens: 40, temperature: 0, ...extra });
  const want = (await ask(client, {})).choices[0].message;
  for (const extra of [{ speculative: true }, { speculative: false }, {}]) {
    const got = (await ask(c, extra)).choices[0].message;
    assert(got.content === want.content && got.reasoning_content === want.reasoning_content, `${show(extra)}: ${show(got)} vs ${show(want)}`);
  }
  const r = await c.responses.create({ model, input: "hi", max_output_tokens: 8, temperature: 0, speculative: true });
  assert(r.status === "completed" || r.status === "incomplete", show(r));
  const m = await (await fetch(`${s.base}/metrics`)).text();
  assert(/^vllm:spec_decode_num_draft_tokens_total\{/m.test(m) && /^osprey_spec_decode_acceptance_rate /m.test(m), "spec metrics");
  s.proc.kill("SIGTERM");
});

finish();
