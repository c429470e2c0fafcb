// The openai npm package on Node, pointed at a gateway: a plain call, a stream, a tool call.
//   node node_openai.mjs BASE_URL MODEL      (NODE_PATH: the npm folder's node_modules)
// prints one JSON object of what it got; exits 1 on failure.
import OpenAI from "openai";

const [base, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "none", maxRetries: 0 });
const ask = [{ role: "user", content: "Say something about rivers." }];
try {
  const plain = await client.chat.completions.create({ model, messages: ask, max_tokens: 16 });
  let streamed = "";
  const stream = await client.chat.completions.create({ model, messages: ask, max_tokens: 16, stream: true });
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
  const called = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "What is the weather in Oslo?" }],
    tools: [{ type: "function", function: { name: "get_weather", parameters: {
      type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }],
  });
  const call = called.choices[0].message.tool_calls[0];
  const response = await client.responses.create({ model, input: "Hello", max_output_tokens: 16 });
  console.log(JSON.stringify({ plain: plain.choices[0].message.content, stream: streamed,
    tool: [call.function.name], tool_id: call.id, responses: response.output_text }));
} catch (err) {
  console.log(JSON.stringify({ error: String(err) }));
  process.exit(1);
}
