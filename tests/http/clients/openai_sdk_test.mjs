// moetierd's OpenAI-compatible API as the official `openai` client sees it:
// models, chat completions whole and streamed, logprobs, stop strings,
// legacy completions, and the errors the client maps to its exceptions.
// The daemon must serve with the key in MOETIER_API_KEY.
import { apiKey, assert, daemonUrl, expectError, importOrSkip, runChecks } from './common.mjs';

const OpenAI = await importOrSkip('openai');
const client = new OpenAI({ baseURL: `${daemonUrl()}/v1`, apiKey: apiKey(), maxRetries: 0 });

const greedy = { temperature: 0, seed: 7 };
const userTurn = [{ role: 'user', content: 'Tell me about the sea.' }];
let model = '';
let wholeAnswer = null;  // the non-streamed greedy chat answer

async function streamedChatText(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  let text = '';
  const chunks = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    for (const choice of chunk.choices) text += choice.delta?.content ?? '';
  }
  return { text, chunks };
}

// A run of plain ASCII letters/digits inside `text` after its start, so the
// stop string is not split by replaced invalid UTF-8.
function asciiStopIn(text) {
  const match = /[A-Za-z0-9_]{2,}/g;
  for (const m of text.matchAll(match)) {
    if (m.index > 0) return m[0].slice(0, 3);
  }
  return null;
}

await runChecks([
  ['models.list names one model', async () => {
    const models = [];
    for await (const m of client.models.list()) models.push(m);
    assert.equal(models.length, 1);
    assert.equal(models[0].object, 'model');
    assert.ok(models[0].id.length > 0);
    model = models[0].id;
  }],
  ['chat.completions.create: usage and finish_reason length', async () => {
    const answer = await client.chat.completions.create(
        { model, messages: userTurn, max_tokens: 6, ...greedy });
    assert.equal(answer.object, 'chat.completion');
    assert.equal(answer.model, model);
    assert.equal(answer.choices.length, 1);
    const choice = answer.choices[0];
    assert.equal(choice.finish_reason, 'length');
    assert.equal(choice.message.role, 'assistant');
    assert.equal(typeof choice.message.content, 'string');
    assert.ok(choice.message.content.length > 0);
    assert.equal(answer.usage.completion_tokens, 6);
    assert.ok(answer.usage.prompt_tokens > 0);
    assert.equal(answer.usage.total_tokens,
                 answer.usage.prompt_tokens + answer.usage.completion_tokens);
    wholeAnswer = answer;
  }],
  ['max_completion_tokens is honoured like max_tokens', async () => {
    const answer = await client.chat.completions.create(
        { model, messages: userTurn, max_completion_tokens: 3, ...greedy });
    assert.equal(answer.usage.completion_tokens, 3);
    assert.equal(answer.choices[0].finish_reason, 'length');
  }],
  ['streamed chat concatenates to the greedy answer, with a usage chunk', async () => {
    const { text, chunks } = await streamedChatText({
      model, messages: userTurn, max_tokens: 6, ...greedy,
      stream_options: { include_usage: true },
    });
    assert.equal(text, wholeAnswer.choices[0].message.content);
    const finishes = chunks.flatMap(c => c.choices).map(c => c.finish_reason).filter(Boolean);
    assert.deepEqual(finishes, ['length']);
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 6);
    assert.equal(last.usage.prompt_tokens, wholeAnswer.usage.prompt_tokens);
    for (const c of chunks.slice(0, -1)) assert.equal(c.usage ?? null, null);
    assert.ok(chunks.every(c => c.id === chunks[0].id && c.object === 'chat.completion.chunk'));
  }],
  ['logprobs with top_logprobs 3', async () => {
    const answer = await client.chat.completions.create({
      model, messages: userTurn, max_tokens: 4, ...greedy, logprobs: true, top_logprobs: 3,
    });
    const entries = answer.choices[0].logprobs.content;
    assert.equal(entries.length, 4);
    for (const entry of entries) {
      assert.ok(entry.logprob <= 0, `logprob ${entry.logprob} > 0`);
      assert.equal(entry.top_logprobs.length, 3);
      for (const alt of entry.top_logprobs) assert.ok(alt.logprob <= 0);
      // Greedy: the chosen token is the likeliest one.
      assert.ok(Math.abs(entry.logprob - entry.top_logprobs[0].logprob) < 1e-4,
                `chosen ${entry.logprob} vs best ${entry.top_logprobs[0].logprob}`);
      assert.ok(Array.isArray(entry.bytes));
    }
  }],
  ['a stop string cuts the answer before it', async () => {
    const long = await client.chat.completions.create(
        { model, messages: userTurn, max_tokens: 24, ...greedy });
    const text = long.choices[0].message.content;
    const stop = asciiStopIn(text);
    assert.ok(stop, `no ASCII run to stop at in ${JSON.stringify(text)}`);
    const answer = await client.chat.completions.create(
        { model, messages: userTurn, max_tokens: 24, ...greedy, stop: [stop] });
    const content = answer.choices[0].message.content;
    assert.ok(!content.includes(stop), `${JSON.stringify(content)} contains ${stop}`);
    assert.equal(content, text.slice(0, text.indexOf(stop)));
    assert.equal(answer.choices[0].finish_reason, 'stop');
    const streamed = await streamedChatText(
        { model, messages: userTurn, max_tokens: 24, ...greedy, stop });
    assert.equal(streamed.text, content);
  }],
  ['completions.create whole and streamed agree', async () => {
    const params = { model, prompt: 'Once upon a time', max_tokens: 5, ...greedy };
    const whole = await client.completions.create(params);
    assert.equal(whole.object, 'text_completion');
    assert.equal(whole.choices[0].finish_reason, 'length');
    assert.equal(typeof whole.choices[0].text, 'string');
    assert.equal(whole.usage.completion_tokens, 5);
    const stream = await client.completions.create({ ...params, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    assert.equal(text, whole.choices[0].text);
  }],
  ['a bad request is a BadRequestError naming the field', async () => {
    const e = await expectError(
        client.chat.completions.create({ model, messages: 'hello', ...greedy }),
        OpenAI.BadRequestError, 400);
    assert.match(e.message, /messages/);
  }],
  ['max_tokens far above the limit is a 400', async () => {
    const e = await expectError(
        client.chat.completions.create({ model, messages: userTurn, max_tokens: 1000000000 }),
        OpenAI.BadRequestError, 400);
    assert.match(e.message, /max_new_tokens|max_tokens|limit/);
  }],
  ['a wrong key is an AuthenticationError', async () => {
    const stranger = new OpenAI({ baseURL: `${daemonUrl()}/v1`, apiKey: 'not-a-key',
                                  maxRetries: 0 });
    await expectError(stranger.models.list(), OpenAI.AuthenticationError, 401);
    await expectError(
        stranger.chat.completions.create({ model, messages: userTurn, max_tokens: 2 }),
        OpenAI.AuthenticationError, 401);
  }],
]);
