import type { Response } from "express";

/**
 * A 200 JSON answer written straight to Node's response, without Express's `res.json`/`res.send`
 * (which re-parse and re-format the Content-Type header and consider ETags on every call: a
 * measurable share of the hot paths). Same bytes and headers as `res.json`; Node leaves the body
 * out of an answer to HEAD.
 */
export function sendJson(res: Response, body: unknown): void {
  const text = JSON.stringify(body);
  res.statusCode = 200;
  res.setHeader("Content-Type", "application/json; charset=utf-8");
  res.setHeader("Content-Length", Buffer.byteLength(text));
  res.end(text);
}
