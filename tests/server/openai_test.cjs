// hydra-serve through the official `openai` npm package, unmodified:
// models, chat and completions with and without streaming, include_usage,
// stop strings, seeds, max_tokens -> finish_reason "length", logprobs (chat
// and legacy completions), an API key accepted and a wrong one rejected, a
// 400 surfaced as BadRequestError.
//
//   node tests/server/openai_test.cjs PORT NODE_MODULES_DIR API_KEY
//
// Run by tests/test_server_openai.c against a server it started; prints one
// line per check and exits 0 when all pass, 1 otherwise.
'use strict';

const path = require('path');
const { OpenAI } = require(path.join(path.resolve(process.argv[3]), 'openai'));

const port = process.argv[2];
const key = process.argv[4];
const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ baseURL, apiKey: key, maxRetries: 0, timeout: 30000 });

let failures = 0;
function check(name, ok, detail) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : ': ' + detail}`);
  if (!ok) failures++;
}

const messages = [{ role: 'user', content: 'Tell me about the river and the mill.' }];
const prompt = 'The river runs past the old mill and under the stone bridge';

async function collect(stream) {
  let text = '', finish = null, usage = null, first = null, n = 0;
  for await (const chunk of stream) {
    n++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (first === null) first = c.delta ? c.delta.role : null;
    text += (c.delta ? c.delta.content : c.text) || '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish, usage, first, n };
}

async function main() {
  const models = await client.models.list();
  check('models.list', models.data.length === 1 && typeof models.data[0].id === 'string', JSON.stringify(models));

  const chat = await client.chat.completions.create({
    model: 'hydra', messages, max_tokens: 12, temperature: 0, ignore_eos: true,
  });
  const c0 = chat.choices[0];
  check('chat: length', c0.finish_reason === 'length' && chat.usage.completion_tokens === 12,
        JSON.stringify(chat));
  check('chat: shape', chat.object === 'chat.completion' && c0.message.role === 'assistant' &&
        typeof c0.message.content === 'string' && chat.usage.total_tokens ===
        chat.usage.prompt_tokens + chat.usage.completion_tokens, JSON.stringify(chat));

  const s = await collect(await client.chat.completions.create({
    model: 'hydra', messages, max_tokens: 12, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  }));
  check('chat stream = chat', s.text === c0.message.content && s.finish === 'length' && s.first === 'assistant',
        JSON.stringify(s));
  check('chat stream: include_usage', s.usage && s.usage.completion_tokens === 12 &&
        s.usage.prompt_tokens === chat.usage.prompt_tokens, JSON.stringify(s.usage));

  const comp = await client.completions.create({
    model: 'hydra', prompt, max_tokens: 30, temperature: 0, ignore_eos: true,
  });
  const text = comp.choices[0].text;
  check('completions', comp.object === 'text_completion' && comp.choices[0].finish_reason === 'length' &&
        comp.usage.completion_tokens === 30, JSON.stringify(comp));
  const cs = await collect(await client.completions.create({
    model: 'hydra', prompt, max_tokens: 30, temperature: 0, ignore_eos: true, stream: true,
  }));
  check('completions stream = completions', cs.text === text && cs.finish === 'length' && cs.usage === null,
        JSON.stringify(cs));

  // a stop string taken from the greedy text: the reply ends just before it
  const chars = [...text];
  const stop = chars.slice(Math.floor(chars.length / 2)).find((ch) => /[!-~]/.test(ch));
  if (stop !== undefined) {
    const stopped = await client.completions.create({
      model: 'hydra', prompt, max_tokens: 30, temperature: 0, ignore_eos: true, stop: [stop, 'never-here'],
    });
    const expect = text.slice(0, text.indexOf(stop));
    check('stop string', stopped.choices[0].text === expect && stopped.choices[0].finish_reason === 'stop',
          JSON.stringify({ stop, got: stopped.choices[0].text, expect }));
  } else {
    check('stop string', false, 'the greedy text has no ASCII character to stop at: ' + JSON.stringify(text));
  }

  const sampled = async (seed) => (await client.completions.create({
    model: 'hydra', prompt, max_tokens: 20, temperature: 1, top_p: 1, seed, ignore_eos: true,
  })).choices[0].text;
  const a = await sampled(7), b = await sampled(7);
  check('seed reproducibility', a === b, JSON.stringify({ a, b }));

  // logprobs in OpenAI's shapes: chat content entries, and the legacy completions arrays
  const lp = await client.chat.completions.create({
    model: 'hydra', messages, max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2,
  });
  const entries = lp.choices[0].logprobs && lp.choices[0].logprobs.content;
  check('chat logprobs', Array.isArray(entries) && entries.length === 4 && entries.every((e) =>
    typeof e.token === 'string' && e.logprob <= 0 && Array.isArray(e.bytes) && e.top_logprobs.length === 2 &&
    e.top_logprobs[0].token === e.token), JSON.stringify(lp.choices[0].logprobs));
  const clp = await client.completions.create({
    model: 'hydra', prompt, max_tokens: 3, temperature: 0, ignore_eos: true, logprobs: 1,
  });
  const legacy = clp.choices[0].logprobs;
  check('completions logprobs', legacy && legacy.tokens.length === 3 && legacy.token_logprobs.length === 3 &&
        legacy.top_logprobs.length === 3 && legacy.text_offset.length === 3, JSON.stringify(legacy));

  try {
    await client.chat.completions.create({ model: 'hydra', messages, temperature: 5 });
    check('400 surfaces', false, 'no error');
  } catch (e) {
    check('400 surfaces', e instanceof OpenAI.BadRequestError && /temperature/.test(e.message), String(e));
  }

  const wrong = new OpenAI({ baseURL, apiKey: key + 'x', maxRetries: 0 });
  try {
    await wrong.models.list();
    check('wrong API key rejected', false, 'no error');
  } catch (e) {
    check('wrong API key rejected', e instanceof OpenAI.AuthenticationError && e.status === 401, String(e));
  }
}

main().then(
  () => process.exit(failures ? 1 : 0),
  (e) => { console.log('FAIL unexpected error: ' + (e && e.stack ? e.stack : e)); process.exit(1); },
);
