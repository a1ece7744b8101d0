// The official `openai` npm client against `dsinfer serve` on the tiny model: chat (whole and
// streamed), text completions, max_tokens, stop sequences, tools accepted, a forced tool choice,
// log-probabilities, reasoning content, and the client's error classes for 400 / 401 / 404. Run by tests/e2e/openai_client.sh.
import OpenAI from "openai";
import assert from "node:assert/strict";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey });
const user = (content) => [{ role: "user", content }];
const noThinking = { thinking: { type: "disabled" } };

async function main() {
  const models = await client.models.list();
  assert.equal(models.data[0].id, "dsinfer");

  // Whole and streamed chat agree at temperature 0; the budget is respected.
  const whole = await client.chat.completions.create({
    model: "dsinfer", messages: user("Once upon a time"), max_tokens: 12, temperature: 0, ...noThinking,
  });
  assert.equal(whole.object, "chat.completion");
  assert.equal(whole.usage.completion_tokens <= 12, true);
  const content = whole.choices[0].message.content;
  assert.equal(typeof content, "string");
  let streamed = "";
  let finish = null;
  let usage = null;
  const stream = await client.chat.completions.create({
    model: "dsinfer", messages: user("Once upon a time"), max_tokens: 12, temperature: 0, stream: true,
    stream_options: { include_usage: true }, ...noThinking,
  });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    streamed += chunk.choices[0].delta.content ?? "";
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(streamed, content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.deepEqual(usage, whole.usage);

  // A stop sequence taken from that text cuts the output just before it.
  if (content.length > 6) {
    const stop = content.slice(3, 6);
    const cut = await client.chat.completions.create({
      model: "dsinfer", messages: user("Once upon a time"), max_tokens: 12, temperature: 0, stop: [stop], ...noThinking,
    });
    assert.equal(cut.choices[0].message.content, content.slice(0, content.indexOf(stop)));
  }

  // Thinking mode: the reasoning comes apart from the answer; tools are accepted.
  const thought = await client.chat.completions.create({
    model: "dsinfer", messages: user("What is 2 + 2?"), max_tokens: 8, temperature: 0,
    tools: [{ type: "function", function: { name: "add", parameters: { type: "object", properties: {} } } }],
  });
  assert.equal(typeof thought.choices[0].message.reasoning_content, "string");

  // Log-probabilities: one entry per generated token, each with its alternatives.
  const scored = await client.chat.completions.create({
    model: "dsinfer", messages: user("Once upon a time"), max_tokens: 6, temperature: 0, logprobs: true,
    top_logprobs: 2, ...noThinking,
  });
  const entries = scored.choices[0].logprobs.content;
  assert.equal(entries.length, scored.usage.completion_tokens);
  for (const e of entries) {
    assert.equal(e.logprob <= 0, true);
    assert.equal(e.top_logprobs.length, 2);
  }

  // A named tool choice: the reply opens that call (random weights rarely complete it well-formed).
  const forced = await client.chat.completions.create({
    model: "dsinfer", messages: user("Look it up"), max_tokens: 80, temperature: 0, ...noThinking,
    tools: [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } }],
    tool_choice: { type: "function", function: { name: "lookup" } },
  });
  const reply = forced.choices[0].message;
  assert.equal(reply.tool_calls?.[0]?.function?.name === "lookup" ||
               reply.content.includes('<｜DSML｜ invoke name="lookup">'), true);

  // Text completions.
  const text = await client.completions.create({ model: "dsinfer", prompt: "Once", max_tokens: 5, temperature: 0 });
  assert.equal(text.object, "text_completion");
  assert.equal(text.usage.completion_tokens <= 5, true);

  // Errors come back as the client's error classes.
  await assert.rejects(
    client.chat.completions.create({ model: "dsinfer", messages: user("hi"), top_p: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && /top_p/.test(e.message));
  await assert.rejects(
    client.chat.completions.create({ model: "someone-else", messages: user("hi") }),
    (e) => e instanceof OpenAI.NotFoundError);
  const stranger = new OpenAI({ baseURL, apiKey: "wrong" });
  await assert.rejects(stranger.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  console.log("openai client: all checks passed");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
