// workerd (Cloudflare Workers): a module worker; its secrets and settings are the worker's
// bindings (env), as `wrangler secret put` gives them on Cloudflare.
import { createApp } from "./app.mjs";

let app;

// biome-ignore lint/style/noDefaultExport: a module worker's handlers are its default export
export default {
  fetch(request, env, ctx) {
    app ??= createApp({
      runtime: "workerd",
      verifySecret: env.VERIFY_SECRET,
      fetchSecret: env.FETCH_SECRET,
      apiBase: env.API_BASE,
      botId: env.BOT_ID,
      token: env.BOT_TOKEN,
    });
    return app.handle(request, ctx);
  },
};
