import { startAutoposter } from "./autoposter.js";
import { BotDirClient } from "./client.js";
import { InvalidResponseError } from "./errors.js";

const clientAnswering = (answer: () => Response) =>
  new BotDirClient({
    baseUrl: "http://directory.test",
    token: "t0ken",
    botId: "123456789012345678",
    fetch: (async () => answer()) as typeof fetch,
    retry: false,
  });

describe("startAutoposter", () => {
  const client = clientAnswering(() => Response.json({ server_count: 1 }));

  it("when intervalMs cannot be honoured (not finite, over 2^31-1 ms, under the floor), then a RangeError (the floor: 1 s, the stats rate limit)", () => {
    for (const intervalMs of [Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31, 1e12, 999, 0, -1]) {
      expect(() => startAutoposter({ client, stats: () => ({ serverCount: 1 }), intervalMs })).toThrow(
        RangeError,
      );
    }
  });

  it("when intervalMs is within the bounds, then it starts", () => {
    for (const intervalMs of [1_000, 2 ** 31 - 1]) {
      const poster = startAutoposter({ client, stats: () => ({ serverCount: 1 }), intervalMs });
      poster.stop();
      expect(poster.stopped).toBe(true);
    }
  });

  it("when a post's 2xx cannot be read, then onError gets an InvalidResponseError, not a TypeError", async () => {
    const error = await new Promise<unknown>((resolve) => {
      const poster = startAutoposter({
        client: clientAnswering(() => new Response("", { status: 200 })),
        stats: () => ({ serverCount: 1 }),
        onError: (e) => {
          poster.stop();
          resolve(e);
        },
      });
    });
    expect(error).toBeInstanceOf(InvalidResponseError);
  });
});
