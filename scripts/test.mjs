// `pnpm test`: every package's jest suite through turbo (which generates the Prisma client first),
// then one closing line with the totals of all suites.
import { spawn } from "node:child_process";

const child = spawn("pnpm", ["exec", "turbo", "run", "test", "--concurrency=2", ...process.argv.slice(2)], {
  stdio: ["inherit", "pipe", "inherit"],
});
let passed = 0;
let failed = 0;
let skipped = 0;
let failedSuites = 0;
let buffer = "";
child.stdout.on("data", (chunk) => {
  process.stdout.write(chunk);
  buffer += chunk;
  const lines = buffer.split("\n");
  buffer = lines.pop() ?? "";
  for (const line of lines) {
    // A suite that fails to load (a bad import) has no test lines: count it as one failure.
    const suites = /Test Suites:\s.*?(\d+) failed/.exec(line);
    if (suites) failedSuites += Number(suites[1]);
    if (!/Tests:\s/.test(line)) continue;
    passed += Number(/(\d+) passed/.exec(line)?.[1] ?? 0);
    failed += Number(/(\d+) failed/.exec(line)?.[1] ?? 0);
    skipped += Number(/(\d+) skipped/.exec(line)?.[1] ?? 0);
  }
});
child.on("exit", (code) => {
  // Every failed test's suite is a failed suite too; suites that failed without a test add to it.
  const total = Math.max(failed, failedSuites, code === 0 ? 0 : 1);
  process.stdout.write(`\n${passed} passed, ${total} failed${skipped ? `, ${skipped} skipped` : ""}\n`);
  process.exit(code ?? 1);
});
