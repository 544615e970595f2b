// moetierd's Anthropic Messages API (POST /v1/messages) as the official
// @anthropic-ai/sdk sees it: a whole message, a streamed one, and errors in
// Anthropic's shape. The daemon must serve with the key in MOETIER_API_KEY.
// Skipped (77) while the daemon has no /v1/messages route.
import { apiKey, assert, daemonUrl, expectError, importOrSkip, runChecks } from './common.mjs';

const Anthropic = await importOrSkip('@anthropic-ai/sdk');
const client = new Anthropic({ baseURL: daemonUrl(), apiKey: apiKey(), maxRetries: 0 });


const models = await (await fetch(`${daemonUrl()}/v1/models`,
                                  { headers: { authorization: `Bearer ${apiKey()}` } })).json();
const model = models.data[0].id;
const params = {
  model, max_tokens: 6, temperature: 0,
  messages: [{ role: 'user', content: 'Tell me about the sea.' }],
};
let wholeText = '';

await runChecks([
  ['messages.create: text content, usage, stop_reason max_tokens', async () => {
    const message = await client.messages.create(params);
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.ok(message.content.length >= 1);
    assert.equal(message.content[0].type, 'text');
    assert.equal(typeof message.content[0].text, 'string');
    assert.equal(message.stop_reason, 'max_tokens');
    assert.ok(message.usage.input_tokens > 0);
    assert.equal(message.usage.output_tokens, 6);
    wholeText = message.content[0].text;
  }],
  ['messages.stream: text events concatenate to the final text', async () => {
    let streamed = '';
    const stream = client.messages.stream(params);
    stream.on('text', (text) => { streamed += text; });
    const final = await stream.finalMessage();
    const finalText = final.content.filter(b => b.type === 'text').map(b => b.text).join('');
    assert.equal(streamed, finalText);
    assert.equal(finalText, wholeText);
    assert.equal(final.stop_reason, 'max_tokens');
    assert.equal(final.usage.output_tokens, 6);
  }],
  ['a bad request is a BadRequestError in Anthropic\'s shape', async () => {
    const e = await expectError(
        client.messages.create({ ...params, messages: 'hello' }), Anthropic.BadRequestError, 400);
    assert.equal(e.error?.type, 'error');
    assert.equal(e.error?.error?.type, 'invalid_request_error');
    assert.match(e.error?.error?.message ?? '', /messages/);
  }],
  ['a wrong key is an AuthenticationError', async () => {
    const stranger = new Anthropic({ baseURL: daemonUrl(), apiKey: 'not-a-key', maxRetries: 0 });
    await expectError(stranger.messages.create(params), Anthropic.AuthenticationError, 401);
  }],
]);
