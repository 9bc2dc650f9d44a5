// The Vercel AI SDK against a running Grounded appliance: chat (generateText), streaming
// (streamText) and embeddings (embedMany) through @ai-sdk/openai's chat-completions model.
// Usage: node ai_sdk.mjs BASE_URL API_KEY QUESTION; prints one JSON object on stdout.
import { createOpenAI } from "@ai-sdk/openai";
import { embedMany, generateText, streamText } from "ai";

const [baseURL, apiKey, question] = process.argv.slice(2);
const provider = createOpenAI({ baseURL, apiKey });
const model = provider.chat("grounded");
const options = { model, prompt: question, maxOutputTokens: 80, temperature: 0, maxRetries: 0 };

const sourcesOf = (sources) =>
  sources.map(({ sourceType, url, title }) => ({ sourceType, url, title }));

const generated = await generateText(options);
const streamed = streamText({ ...options, onError: ({ error }) => { throw error; } });
let streamedText = "";
for await (const delta of streamed.textStream) streamedText += delta;
const embedded = await embedMany({
  model: provider.embedding("grounded"),
  values: ["annual leave", "power supply"],
  maxRetries: 0,
});

console.log(JSON.stringify({
  generate: {
    text: generated.text,
    finishReason: generated.finishReason,
    usage: generated.usage,
    sources: sourcesOf(generated.sources),
  },
  stream: {
    text: streamedText,
    finishReason: await streamed.finishReason,
    sources: sourcesOf(await streamed.sources),
  },
  embed: { dimensions: embedded.embeddings.map((e) => e.length) },
}));
