/**
 * `pnpm bench`: the hot-path benchmark against a bare Express floor (src/run.ts), or, with
 * BENCH_SCALE=1, the ten-million-vote scale benchmark (src/scale.ts).
 */
if (process.env.BENCH_SCALE === "1") await import("./scale.js");
else await import("./run.js");
