// Bun: Bun.serve with the fetch handler.
import { createApp } from "./app.mjs";

const app = createApp({
  runtime: `bun ${Bun.version}`,
  verifySecret: process.env.VERIFY_SECRET,
  fetchSecret: process.env.FETCH_SECRET,
  apiBase: process.env.API_BASE,
  botId: process.env.BOT_ID,
  token: process.env.BOT_TOKEN,
});

Bun.serve({ hostname: "127.0.0.1", port: Number(process.env.PORT), fetch: (request) => app.handle(request) });
