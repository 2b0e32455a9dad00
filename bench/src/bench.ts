/**
 * `pnpm bench`: the hot-path benchmark against a bare Express floor (src/run.ts), or, with
 * BENCH_SCALE=1, the ten-million-vote scale benchmark (src/scale.ts), or, with BENCH_ROWS=1, what
 * PostgreSQL spends on a delivery's rows by kind of delivery id (src/delivery-rows.ts), or, with
 * BENCH_ONLY=soak, the soak of the README's stack (`pnpm start`) at a steady load (src/soak.ts), or,
 * with BENCH_ONLY=recovery, 100,000 undelivered votes of one bot recovered beside a quiet bot
 * (src/scenarios/recovery.ts).
 */
if (process.env.BENCH_SCALE === "1") await import("./scale.js");
else if (process.env.BENCH_ROWS === "1") await import("./delivery-rows.js");
else if (process.env.BENCH_ONLY?.trim().toLowerCase() === "soak") await import("./soak-run.js");
else if (process.env.BENCH_ONLY?.trim().toLowerCase() === "recovery") await import("./recovery-run.js");
else await import("./run.js");
