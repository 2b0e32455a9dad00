/**
 * `BENCH_ONLY=soak pnpm bench` (src/bench.ts): runs src/soak.ts, prints one row per round and the
 * ratios of each build to the first per pair of rounds, and writes
 * bench/results/runs/partial/soak-<timestamp>.json.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { appNodeVersion, ROOT } from "./procs.js";
import { soak } from "./soak.js";

const results = await soak();
const out = (line: string) => process.stdout.write(`${line}\n`);
out("");
out(
  "| build | round | votes answered | checks answered | delivered | backlog at the end of the load | drained in | CPU µs per delivery: dispatcher / vote-ingest / api / PostgreSQL |",
);
out("|---|---|---|---|---|---|---|---|");
for (const r of results) {
  const cpu = r.cpuUsPerDelivery;
  out(
    `| ${r.build} | ${r.round} | ${r.votes.answered2xx} / ${r.votes.sent} | ${r.checks.answered2xx} / ${r.checks.sent} | ` +
      `${r.delivered.total} of ${r.delivered.recorded}${r.delivered.all ? "" : " **NOT ALL**"} | ${r.backlog.endOfLoad} (+${r.backlog.growthPerS}/s) | ` +
      `${r.drainS === null ? "not drained" : `${r.drainS} s`} | ${cpu["webhook-dispatcher"]} / ${cpu["vote-ingest"]} / ${cpu.api} / ${cpu.postgres} |`,
  );
}
const builds = [...new Set(results.map((r) => r.build))];
if (builds.length > 1) {
  const first = builds[0] as string;
  for (const build of builds.slice(1)) {
    const ratio = (name: string) => {
      const sum = (b: string) =>
        results.filter((r) => r.build === b).reduce((a, r) => a + (r.cpuUsPerDelivery[name] ?? 0), 0);
      return Math.round((sum(build) / Math.max(1, sum(first))) * 1000) / 1000;
    };
    out(
      `${build} ÷ ${first}, CPU per delivery: ` +
        ["webhook-dispatcher", "vote-ingest", "api", "postgres", "redis"]
          .map((n) => `${n} ${ratio(n)}`)
          .join(", "),
    );
  }
}
const dir = path.join(ROOT, "bench/results/runs/partial");
mkdirSync(dir, { recursive: true });
const file = path.join(dir, `soak-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
writeFileSync(
  file,
  `${JSON.stringify({ date: new Date().toISOString(), node: appNodeVersion(), rounds: results }, null, 1)}\n`,
);
out(`[soak] written to ${path.relative(ROOT, file)}`);
const missing = results.filter((r) => !r.delivered.all);
if (missing.length > 0) {
  out(
    `[soak] ${missing.length} round(s) did not deliver every vote within the drain: ${missing.map((r) => `${r.build} round ${r.round}`).join(", ")}`,
  );
  process.exitCode = 1;
}
