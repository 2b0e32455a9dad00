/**
 * The Kubernetes manifests as an operator gets them: rendered by `kubectl kustomize`, each object
 * checked against the Kubernetes and CRD schemas (kubernetes-models, generated from the Kubernetes
 * OpenAPI and the KEDA and Prometheus Operator CRDs) with unknown fields refused, and against the
 * code: images are Dockerfile targets, ports and probes are the ones the apps serve, env names are
 * the ones the apps' env schemas read (e2e/test/k8s-manifests.test.ts).
 *
 * The schemas are checked twice: the models' validators (types, required fields, enums, formats;
 * they let unknown fields through) and the TypeScript compiler over the models' declarations,
 * whose excess-property check refuses any field the schema does not declare, at every depth.
 * Maps (labels, ConfigMap data) and fields the schemas leave open (x-kubernetes-preserve-unknown-
 * fields) are index signatures or `any` there, so they take any key, as the API server does.
 */
import { execFileSync, spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseEnv } from "@botdir/service-kit";
import { parseAllDocuments, parse as parseYaml } from "yaml";
import type { z } from "zod";

export type AnyObject = Record<string, unknown>;

const e2eDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const repoRoot = path.resolve(e2eDir, "..");
const require = createRequire(import.meta.url);

/** The kubectl to render with: KUBECTL, else the one on PATH. */
export const KUBECTL = process.env.KUBECTL ?? "kubectl";

/** kubectl's client and kustomize versions; throws, naming how to install it, when there is none. */
export function kubectlVersion(): string {
  const run = spawnSync(KUBECTL, ["version", "--client"], { encoding: "utf8" });
  if (run.status !== 0)
    throw new Error(
      `kubectl is needed to render infra/ (${run.error?.message ?? run.stderr.trim()}); see docs/operations.md "Kubernetes manifest check"`,
    );
  return run.stdout.trim().replace(/\n/g, ", ");
}

/** `kubectl kustomize <dir>`: the objects, in order. Throws with kustomize's message. */
export function kustomize(dir: string): AnyObject[] {
  const out = execFileSync(KUBECTL, ["kustomize", dir], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    maxBuffer: 64 * 1024 * 1024,
  });
  return parseAllDocuments(out)
    .map((d) => d.toJSON() as AnyObject | null)
    .filter((d): d is AnyObject => d !== null);
}

/** A scratch folder where TypeScript resolves e2e's dependencies (node_modules is not committed). */
export function scratchDir(prefix: string): string {
  const parent = path.join(e2eDir, "node_modules", ".cache");
  mkdirSync(parent, { recursive: true });
  return mkdtempSync(path.join(parent, `${prefix}-`));
}

/**
 * Renders an overlay as an operator writes one: the kustomization of `overlay` (a folder relative
 * to the repository root) copied into a scratch folder, its paths rewritten, with `components`
 * (relative to the root), `patches` and `labels` added to it.
 */
export function renderOverlay(
  overlay: string,
  extra: {
    components?: string[];
    patches?: { target: AnyObject; patch: string }[];
    labels?: AnyObject[];
  } = {},
): AnyObject[] {
  const dir = scratchDir("overlay");
  try {
    const from = path.join(repoRoot, overlay);
    const doc = parseYaml(readFileSync(path.join(from, "kustomization.yaml"), "utf8")) as AnyObject;
    const moved = (p: string) => path.relative(dir, path.resolve(from, p));
    const fromRoot = (p: string) => path.relative(dir, path.join(repoRoot, p));
    // Folders are referenced where they are; files (kustomize loads none from outside) are copied.
    doc.resources = ((doc.resources ?? []) as string[]).map((p) => {
      if (statSync(path.resolve(from, p)).isDirectory()) return moved(p);
      copyFileSync(path.resolve(from, p), path.join(dir, path.basename(p)));
      return path.basename(p);
    });
    doc.components = [
      ...((doc.components ?? []) as string[]).map(moved),
      ...(extra.components ?? []).map(fromRoot),
    ];
    doc.patches = [...((doc.patches ?? []) as AnyObject[]), ...(extra.patches ?? [])];
    if (extra.labels) doc.labels = [...((doc.labels ?? []) as AnyObject[]), ...extra.labels];
    writeFileSync(path.join(dir, "kustomization.yaml"), JSON.stringify(doc, null, 2));
    return kustomize(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The packages declaring each API group (kubernetes-models: the groups Kubernetes itself serves). */
const GROUP_PACKAGES: Record<string, string> = {
  "keda.sh": "@kubernetes-models/keda",
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
};

/** The module exporting `kind` (its class and its I<kind> interface) for the object's apiVersion, or null. */
function modelModule(object: AnyObject): string | null {
  const apiVersion = String(object.apiVersion ?? "");
  const kind = String(object.kind ?? "");
  if (!/^[A-Z][A-Za-z0-9]*$/.test(kind)) return null;
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  if (group === undefined || !version || !/^v\d+[a-z0-9]*$/.test(version)) return null;
  const pkg =
    GROUP_PACKAGES[group] ??
    (group === "" || !group.includes(".") || group.endsWith(".k8s.io") ? "kubernetes-models" : null);
  if (!pkg) return null;
  const subpath = `${group ? `${group}/` : ""}${version}`;
  if (!existsSync(path.join(e2eDir, "node_modules", pkg, subpath, `${kind}.d.ts`))) return null;
  return `${pkg}/${subpath}`;
}

/** Problems found by the schemas, each "<Kind>/<name>: …"; empty when every object is valid. */
export async function schemaProblems(objects: AnyObject[]): Promise<string[]> {
  const problems: string[] = [];
  const label = (o: AnyObject) => `${String(o.kind)}/${String((o.metadata as AnyObject | undefined)?.name)}`;
  const modules = objects.map(modelModule);
  // 1. The models' validators: types, required fields, enums and formats.
  for (const [i, object] of objects.entries()) {
    const module = modules[i];
    if (!module) {
      problems.push(`${label(object)}: no schema for ${String(object.apiVersion)} ${String(object.kind)}`);
      continue;
    }
    const exports = (await import(module)) as Record<string, new (data: AnyObject) => { validate(): void }>;
    const Model = exports[String(object.kind)];
    try {
      if (!Model) throw new Error(`${module} exports no ${String(object.kind)}`);
      new Model(structuredClone(object)).validate();
    } catch (error) {
      problems.push(`${label(object)}: ${(error as Error).message.split("\n")[0]}`);
    }
  }
  // 2. The declarations: unknown fields (and wrong types, again) at any depth.
  const dir = scratchDir("schemas");
  try {
    const lines = ["/* Generated by e2e/src/manifests.ts: one typed constant per rendered object. */"];
    const owner: { from: number; label: string }[] = [];
    for (const [i, object] of objects.entries()) {
      const module = modules[i];
      if (!module) continue;
      lines.push(`import type { I${String(object.kind)} as T${i} } from "${module}";`);
    }
    for (const [i, object] of objects.entries()) {
      if (!modules[i]) continue;
      owner.push({ from: lines.length + 1, label: label(object) });
      lines.push(...`export const o${i}: T${i} = ${JSON.stringify(object, null, 2)};`.split("\n"));
    }
    writeFileSync(path.join(dir, "objects.ts"), `${lines.join("\n")}\n`);
    writeFileSync(
      path.join(dir, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          target: "es2022",
          module: "nodenext",
          moduleResolution: "nodenext",
          types: [],
        },
        files: ["objects.ts"],
      }),
    );
    const tsc = spawnSync(
      process.execPath,
      [
        path.join(path.dirname(require.resolve("typescript/package.json")), "bin", "tsc"),
        "-p",
        dir,
        "--pretty",
        "false",
      ],
      {
        encoding: "utf8",
      },
    );
    const output = `${tsc.stdout}${tsc.stderr}`.trim();
    if (tsc.status !== 0) {
      const errors = output.split("\n").filter((l) => / error TS\d+:/.test(l));
      if (errors.length === 0) problems.push(`tsc failed: ${output}`);
      for (const error of errors) {
        const line = Number(/objects\.ts\((\d+),/.exec(error)?.[1] ?? 0);
        const who = owner.filter((o) => o.from <= line).pop()?.label ?? "objects.ts";
        problems.push(
          `${who}: ${error.replace(/^.*? error (TS\d+): /, "$1 ").replace(/'"([^"']*)"'/g, "'$1'")}`,
        );
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return problems;
}

/** An app as the manifests must describe it. */
export type AppFacts = {
  schema: z.ZodObject;
  /** The variable naming the port its probes and Service use. */
  portVar: string;
  /** The variable naming the port Prometheus scrapes (the same or an internal listener). */
  metricsVar: string;
};

/** What the manifests are checked against, all read from the code. */
export type CodeFacts = {
  apps: Record<string, AppFacts>;
  /** The Dockerfile's runtime targets and what each EXPOSEs and sets with ENV. */
  targets: Record<string, { expose: number[]; env: Record<string, string> }>;
  /** Variables the migration runner reads. */
  migrationEnv: readonly string[];
  /** Paths the apps' probe listener answers 200 while the app behind it answers 404. */
  probePaths: ReadonlySet<string>;
  /** A plausible value for a variable that comes from the Secret. */
  secretValue: (name: string) => string;
};

/** The Dockerfile's `FROM runtime AS <target>` sections: EXPOSEd ports and ENV settings. */
export function dockerfileTargets(dockerfile: string): CodeFacts["targets"] {
  const targets: CodeFacts["targets"] = {};
  for (const section of dockerfile.split(/^FROM /m)) {
    const name = /^\S+ AS (\S+)\n/.exec(section)?.[1];
    if (!name || !/^runtime AS /.test(section)) continue;
    const expose = [...section.matchAll(/^EXPOSE (.+)$/gm)].flatMap((m) =>
      m[1]!.trim().split(/\s+/).map(Number),
    );
    const env: Record<string, string> = {};
    for (const m of section.matchAll(/^ENV (.+)$/gm))
      for (const pair of m[1]!.matchAll(/([A-Z_][A-Z0-9_]*)=("[^"]*"|\S+)/g))
        env[pair[1]!] = pair[2]!.replace(/^"|"$/g, "");
    targets[name] = { expose, env };
  }
  return targets;
}

type Container = {
  name: string;
  image?: string;
  ports?: { name?: string; containerPort: number }[];
  env?: {
    name: string;
    value?: string;
    valueFrom?: { secretKeyRef?: { name: string; key: string; optional?: boolean } };
  }[];
  envFrom?: { configMapRef?: { name: string } }[];
  readinessProbe?: { httpGet?: { path: string; port: string | number } };
  livenessProbe?: { httpGet?: { path: string; port: string | number } };
  startupProbe?: { httpGet?: { path: string; port: string | number } };
};
type PodTemplate = {
  metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
  spec: { containers: Container[] };
};

const nameOf = (o: AnyObject) => String((o.metadata as AnyObject | undefined)?.name);
const templateOf = (o: AnyObject) => (o.spec as { template?: PodTemplate } | undefined)?.template;

/**
 * Where the rendered objects disagree with the code: images, ports, probes, env names, the
 * Services' and autoscalers' targets. Empty when they agree.
 */
export function driftProblems(objects: AnyObject[], facts: CodeFacts): string[] {
  const problems: string[] = [];
  const configMaps = new Map(
    objects
      .filter((o) => o.kind === "ConfigMap")
      .map((o) => [nameOf(o), (o.data ?? {}) as Record<string, string>]),
  );
  const workloads = objects.filter((o) => o.kind === "Deployment" || o.kind === "Job");
  const deployments = objects.filter((o) => o.kind === "Deployment");
  const seenApps = new Set<string>();
  /** A ConfigMap loaded with envFrom: the variables the apps loading it read. */
  const sharedReaders = new Map<string, Set<string>>();

  for (const workload of workloads) {
    const where = `${String(workload.kind)}/${nameOf(workload)}`;
    const template = templateOf(workload);
    for (const container of template?.spec.containers ?? []) {
      const image = container.image ?? "";
      const repo = image.replace(/[:@].*$/, "");
      if (!repo.startsWith("botdir/")) continue; // third-party images (PgBouncer) are the operator's to pin
      const target = repo.slice("botdir/".length);
      const built = facts.targets[target];
      if (!built) {
        problems.push(
          `${where}: image ${image} is no target of docker/Dockerfile (${Object.keys(facts.targets).join(", ")})`,
        );
        continue;
      }
      // Env: the ConfigMaps it loads plus its own entries; values from the Secret are placeholders.
      const env: Record<string, string> = {};
      for (const from of container.envFrom ?? []) {
        const data = from.configMapRef ? configMaps.get(from.configMapRef.name) : undefined;
        if (from.configMapRef && !data)
          problems.push(`${where}: envFrom names ConfigMap ${from.configMapRef.name}, which is not rendered`);
        Object.assign(env, data ?? {});
      }
      const own = container.env ?? [];
      for (const item of own) {
        if (item.value !== undefined) env[item.name] = item.value;
        // The key ring takes SECRET_ENCRYPTION_KEYS or SECRET_ENCRYPTION_KEY: the check sets the single key.
        else if (item.valueFrom?.secretKeyRef && item.name !== "SECRET_ENCRYPTION_KEYS")
          env[item.name] = facts.secretValue(item.name);
      }
      if (target === "migrate") {
        for (const name of new Set([...Object.keys(env), ...own.map((e) => e.name)]))
          if (!facts.migrationEnv.includes(name))
            problems.push(
              `${where}: env ${name} is not read by the migration runner (${facts.migrationEnv.join(", ")})`,
            );
        continue;
      }
      const app = facts.apps[target];
      if (!app) {
        problems.push(`${where}: image ${image} is a Dockerfile target with no app facts`);
        continue;
      }
      seenApps.add(target);
      if (workload.kind === "Deployment" && nameOf(workload) !== target)
        problems.push(`${where}: runs ${image}, expected in the Deployment ${target}`);
      // Its own entries are read by its schema; a shared ConfigMap's keys by one app that loads it (below).
      const accepted = Object.keys(app.schema.shape);
      for (const { name } of own)
        if (!accepted.includes(name))
          problems.push(`${where}: env ${name} is not read by ${target}'s env schema`);
      for (const from of container.envFrom ?? []) {
        const readers = sharedReaders.get(from.configMapRef?.name ?? "") ?? new Set<string>();
        for (const name of accepted) readers.add(name);
        if (from.configMapRef) sharedReaders.set(from.configMapRef.name, readers);
      }
      let parsed: Record<string, unknown> = {};
      try {
        parsed = parseEnv(app.schema, env) as Record<string, unknown>;
      } catch (error) {
        problems.push(`${where}: ${(error as Error).message}`);
        continue;
      }
      const port = Number(parsed[app.portVar]);
      const metricsPort = Number(parsed[app.metricsVar]);
      // The image's own settings: the port the code defaults to is the one the image sets and EXPOSEs.
      const defaults = parseEnv(
        app.schema,
        Object.fromEntries(Object.entries(env).filter(([k]) => k !== app.portVar && k !== app.metricsVar)),
      ) as Record<string, unknown>;
      for (const v of new Set([app.portVar, app.metricsVar])) {
        if (built.env[v] !== String(defaults[v]))
          problems.push(
            `${where}: docker/Dockerfile target ${target} sets ${v}=${built.env[v]}, the code's default is ${String(defaults[v])}`,
          );
      }
      for (const [what, p] of [
        [app.portVar, port],
        [app.metricsVar, metricsPort],
      ] as const)
        if (!built.expose.includes(p))
          problems.push(
            `${where}: ${what} is ${p}, which docker/Dockerfile target ${target} does not EXPOSE (${built.expose.join(", ")})`,
          );
      const ports = container.ports ?? [];
      const http = ports.find((p) => p.name === "http");
      if (http?.containerPort !== port)
        problems.push(
          `${where}: container port "http" is ${http?.containerPort}, ${target} listens on ${app.portVar}=${port}`,
        );
      const portNumbers = ports.map((p) => p.containerPort);
      for (const p of portNumbers)
        if (p !== port && p !== metricsPort)
          problems.push(
            `${where}: container port ${p} is neither ${app.portVar} (${port}) nor ${app.metricsVar} (${metricsPort})`,
          );
      const annotations = template?.metadata?.annotations ?? {};
      if (
        annotations["prometheus.io/scrape"] === "true" &&
        Number(annotations["prometheus.io/port"]) !== metricsPort
      )
        problems.push(
          `${where}: prometheus.io/port is ${annotations["prometheus.io/port"]}, ${target} serves metrics on ${app.metricsVar}=${metricsPort}`,
        );
      for (const kind of ["readinessProbe", "livenessProbe", "startupProbe"] as const) {
        const probe = container[kind]?.httpGet;
        if (!probe) {
          if (kind !== "startupProbe") problems.push(`${where}: no HTTP ${kind}`);
          continue;
        }
        if (!facts.probePaths.has(probe.path))
          problems.push(
            `${where}: ${kind} path ${probe.path} is not a probe the apps answer (${[...facts.probePaths].join(", ")})`,
          );
        const probePort =
          typeof probe.port === "number"
            ? probe.port
            : ports.find((p) => p.name === probe.port)?.containerPort;
        if (probePort !== port)
          problems.push(`${where}: ${kind} port ${String(probe.port)} is not ${app.portVar}=${port}`);
      }
    }
  }
  for (const [name, readers] of sharedReaders)
    for (const key of Object.keys(configMaps.get(name) ?? {}))
      if (!readers.has(key))
        problems.push(`ConfigMap/${name}: ${key} is read by none of the apps that load it`);
  for (const name of Object.keys(facts.apps))
    if (!seenApps.has(name)) problems.push(`no Deployment runs botdir/${name}`);

  // Services reach a Deployment's named port; autoscalers and budgets name existing workloads.
  const labelsOf = (d: AnyObject) => templateOf(d)?.metadata?.labels ?? {};
  const selects = (selector: Record<string, string>, d: AnyObject) =>
    Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labelsOf(d)[k] === v);
  for (const service of objects.filter((o) => o.kind === "Service")) {
    const spec = service.spec as {
      selector?: Record<string, string>;
      ports: { port: number; targetPort?: string | number }[];
    };
    const target = deployments.find((d) => selects(spec.selector ?? {}, d));
    if (!target) {
      problems.push(`Service/${nameOf(service)}: selects no Deployment`);
      continue;
    }
    const ports = templateOf(target)?.spec.containers.flatMap((c) => c.ports ?? []) ?? [];
    for (const p of spec.ports) {
      const t = p.targetPort ?? p.port;
      if (!ports.some((cp) => (typeof t === "number" ? cp.containerPort === t : cp.name === t)))
        problems.push(
          `Service/${nameOf(service)}: targetPort ${String(t)} is no port of Deployment/${nameOf(target)}`,
        );
    }
  }
  for (const o of objects.filter((x) => x.kind === "PodDisruptionBudget")) {
    const selector =
      (o.spec as { selector: { matchLabels?: Record<string, string> } }).selector.matchLabels ?? {};
    if (!deployments.some((d) => selects(selector, d)))
      problems.push(`PodDisruptionBudget/${nameOf(o)}: selects no Deployment`);
  }
  for (const o of objects.filter((x) => x.kind === "HorizontalPodAutoscaler" || x.kind === "ScaledObject")) {
    const ref = (o.spec as { scaleTargetRef: { name: string; kind?: string } }).scaleTargetRef;
    if (!deployments.some((d) => nameOf(d) === ref.name) || (ref.kind && ref.kind !== "Deployment"))
      problems.push(
        `${String(o.kind)}/${nameOf(o)}: scales ${ref.kind ?? "Deployment"}/${ref.name}, which is not rendered`,
      );
  }
  const scalers = objects.filter((x) => x.kind === "HorizontalPodAutoscaler" || x.kind === "ScaledObject");
  for (const d of deployments) {
    const n = scalers.filter(
      (s) => (s.spec as { scaleTargetRef: { name: string } }).scaleTargetRef.name === nameOf(d),
    ).length;
    if (n > 1) problems.push(`Deployment/${nameOf(d)}: ${n} autoscalers fight over its replicas`);
  }
  return problems;
}
