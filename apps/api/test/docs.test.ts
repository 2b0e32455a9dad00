/**
 * GET /docs, the API reference page: its headers and assets over HTTP, then the page in a real
 * headless Chromium (Debian's /usr/bin/chromium driven by playwright-core): it renders the four
 * bot endpoints and the vote.create webhook with no console error and no request to any origin
 * but the API's own.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import request from "supertest";
import type { ApiApp } from "../src/app.js";
import { createHarness, type Harness } from "./support.js";

const CHROMIUM = "/usr/bin/chromium";
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

let h: Harness;
let app: ApiApp;

beforeAll(async () => {
  h = await createHarness();
  app = h.app();
});

afterAll(async () => {
  await h.close();
});

/** The page's asset paths, as its script tags name them. */
async function assetPaths(): Promise<string[]> {
  const html = (await request(app).get("/docs")).text;
  return [...html.matchAll(/<script src="([^"]+)"><\/script>/g)].map((m) => m[1] ?? "");
}

describe("GET /docs over HTTP", () => {
  it("serves the page with a strict Content-Security-Policy, a 5-minute cache and no inline script", async () => {
    const res = await request(app).get("/docs");
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("text/html; charset=utf-8");
    expect(res.headers["cache-control"]).toBe("public, max-age=300");
    expect(res.headers["x-content-type-options"]).toBe("nosniff");
    const csp = String(res.headers["content-security-policy"]);
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).not.toMatch(/unsafe-eval|https?:|\*/);
    expect(res.text).not.toMatch(/<script(?![^>]*\bsrc=)/);
    expect(res.text).not.toMatch(/https?:\/\//);
  });

  it("serves the renderer and its init script from this origin, named by content and cached for a year", async () => {
    const paths = await assetPaths();
    expect(paths).toHaveLength(2);
    for (const asset of paths) {
      expect(asset).toMatch(/^\/docs\/assets\/[a-z.]+\.[0-9a-f]{16}\.js$/);
      const res = await request(app).get(asset);
      expect(res.status).toBe(200);
      expect(res.headers["content-type"]).toBe("text/javascript; charset=utf-8");
      expect(res.headers["cache-control"]).toBe("public, max-age=31536000, immutable");
    }
    const renderer = await request(app).get(paths[0] ?? "");
    expect(renderer.text.length).toBeGreaterThan(500_000);
    expect(renderer.text.includes("cdn.redoc.ly")).toBe(false);
  });

  it("when an asset that does not exist is asked for, then a JSON 404", async () => {
    const res = await request(app).get("/docs/assets/redoc.standalone.0000000000000000.js");
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ error: "No such endpoint." });
  });
});

describe("GET /docs in headless Chromium", () => {
  let server: Server;
  let origin: string;

  beforeAll(async () => {
    server = createServer(app);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it("renders the four bot endpoints and the vote.create webhook with no console error and no request to another origin", async () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(
        `${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium; .ci/run does).`,
      );
    }
    const profile = mkdtempSync(path.join(tmpdir(), "botdir-docs-chromium-"));
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
    });
    const requests: string[] = [];
    const problems: string[] = [];
    context.on("request", (req) => requests.push(req.url()));
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      page.on("console", (msg) => {
        if (msg.type() === "error" || msg.type() === "warning")
          problems.push(`console ${msg.type()}: ${msg.text()}`);
      });
      page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
      page.on("requestfailed", (req) =>
        problems.push(`request failed: ${req.url()} ${req.failure()?.errorText}`),
      );

      const response = await page.goto(`${origin}/docs`, { waitUntil: "load", timeout: 60_000 });
      expect(response?.status()).toBe(200);
      for (const text of [
        "Replace the command list",
        "Report the server count",
        "Check a user's vote",
        "List votes",
        "A vote was cast",
      ]) {
        await page.getByText(text, { exact: true }).first().waitFor({ state: "attached", timeout: 60_000 });
      }
      await page.waitForLoadState("networkidle", { timeout: 30_000 });
      const body = (await page.locator("body").textContent()) ?? "";
      expect(body).toContain("vote.create");
      expect(body).toContain("/api/v1/bots/{id}/commands");
      await page.screenshot({ path: path.join(tmpdir(), "botdir-docs.png") });

      // The listener saw the page's own requests (so it would have seen any other).
      expect(requests).toEqual(expect.arrayContaining([`${origin}/docs`, `${origin}/api/v1/openapi.json`]));
      const foreign = requests.filter((url) => !url.startsWith(`${origin}/`) && !/^(data|blob):/.test(url));
      expect(foreign).toEqual([]);
      expect(problems).toEqual([]);
    } finally {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    }
  }, 180_000);
});
