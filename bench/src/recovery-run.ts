/**
 * `BENCH_ONLY=recovery pnpm bench` (src/bench.ts): starts the stack (src/stack.ts), runs
 * src/scenarios/recovery.ts (BENCH_RECOVERY_VOTES, default 100,000; BENCH_RECOVERY_BEFORE_S, the
 * baseline's length, default 30), prints its row and writes bench/results/recovery-<date>.json.
 */
import { writeFileSync } from "node:fs";
import { cpus } from "node:os";
import path from "node:path";
import { appNodeVersion, ROOT } from "./procs.js";
import { recovery } from "./scenarios/recovery.js";
import { startStack } from "./stack.js";

const out = (line: string) => process.stdout.write(`${line}\n`);
const stack = await startStack();
try {
  const r = await recovery(stack, {
    votes: Number(process.env.BENCH_RECOVERY_VOTES ?? 100_000),
    beforeS: Number(process.env.BENCH_RECOVERY_BEFORE_S ?? 30),
  });
  out("");
  out(
    "| votes recovered | time to recover all | quiet bot p99, before → during (÷) | per recovered vote: PostgreSQL CPU / Redis CPU / Redis commands / vote-ingest CPU |",
  );
  out("|---|---|---|---|");
  out(
    `| ${r.recovered} of ${r.votes} | ${r.recoverSeconds} s (${r.recoveredPerSecond}/s) | ` +
      `${r.quietP99BeforeMs} → ${r.quietP99DuringMs} ms (×${r.p99Ratio}) | ` +
      `${r.perVote.postgresCpuMs} ms / ${r.perVote.redisCpuMs} ms / ${r.perVote.redisCommands} / ${r.perVote.ingestCpuMs} ms |`,
  );
  const date = new Date().toISOString();
  const file = path.join(ROOT, "bench/results", `recovery-${date.slice(0, 10)}.json`);
  writeFileSync(
    file,
    `${JSON.stringify({ date, machine: { cores: cpus().length, node: appNodeVersion() }, recovery: r }, null, 1)}\n`,
  );
  out(`[bench] written to ${path.relative(ROOT, file)}`);
  if (r.queued < r.votes) {
    out(`[bench] the recovery queued ${r.queued} of the ${r.votes} seeded votes`);
    process.exitCode = 1;
  }
  if (r.recovered < r.votes) {
    out(`[bench] only ${r.recovered} of ${r.votes} recovered votes arrived`);
    process.exitCode = 1;
  }
} finally {
  await stack.stop();
}
