// Self time of a V8 .cpuprofile (BENCH_PROFILE) by package and by function, names mapped back to
// sources through the bundle's source map:
//   node bench/profile-shares.mjs bench/results/profiles/<file>.cpuprofile apps/webhook-dispatcher/dist/main.js.map
// Shares are of busy time (idle left out). V8 samples wall time: a process preempted inside a system
// call (a loopback write wakes its reader) is counted there, so on a loaded machine the write
// calls are over-stated; they are listed on their own ("socket and pipe writes").
// Owners: each sample goes to the nearest package on its stack above Node's own code, so what
// node:http or a stream does for got counts as got.
import fs from "node:fs";
import { SourceMap } from "node:module";

const [profilePath, mapPath] = process.argv.slice(2);
if (!profilePath || !mapPath) {
  console.error("usage: node bench/profile-shares.mjs <profile.cpuprofile> <bundle.js.map> [top]");
  process.exit(2);
}
const top = Number(process.argv[4] ?? 30);
const profile = JSON.parse(fs.readFileSync(profilePath, "utf8"));
const map = new SourceMap(JSON.parse(fs.readFileSync(mapPath, "utf8")));
const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
const parent = new Map();
for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);

const selfTime = new Map();
profile.samples.forEach((id, i) => {
  selfTime.set(id, (selfTime.get(id) ?? 0) + (profile.timeDeltas[i + 1] ?? 0));
});

const SPECIAL = new Set(["(garbage collector)", "(idle)", "(program)", "(root)"]);
const WRITES = new Set(["writev", "writeString", "writeBuffer", "writeUtf8String", "writeLatin1String"]);

function packageOf(source) {
  const inModules = source.match(/node_modules\/(?:\.pnpm\/[^/]+\/node_modules\/)?((?:@[^/]+\/)?[^/]+)/);
  if (inModules) return inModules[1];
  const inPackages = source.match(/packages\/([^/]+)/);
  if (inPackages) return `@botdir/${inPackages[1]}`;
  return source.includes("src/") ? `ours: ${source.replace(/^.*?src\//, "src/")}` : source;
}

const frames = new Map();
function frameOf(id) {
  const cached = frames.get(id);
  if (cached) return cached;
  const { functionName, url, lineNumber, columnNumber } = nodes.get(id).callFrame;
  const name = functionName || "(anonymous)";
  let frame;
  if (!url) frame = { pkg: SPECIAL.has(name) ? name : "(native)", name, at: "" };
  else if (url.startsWith("node:"))
    frame = { pkg: `node:${url.slice(5)}`, name, at: `${url}:${lineNumber + 1}` };
  else {
    const entry = url.endsWith(".js") ? map.findEntry(lineNumber, columnNumber) : undefined;
    const source = entry?.originalSource ?? url;
    const line = (entry?.originalLine ?? lineNumber) + 1;
    frame = { pkg: packageOf(source), name, at: `${source.replace(/^.*node_modules\//, "")}:${line}` };
  }
  frames.set(id, frame);
  return frame;
}

const OWNERS = [
  ["got (and Node's HTTP client under it)", /^(got|@szmarczak|lowercase-keys|@sindresorhus|responselike)/],
  ["node-postgres", /^(pg|pg-.*|postgres-.*)$/],
  ["BullMQ and ioredis", /^(bullmq|ioredis|@ioredis|msgpackr|redis-.*|denque|cluster-key-slot)$/],
  ["pino", /^(pino|sonic-boom|quick-format-unescaped|fast-redact|safe-stable-stringify)$/],
  ["zod", /^zod$/],
  ["prom-client", /^(prom-client|tdigest|bintrees)$/],
  ["ours (the app and @botdir packages)", /^(ours|@botdir)/],
];
const ownerOfPackage = (pkg) => OWNERS.find(([, pattern]) => pattern.test(pkg))?.[0];

function ownerOf(id) {
  const leaf = frameOf(id);
  if (SPECIAL.has(leaf.pkg)) return leaf.pkg;
  if (leaf.pkg === "(native)" && WRITES.has(leaf.name)) return "socket and pipe writes (system calls)";
  if (leaf.pkg === "node:crypto" || leaf.pkg.startsWith("node:internal/crypto")) return "crypto";
  let firstNode;
  for (let at = id; at !== undefined; at = parent.get(at)) {
    const frame = frameOf(at);
    // The app's own request function hands got's request to Node: count it with got.
    if (frame.name === "leanRequest") return OWNERS[0][0];
    const owner = ownerOfPackage(frame.pkg);
    if (owner) return owner;
    if (!firstNode && frame.pkg.startsWith("node:")) firstNode = frame.pkg;
  }
  return firstNode ? `Node internals alone: ${nodeArea(firstNode)}` : leaf.pkg;
}

function nodeArea(pkg) {
  const module = pkg.replace(/^node:(internal\/)?/, "");
  if (/^_http|^http/.test(module)) return "HTTP (response parsing, agent)";
  if (/^(events|streams)/.test(module)) return "streams and events";
  if (/^(net|stream_base|dns|tls)/.test(module)) return "sockets";
  if (/^(process\/task_queues|async|timers|perf)/.test(module)) return "ticks, timers, async hooks";
  if (/^(modules|bootstrap|main|deps)/.test(module)) return "start-up (module loading)";
  return "other";
}

let busy = 0;
const byOwner = new Map();
const byPackage = new Map();
const byFunction = new Map();
const add = (map, key, t) => map.set(key, (map.get(key) ?? 0) + t);
for (const [id, t] of selfTime) {
  const frame = frameOf(id);
  if (frame.pkg === "(idle)") continue;
  busy += t;
  add(byOwner, ownerOf(id), t);
  add(byPackage, frame.pkg, t);
  add(byFunction, `${frame.name}  [${frame.pkg}] ${frame.at}`, t);
}
const print = (title, map, limit) => {
  console.log(`\n${title}`);
  for (const [key, t] of [...map].sort((a, b) => b[1] - a[1]).slice(0, limit)) {
    console.log(`${((100 * t) / busy).toFixed(2).padStart(6)} %  ${key}`);
  }
};
console.log(`busy ${(busy / 1e6).toFixed(2)} s`);
print("by owner (nearest package on the stack)", byOwner, 40);
print("by package of the function itself", byPackage, 40);
print(`top ${top} functions by self time`, byFunction, top);
