// `pnpm test:busy`: the README's test command (`pnpm test`) three times in a row while two
// CPU-bound processes take both cores, as on a shared CI runner. Prints each run's duration and
// whether it passed; exits 1 if any run failed. The hogs are stopped when the runs end, and also
// when this script is interrupted.
// Usage: node scripts/test-busy.mjs [runs (default 3)] [hogs (default 2)]
import { spawn } from "node:child_process";

const runs = Number(process.argv[2] ?? 3);
const hogCount = Number(process.argv[3] ?? 2);

/** A process that spins one core until killed. */
function startHog() {
  return spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" });
}

const hogs = Array.from({ length: hogCount }, startHog);
const stopHogs = () => {
  for (const hog of hogs) if (hog.exitCode === null && hog.signalCode === null) hog.kill("SIGKILL");
};
process.once("exit", stopHogs);
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.once(signal, () => {
    stopHogs();
    process.exit(130);
  });
}

function runTests() {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn("pnpm", ["test"], { stdio: "inherit" });
    child.once("exit", (code) => resolve({ ok: code === 0, seconds: (Date.now() - started) / 1000 }));
  });
}

const results = [];
for (let i = 1; i <= runs; i++) {
  process.stdout.write(`\n=== test:busy run ${i} of ${runs} (${hogCount} CPU hogs running) ===\n`);
  results.push(await runTests());
}
stopHogs();

process.stdout.write(`\n=== test:busy: ${hogCount} CPU hogs, ${runs} runs of pnpm test ===\n`);
for (const [i, r] of results.entries()) {
  process.stdout.write(`run ${i + 1}: ${r.ok ? "passed" : "FAILED"} in ${r.seconds.toFixed(1)} s\n`);
}
process.exit(results.every((r) => r.ok) ? 0 : 1);
