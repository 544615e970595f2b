// 64 streamed chat requests at once (up to 4 such bursts until one meets the
// limit) against a daemon started with
// --max-active-sequences=4 --max-queued-requests=8: each is either served to
// the end ("data: [DONE]") or refused with 429 and Retry-After, none hangs,
// and afterwards /metrics counts what the clients saw and its queue gauges
// are back to 0. Plain fetch(), so every status is seen as it is.
import { assert, apiKey, daemonUrl, runChecks } from './common.mjs';

const REQUESTS = 64;
const BURSTS = 4;
const url = daemonUrl();
const headers = { authorization: `Bearer ${apiKey()}`, 'content-type': 'application/json' };

async function streamedChat(i) {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers,
    body: JSON.stringify({
      messages: [{ role: 'user', content: `Request ${i}: tell me about the sea.` }],
      max_tokens: 200, temperature: 0, stream: true,
    }),
  });
  const body = await response.text();
  if (response.status === 200) {
    assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);
    assert.ok(body.endsWith('data: [DONE]\n\n'), `request ${i}: stream ended with ${
        JSON.stringify(body.slice(-80))}`);
    const events = body.split('\n\n').filter(Boolean);
    for (const event of events.slice(0, -1)) {
      const chunk = JSON.parse(event.replace(/^data: /, ''));
      assert.equal(chunk.object, 'chat.completion.chunk');
    }
    return 'ok';
  }
  assert.equal(response.status, 429, `request ${i}: status ${response.status}: ${body}`);
  const retryAfter = Number(response.headers.get('retry-after'));
  assert.ok(Number.isInteger(retryAfter) && retryAfter > 0,
            `request ${i}: Retry-After ${response.headers.get('retry-after')}`);
  const error = JSON.parse(body).error;
  assert.ok(error.message.length > 0);
  return 'rejected';
}

// {metric name -> [{labels, value}]} from Prometheus' text format.
function parseMetrics(text) {
  const metrics = {};
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    (metrics[m[1]] ??= []).push({ labels, value: Number(m[3]) });
  }
  return metrics;
}

const sample = (metrics, name, labels = {}) =>
  (metrics[name] ?? []).filter(s => Object.entries(labels).every(([k, v]) => s.labels[k] === v))
      .reduce((sum, s) => sum + s.value, 0);

const seen = { ok: 0, rejected: 0 };

await runChecks([
  [`${REQUESTS} concurrent streams: each 200 to [DONE] or 429`, async () => {
    // On a busy machine the client may send a burst more slowly than the
    // tiny model serves it, so that no request finds the queue full; up to
    // BURSTS bursts, until one does.
    let sent = 0;
    for (let burst = 0; burst < BURSTS && seen.rejected === 0; ++burst) {
      const outcomes = await Promise.all(
          Array.from({ length: REQUESTS }, (_, i) => streamedChat(sent + i)));
      for (const o of outcomes) seen[o] += 1;
      sent += REQUESTS;
      console.log(`     burst ${burst + 1}: served ${seen.ok}, refused ${seen.rejected} so far`);
    }
    assert.equal(seen.ok + seen.rejected, sent);
    assert.ok(seen.ok >= 4, 'fewer streams served than the active limit');
    assert.ok(seen.rejected > 0, `no request of ${sent} met the queue limit`);
  }],
  ['a request after the burst is served', async () => {
    assert.equal(await streamedChat(REQUESTS), 'ok');
    seen.ok += 1;
  }],
  ['/metrics counts what the clients saw; the queue is empty again', async () => {
    const probe = await fetch(`${url}/metrics`, { headers });
    assert.equal(probe.status, 200);
    let metrics = parseMetrics(await probe.text());
    // A stream's slot is given back just after its last byte; allow a moment.
    for (let i = 0; i < 50 && (sample(metrics, 'moetier_queue_active_sequences') !== 0 ||
                               sample(metrics, 'moetier_queue_waiting_requests') !== 0); ++i) {
      await new Promise(r => setTimeout(r, 100));
      metrics = parseMetrics(await (await fetch(`${url}/metrics`, { headers })).text());
    }
    const count = outcome =>
      sample(metrics, 'moetier_requests_total', { transport: 'http', outcome });
    assert.equal(count('ok'), seen.ok);
    assert.equal(count('rejected'), seen.rejected);
    for (const outcome of ['invalid', 'unauthorized', 'cancelled', 'error']) {
      assert.equal(count(outcome), 0, `outcome ${outcome}`);
    }
    assert.equal(sample(metrics, 'moetier_queue_active_sequences'), 0);
    assert.equal(sample(metrics, 'moetier_queue_waiting_requests'), 0);
  }],
]);
