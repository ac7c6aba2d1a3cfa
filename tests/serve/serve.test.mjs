// wren serve driven by OpenAI's official client (the `openai` package, pinned in
// package-lock.json). Each test starts its own server on a free loopback port (--port 0;
// the server prints the port it bound). Usage: node serve.test.mjs WREN_BINARY MODEL_DIR
import { spawn, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [wren, modelDir] = process.argv.slice(2);
if (!wren || !modelDir) throw new Error('usage: node serve.test.mjs WREN_BINARY MODEL_DIR');
const MODEL = modelDir.replace(/\/+$/, '').split('/').pop();

// ---- a server per test -------------------------------------------------------------------
async function startServer(args = []) {
  const proc = spawn(wren, ['serve', '-m', modelDir, '--port', '0', '-t', '1', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start: ' + log)), 60000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}: ${log}`)); });
  });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const base = `http://127.0.0.1:${port}`;
  return { proc, port, base, exited, log: () => log,
           client: (o = {}) => new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000, ...o }) };
}

async function stopServer(s, signal = 'SIGTERM') {
  s.proc.kill(signal);
  const r = await Promise.race([s.exited, new Promise((res) => setTimeout(() => res({ code: 'timeout' }), 30000))]);
  assert.equal(r.code, 0, `${signal}: the server must exit 0, got ${JSON.stringify(r)}; log:\n${s.log()}`);
}

function rssKiB(pid) {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
}

// The tokenizer's count, from `wren tokenizer encode` (one line per token).
function tokenCount(text) {
  if (text === '') return 0;
  const out = execFileSync(wren, ['tokenizer', 'encode', '-t', modelDir + '/tokenizer.json', text], { encoding: 'utf8' });
  return out.split('\n').filter((l) => l.length).length;
}

async function post(base, path, body, headers = {}) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers },
                                       body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });
const greedy = { model: MODEL, temperature: 0 };
const chatOf = (content, extra = {}) => ({ ...greedy, messages: [{ role: 'user', content }], ...extra });

async function streamed(client, body, kind) {
  const stream = await (kind === 'chat' ? client.chat.completions : client.completions).create({ ...body, stream: true });
  let text = '', last = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    last = chunk;
    const c = chunk.choices[0];
    if (c) text += kind === 'chat' ? (c.delta.content ?? '') : c.text;
  }
  return { text, last, chunks };
}

// ---- the API -----------------------------------------------------------------------------
test('completion, chat and streaming agree; usage is the tokenizer\'s count', async () => {
  const s = await startServer(['--parallel', '2']);
  try {
    const client = s.client();
    const prompt = 'Once upon a time, a little girl';
    const c = await client.completions.create({ ...greedy, prompt, max_tokens: 20 });
    assert.equal(c.object, 'text_completion');
    assert.equal(c.choices[0].finish_reason, 'length');
    assert.ok(c.choices[0].text.length > 0);
    assert.equal(c.usage.prompt_tokens, tokenCount(prompt));
    assert.equal(c.usage.completion_tokens, 20);
    assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + 20);
    const cs = await streamed(client, { ...greedy, prompt, max_tokens: 20 }, 'completion');
    assert.equal(cs.text, c.choices[0].text, 'completion chunks concatenate to the non-streamed text');
    assert.deepEqual(cs.last.usage, c.usage, 'the last chunk carries the usage');

    const user = 'Tell me a story about a dog.';
    const r = await client.chat.completions.create(chatOf(user, { max_tokens: 24 }));
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    const answer = r.choices[0].message.content;
    assert.ok(answer.length > 0);
    // The wren template (tokenizer_config.json): "<|endoftext|>" "User: " content "\n\nAssistant: ", each piece encoded alone.
    assert.equal(r.usage.prompt_tokens, 1 + tokenCount('User: ') + tokenCount(user) + tokenCount('\n\nAssistant: '));
    assert.ok(r.usage.completion_tokens <= 24 && r.usage.completion_tokens > 0);
    if (r.choices[0].finish_reason === 'length') assert.equal(r.usage.completion_tokens, 24);
    const st = await streamed(client, chatOf(user, { max_tokens: 24, stream_options: { include_usage: true } }), 'chat');
    assert.equal(st.text, answer, 'chat chunks concatenate to the non-streamed text');
    assert.ok(st.chunks > 2, 'streamed in pieces');
    assert.deepEqual({ ...st.last.usage }, { ...r.usage });
    assert.equal(st.last.choices[0].finish_reason, r.choices[0].finish_reason);

    // Stop strings: the text up to the stop string's first appearance, finish_reason "stop".
    const long = (await client.completions.create({ ...greedy, prompt, max_tokens: 40 })).choices[0].text;
    const stop = long.slice(12, 16);
    const cut = long.slice(0, long.indexOf(stop));
    const stopped = await client.completions.create({ ...greedy, prompt, max_tokens: 40, stop: [stop] });
    assert.equal(stopped.choices[0].text, cut);
    assert.equal(stopped.choices[0].finish_reason, 'stop');
    const stoppedStream = await streamed(client, { ...greedy, prompt, max_tokens: 40, stop }, 'completion');
    assert.equal(stoppedStream.text, cut);

    const models = await client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
    const health = await (await fetch(s.base + '/health')).json();
    assert.equal(health.status, 'ok');
    const metrics = await (await fetch(s.base + '/metrics')).text();
    for (const m of ['wren_requests_total{endpoint="/v1/chat/completions",status="200"} 2', 'wren_slots_total 2',
                     'wren_slots_busy 0', 'wren_queue_length 0', 'wren_completion_tokens_total', 'wren_decode_tokens_per_second',
                     'wren_prompt_tokens_total', 'wren_prompt_tokens_reused_total', 'wren_requests_rejected_total 0',
                     'wren_decode_steps_total', 'wren_longest_step_gap_seconds', 'wren_most_prompt_tokens_between_steps'])
      assert.ok(metrics.includes(m), `metrics lack ${m}:\n${metrics}`);
  } finally { await stopServer(s); }
});

test('a second chat turn continues from the slot\'s state', async () => {
  const s = await startServer(['--parallel', '2']);
  try {
    const client = s.client();
    const first = [{ role: 'user', content: 'Hello there' }];
    const a = await client.chat.completions.create({ ...greedy, messages: first, max_tokens: 12 });
    const second = [...first, a.choices[0].message, { role: 'user', content: 'And then?' }];
    const b = await client.chat.completions.create({ ...greedy, messages: second, max_tokens: 12 });
    const cached = b.usage.prompt_tokens_details.cached_tokens;
    console.log(`    turn 2: ${b.usage.prompt_tokens} prompt tokens, ${cached} from the slot's state`);
    assert.ok(cached > a.usage.prompt_tokens, `turn 2 reused ${cached} tokens, expected more than turn 1's prompt`);
    // The same conversation on a server that never saw turn 1 answers the same.
    const fresh = await startServer(['--parallel', '1']);
    try {
      const c = await fresh.client().chat.completions.create({ ...greedy, messages: second, max_tokens: 12 });
      assert.equal(c.usage.prompt_tokens_details.cached_tokens, 0);
      assert.equal(c.choices[0].message.content, b.choices[0].message.content);
    } finally { await stopServer(fresh, 'SIGINT'); }
  } finally { await stopServer(s); }
});

// ---- robustness --------------------------------------------------------------------------
test('8 concurrent clients of mixed lengths each get what the request gets alone', async () => {
  const s = await startServer(['--parallel', '4', '--queue', '16']);
  try {
    const client = s.client();
    const words = 'the cat sat on a mat and looked at the big red ball in the garden'.split(' ');
    const requests = Array.from({ length: 8 }, (_, i) => ({
      ...greedy, prompt: words.slice(0, 2 + ((i * 5) % words.length)).join(' '), max_tokens: 6 + ((i * 13) % 40) }));
    const alone = [];
    for (const r of requests) alone.push((await client.completions.create(r)).choices[0].text);
    const rss0 = rssKiB(s.proc.pid);
    const t0 = Date.now();
    let rounds = 0;
    while (rounds < 3 && Date.now() - t0 < 60000) {  // bounded in time
      const together = await Promise.all(requests.map((r, i) =>
        i % 2 ? streamed(client, r, 'completion').then((x) => x.text)
              : client.completions.create(r).then((x) => x.choices[0].text)));
      together.forEach((t, i) => assert.equal(t, alone[i], `request ${i} (round ${rounds})`));
      rounds++;
    }
    const rss1 = rssKiB(s.proc.pid);
    // Prompts arrived while other streams decoded: each waited for one chunk (8 tokens) at most.
    const metrics = await (await fetch(s.base + '/metrics')).text();
    const between = Number(/wren_most_prompt_tokens_between_steps (\d+)/.exec(metrics)[1]);
    const gap = Number(/wren_longest_step_gap_seconds ([\d.e+-]+)/.exec(metrics)[1]);
    assert.ok(between >= 1 && between <= 8, `a running stream waited for ${between} prompt tokens between two steps`);
    console.log(`    ${rounds} rounds of 8 clients; RSS ${rss0} KiB before, ${rss1} KiB after; ` +
                `a stream waited at most ${between} prompt tokens, ${(gap * 1000).toFixed(1)} ms, between two tokens`);
    assert.ok(rss1 < rss0 * 1.5 + 32768, `RSS grew from ${rss0} to ${rss1} KiB`);
  } finally { await stopServer(s); }
});

test('bad requests are 400s naming the field; the server stays up', async () => {
  const s = await startServer(['--ctx-size', '256', '--max-body', '65536']);
  try {
    const rss0 = rssKiB(s.proc.pid);
    const cases = [
      ['{"messages": [', null], ['[1]', null], ['{}', 'messages'],
      [{ messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }, 'temperature'],
      [{ messages: [{ role: 'user', content: 'x' }], max_tokens: '7' }, 'max_tokens'],
      [{ messages: [{ role: 'user', content: 'x' }], stop: [1] }, 'stop[0]'],
      [{ messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
      [{ messages: [{ role: 'user', content: 'x' }], model: 'gpt-4' }, 'model'],
      [{ messages: [{ role: 'user', content: 'x' }], max_tokens: 100000 }, 'max_tokens'],
    ];
    for (const [body, param] of cases) {
      const r = await post(s.base, '/v1/chat/completions', body);
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
      assert.equal(r.json.error.param, param, r.text);
      assert.equal(r.json.error.type, 'invalid_request_error');
      assert.ok(r.json.error.message.length > 0);
    }
    // A prompt past the context: 400 with both numbers.
    const n = tokenCount('once upon a time '.repeat(100));
    const big = await post(s.base, '/v1/completions', { prompt: 'once upon a time '.repeat(100) });
    assert.equal(big.status, 400, big.text);
    assert.equal(big.json.error.param, 'prompt');
    assert.ok(big.json.error.message.includes(String(n)) && big.json.error.message.includes('256'), big.json.error.message);
    // The client sees the same as an exception with the status.
    await assert.rejects(s.client().completions.create({ model: MODEL, prompt: 'once '.repeat(400) }), (e) => e.status === 400);
    const huge = await post(s.base, '/v1/completions', JSON.stringify({ prompt: 'x'.repeat(100000) }));
    assert.equal(huge.status, 413);
    assert.ok(huge.json.error.message.includes('larger'), huge.text);
    const nowhere = await post(s.base, '/v1/nothing', {});
    assert.equal(nowhere.status, 404);
    assert.ok(nowhere.json.error);
    const ok = await s.client().completions.create({ ...greedy, prompt: 'Once', max_tokens: 4 });
    assert.equal(ok.usage.completion_tokens, 4);
    console.log(`    RSS ${rss0} KiB before, ${rssKiB(s.proc.pid)} KiB after`);
  } finally { await stopServer(s); }
});

test('a client that disconnects mid-stream frees its slot', async () => {
  const s = await startServer(['--parallel', '1', '--queue', '4']);
  try {
    const controller = new AbortController();
    const stream = await s.client().completions.create(
      { ...greedy, prompt: 'Once', max_tokens: 900, stream: true }, { signal: controller.signal });
    let chunks = 0;
    try {
      for await (const _ of stream) if (++chunks === 3) controller.abort();
    } catch (e) { assert.ok(e.name.includes('Abort') || String(e).includes('abort'), String(e)); }
    // The one slot is free again at the next step: a new request completes, and the slot's
    // generation stopped long before its 900 tokens.
    const r = await s.client().completions.create({ ...greedy, prompt: 'Then', max_tokens: 5 });
    assert.equal(r.usage.completion_tokens, 5);
    const metrics = await (await fetch(s.base + '/metrics')).text();
    const generated = Number(/wren_completion_tokens_total (\d+)/.exec(metrics)[1]);
    assert.ok(generated < 400, `the abandoned stream kept generating: ${generated} tokens`);
    assert.ok(metrics.includes('wren_slots_busy 0'), metrics);
  } finally { await stopServer(s); }
});

test('a full queue answers 503; the server stays up', async () => {
  const s = await startServer(['--parallel', '1', '--queue', '1']);
  try {
    const client = s.client();
    const results = await Promise.allSettled(Array.from({ length: 6 }, () =>
      client.completions.create({ ...greedy, prompt: 'Once', max_tokens: 150 })));
    const refused = results.filter((r) => r.status === 'rejected');
    const served = results.filter((r) => r.status === 'fulfilled');
    assert.ok(refused.length >= 1 && served.length >= 1, JSON.stringify(results.map((r) => r.status)));
    for (const r of refused) assert.equal(r.reason.status, 503, String(r.reason));
    const metrics = await (await fetch(s.base + '/metrics')).text();
    assert.ok(metrics.includes(`wren_requests_rejected_total ${refused.length}`), metrics);
    assert.equal((await client.completions.create({ ...greedy, prompt: 'Once', max_tokens: 3 })).usage.completion_tokens, 3);
  } finally { await stopServer(s); }
});

test('--api-key requires the bearer token', async () => {
  const s = await startServer(['--api-key', 'sesame']);
  try {
    await assert.rejects(s.client().models.list(), (e) => e.status === 401);
    await assert.rejects(s.client({ apiKey: 'wrong' }).models.list(), (e) => e.status === 401);
    const ok = await s.client({ apiKey: 'sesame' }).completions.create({ ...greedy, prompt: 'Once', max_tokens: 2 });
    assert.equal(ok.usage.completion_tokens, 2);
    assert.equal((await fetch(s.base + '/health')).status, 200);
  } finally { await stopServer(s, 'SIGINT'); }
});

test('SIGTERM during a stream: the server cancels it and exits 0', async () => {
  const s = await startServer();
  const stream = await s.client().completions.create({ ...greedy, prompt: 'Once', max_tokens: 900, stream: true });
  let chunks = 0;
  const reading = (async () => { try { for await (const _ of stream) chunks++; } catch { /* cut off */ } })();
  while (chunks < 2) await new Promise((r) => setTimeout(r, 20));
  await stopServer(s, 'SIGTERM');
  await reading;
});

test('an unknown chat template is an error at start-up', async () => {
  await assert.rejects(startServer(['--chat-template', 'nonesuch']), /nonesuch.*chatml/);
});

// ---- run ---------------------------------------------------------------------------------
let failed = 0;
for (const { name, fn } of tests) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}\n${e.stack}`);
  }
}
console.log(failed ? `${failed} of ${tests.length} failed` : `all ${tests.length} passed`);
process.exit(failed ? 1 : 0);
