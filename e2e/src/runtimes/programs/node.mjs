// Node.js (18, 20): node:http; /verify gets node's own Buffer and req.headers, the other routes a
// Request built from them as a platform adapter would.
import { createServer } from "node:http";
import { createApp } from "./app.mjs";

const app = createApp({
  runtime: `node ${process.version}`,
  verifySecret: process.env.VERIFY_SECRET,
  fetchSecret: process.env.FETCH_SECRET,
  apiBase: process.env.API_BASE,
  botId: process.env.BOT_ID,
  token: process.env.BOT_TOKEN,
});

createServer(async (req, res) => {
  try {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    let response;
    if (req.url === "/verify" && req.method === "POST") {
      const result = await app.verify(body, req.headers);
      response = new Response(result.status === 204 ? null : JSON.stringify(result), {
        status: result.status,
      });
    } else {
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers)) {
        if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(", ") : value);
      }
      const hasBody = req.method !== "GET" && req.method !== "HEAD";
      const request = new Request(`http://127.0.0.1${req.url}`, {
        method: req.method,
        headers,
        body: hasBody ? body : undefined,
      });
      response = await app.handle(request);
    }
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
  } catch (error) {
    console.error(error);
    res.writeHead(500).end();
  }
}).listen(Number(process.env.PORT), "127.0.0.1");
