// hydra-serve benchmark (not a test): C concurrent streaming chat clients,
// each sending R requests one after the other; prints aggregate generated
// tokens per second over the phase and the time to first token (p50, p99,
// from sending a request to its first chunk, which the server sends at the
// first generated token).  No dependencies: node's own http module.
//
//   node tests/server/bench.cjs PORT CLIENTS REQUESTS MAX_TOKENS [PROMPT_WORDS]
'use strict';

const http = require('http');

const [port, clients, requests, maxTokens, promptWords = 32] = process.argv.slice(2).map(Number);
const words = 'the river runs past the old mill and under the stone bridge where children throw boats'.split(' ');

function prompt(c, r) {
  const out = [`client ${c} request ${r}:`];
  for (let i = 0; i < promptWords; i++) out.push(words[(c * 7 + r * 3 + i) % words.length]);
  return out.join(' ');
}

function once(c, r) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({
      messages: [{ role: 'user', content: prompt(c, r) }],
      max_tokens: maxTokens, ignore_eos: true, stream: true, stream_options: { include_usage: true },
    });
    const t0 = process.hrtime.bigint();
    let ttft = null, tokens = 0, buf = '';
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (res) => {
      if (res.statusCode !== 200) { reject(new Error(`status ${res.statusCode}`)); res.resume(); return; }
      res.setEncoding('utf8');
      res.on('data', (d) => {
        buf += d;
        let at;
        while ((at = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, at);
          buf = buf.slice(at + 2);
          if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
          const j = JSON.parse(ev.slice(6));
          if (j.usage) tokens = j.usage.completion_tokens;
          const ch = j.choices[0];
          if (ttft === null && ch) ttft = Number(process.hrtime.bigint() - t0) / 1e6;
        }
      });
      res.on('end', () => resolve({ ttft, tokens }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

async function main() {
  const t0 = process.hrtime.bigint();
  const results = await Promise.all(Array.from({ length: clients }, async (_, c) => {
    const out = [];
    for (let r = 0; r < requests; r++) out.push(await once(c, r));
    return out;
  }));
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const all = results.flat();
  const ttfts = all.map((x) => x.ttft).sort((a, b) => a - b);
  const tokens = all.reduce((s, x) => s + x.tokens, 0);
  console.log(JSON.stringify({
    clients, requests_each: requests, max_tokens: maxTokens, seconds: +seconds.toFixed(2), tokens,
    tokens_per_second: +(tokens / seconds).toFixed(2),
    ttft_p50_ms: +percentile(ttfts, 50).toFixed(1), ttft_p99_ms: +percentile(ttfts, 99).toFixed(1),
  }));
}

main().catch((e) => { console.error(e); process.exit(1); });
