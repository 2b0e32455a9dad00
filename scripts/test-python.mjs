// `pnpm test:python`: the Python SDK (packages/sdk-python) with Debian's Python (/usr/bin/python3,
// which sees the python3-* packages .ci/run installs): builds the apps when a dist/ is missing
// (its end-to-end suite starts them from dist/), runs mypy --strict on the package and on its
// typed owner script, then one pytest run of the unit, end-to-end and packaging suites, whose
// summary is the closing line.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const pkg = `${root}packages/sdk-python`;
const python = "/usr/bin/python3";

function run(command, args, cwd) {
  const result = spawnSync(command, args, { cwd, stdio: "inherit" });
  if (result.error) throw result.error;
  return result.status ?? 1;
}

const apps = ["api", "vote-ingest", "webhook-dispatcher"];
if (apps.some((app) => !existsSync(`${root}apps/${app}/dist/main.js`))) {
  console.log("[test:python] pnpm build (an app's dist/ is missing)");
  const code = run("pnpm", ["build"], root);
  if (code !== 0) process.exit(code);
}

console.log("[test:python] mypy --strict (as for Python 3.9, the oldest supported)");
const typed = run(
  python,
  ["-m", "mypy", "--strict", "--python-version", "3.9", "botdir", "../examples/owner.py"],
  `${pkg}/src`,
);
if (typed !== 0) process.exit(typed);

console.log("[test:python] pytest");
const code = run(python, ["-m", "pytest", "-p", "no:cacheprovider", "-rfEs", "tests/unit", "tests/e2e"], pkg);
if (code === 5) console.error("[test:python] pytest collected no test: that is a failure");
process.exit(code);
