// Deno: Deno.serve with the fetch handler; @botdir/sdk from the project's node_modules.
import { createApp } from "./app.mjs";

const env = (name) => Deno.env.get(name);
const app = createApp({
  runtime: `deno ${Deno.version.deno}`,
  verifySecret: env("VERIFY_SECRET"),
  fetchSecret: env("FETCH_SECRET"),
  apiBase: env("API_BASE"),
  botId: env("BOT_ID"),
  token: env("BOT_TOKEN"),
});

Deno.serve({ hostname: "127.0.0.1", port: Number(env("PORT")), onListen() {} }, (request) =>
  app.handle(request),
);
