/**
 * No Docker engine runs here, so the container and Kubernetes files are checked as data: they
 * parse, every variable they set is one the apps accept, every required one is set, and ports,
 * health paths and image targets agree with the code.
 */
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseEnv } from "@botdir/service-kit";
import { parseAllDocuments, parse as parseYaml } from "yaml";
import type { z } from "zod";
import { ApiEnv } from "../../apps/api/src/env.js";
import { IngestEnv } from "../../apps/vote-ingest/src/env.js";
import { DispatcherEnv } from "../../apps/webhook-dispatcher/src/env.js";
import { appSeries } from "../src/app-metrics.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const read = (file: string) => readFileSync(path.join(root, file), "utf8");

type AnyObject = Record<string, unknown>;

const APPS: Record<
  string,
  {
    schema: z.ZodObject;
    portVar: string;
    port: number;
    health: string;
    metricsVar: string;
    metricsPort: number;
  }
> = {
  api: {
    schema: ApiEnv as unknown as z.ZodObject,
    portVar: "API_PORT",
    port: 3000,
    health: "/api/health",
    // The API port is public: GET /metrics has its own internal listener.
    metricsVar: "METRICS_PORT",
    metricsPort: 9464,
  },
  "vote-ingest": {
    schema: IngestEnv as unknown as z.ZodObject,
    portVar: "INGEST_PORT",
    port: 3001,
    health: "/health",
    metricsVar: "INGEST_PORT",
    metricsPort: 3001,
  },
  "webhook-dispatcher": {
    schema: DispatcherEnv as unknown as z.ZodObject,
    portVar: "DISPATCHER_PORT",
    port: 3002,
    health: "/health",
    metricsVar: "DISPATCHER_PORT",
    metricsPort: 3002,
  },
};

/** A plausible value for a variable whose real value is a secret or comes from compose. */
function placeholder(name: string): string {
  const values: Record<string, string> = {
    DATABASE_URL: "postgresql://botdir:pw@pgbouncer:6432/botdir",
    DATABASE_DIRECT_URL: "postgresql://botdir:pw@postgres:5432/botdir",
    REDIS_URL: "redis://redis:6379",
    REDIS_CLUSTER_NODES: "redis-0.redis:6379,redis-1.redis:6379,redis-2.redis:6379",
    INTERNAL_API_KEY: "k".repeat(32),
    SECRET_ENCRYPTION_KEY: "ab".repeat(32),
  };
  return values[name] ?? "1";
}

/** What the operator's docker/.env sets besides the required variables (docs/operations.md). */
const DOT_ENV: Record<string, string> = { SECRET_ENCRYPTION_KEY: "ab".repeat(32) };

/** Replaces ${VAR:-default} / ${VAR:?msg} / ${VAR} with .env's value, a default or a placeholder. */
function interpolate(value: string, name: string): string {
  if (/^\$\{[A-Z_]+:\?[^}]*\}$/.test(value)) return placeholder(name);
  return value.replace(
    /\$\{([A-Z_]+)(?::-([^}]*))?(?::\?[^}]*)?\}/g,
    (_m, v: string, def?: string) => DOT_ENV[v] ?? (def !== undefined ? def : placeholder(v)),
  );
}

describe("docker/compose.yml", () => {
  const compose = parseYaml(read("docker/compose.yml"), { merge: true }) as {
    services: Record<string, AnyObject>;
  };

  it("has the whole stack: PostgreSQL, Redis, a one-shot migration and the three apps (and Prometheus behind a profile)", () => {
    expect(Object.keys(compose.services).sort()).toEqual(
      ["api", "migrate", "postgres", "redis", "vote-ingest", "webhook-dispatcher", "prometheus"].sort(),
    );
    expect(compose.services.prometheus?.profiles).toEqual(["monitoring"]);
    expect(compose.services.migrate?.restart).toBe("no");
  });

  it.each(Object.keys(APPS))(
    "sets for %s only variables its env schema accepts, and all it requires",
    (name) => {
      const app = APPS[name]!;
      const service = compose.services[name] as { environment: Record<string, string> };
      const env = Object.fromEntries(
        Object.entries(service.environment).map(([k, v]) => [k, interpolate(String(v), k)]),
      );
      for (const key of Object.keys(env)) expect(Object.keys(app.schema.shape)).toContain(key);
      expect(() => parseEnv(app.schema, env)).not.toThrow();
      expect(env.NODE_ENV).toBe("production");
      expect(Number(env[app.portVar])).toBe(app.port);
    },
  );

  it("gates every app on healthy stores and a finished migration", () => {
    for (const name of Object.keys(APPS)) {
      const deps = compose.services[name]?.depends_on as Record<string, { condition: string }>;
      expect(deps.postgres?.condition).toBe("service_healthy");
      expect(deps.redis?.condition).toBe("service_healthy");
      expect(deps.migrate?.condition).toBe("service_completed_successfully");
    }
  });

  it.each(Object.keys(APPS))(
    "serves %s's metrics on the port its env schema reads, and never publishes the API's metrics port",
    (name) => {
      const app = APPS[name]!;
      const service = compose.services[name] as { environment: Record<string, string>; ports?: string[] };
      const raw = Object.fromEntries(
        Object.entries(service.environment).map(([k, v]) => [k, interpolate(String(v), k)]),
      );
      const env = parseEnv(app.schema, raw) as Record<string, unknown>;
      expect(env[app.metricsVar]).toBe(app.metricsPort);
      if (app.metricsVar !== app.portVar) {
        for (const published of service.ports ?? [])
          expect(published).not.toMatch(new RegExp(`:${app.metricsPort}$`));
        const expose = (compose.services[name]?.expose ?? []) as string[];
        expect(expose.map(Number)).toContain(app.metricsPort);
      }
    },
  );

  it("lets the dispatcher's replica count be configured on its own", () => {
    const deploy = compose.services["webhook-dispatcher"]?.deploy as { replicas: string };
    expect(deploy.replicas).toMatch(/DISPATCHER_REPLICAS/);
  });

  it("builds only targets the Dockerfile defines", () => {
    const targets = [...read("docker/Dockerfile").matchAll(/^FROM \S+ AS (\S+)$/gm)].map((m) => m[1]);
    const built = Object.values(compose.services).flatMap((service) => {
      const build = service.build as { target?: string } | undefined;
      return build === undefined ? [] : [build.target];
    });
    // Every app is built from the Dockerfile: an empty list would check nothing.
    expect(built.length).toBeGreaterThanOrEqual(Object.keys(APPS).length);
    for (const target of built) expect(targets).toContain(target);
  });
});

describe("docker/Dockerfile", () => {
  const dockerfile = read("docker/Dockerfile");

  it.each(Object.keys(APPS))(
    "target %s exposes its port and health-checks its readiness, not the dependency report",
    (name) => {
      const app = APPS[name]!;
      const section = dockerfile.split(/^FROM /m).find((s) => s.startsWith(`runtime AS ${name}\n`));
      expect(section).toBeDefined();
      expect(section).toContain(`EXPOSE ${app.port}`);
      expect(section).toContain(`ENV ${app.portVar}=${app.port}`);
      // /readyz like compose and the probes: Redis down must not make the API or vote-ingest unhealthy.
      expect(section).toMatch(/^HEALTHCHECK /m);
      expect(section).toContain(`process.env.${app.portVar}+'/readyz')`);
      expect(section).not.toContain(`'${app.health}'`);
      expect(section).toContain(`COPY --from=build --chown=node:node /repo/apps/${name}/dist /app/dist`);
    },
  );

  it.each(Object.keys(APPS))(
    "target %s exposes its metrics port with the env variable the code reads",
    (name) => {
      const app = APPS[name]!;
      const section = dockerfile.split(/^FROM /m).find((s) => s.startsWith(`runtime AS ${name}\n`)) ?? "";
      expect(section).toMatch(new RegExp(`^EXPOSE .*\\b${app.metricsPort}\\b`, "m"));
      expect(section).toMatch(new RegExp(`^ENV .*\\b${app.metricsVar}=${app.metricsPort}\\b`, "m"));
    },
  );

  it("caps the whole V8 heap, young generation included, well inside every app's container memory limit", () => {
    // Node 24 sizes the young generation from the host's memory unless told: 64 MB semi-spaces on
    // a 24 GiB host made the heap limit 128 + 3 x 64 = 320 MB (over the 256 MiB limit) and turned
    // scavenges into full collections (docs/performance.md).
    const options = /^ENV .*NODE_OPTIONS="([^"]*)"/m.exec(dockerfile)?.[1] ?? "";
    const flag = (name: string) => Number(new RegExp(`--${name}=(\\d+)(?:\\s|$)`).exec(options)?.[1]);
    const oldMb = flag("max-old-space-size");
    const semiMb = flag("max-semi-space-size");
    expect(oldMb).toBeGreaterThan(0);
    expect(semiMb).toBeGreaterThan(0);
    const heapLimitMb = oldMb + 3 * semiMb;
    for (const app of Object.keys(APPS)) {
      const limit = /limits: \{[^}]*memory: (\d+)Mi/.exec(read(`infra/base/${app}.yaml`))?.[1];
      expect(Number(limit)).toBeGreaterThan(0);
      // Room for what is not heap: code, buffers, sockets, the native side of TLS and zlib.
      expect(heapLimitMb).toBeLessThanOrEqual(Number(limit) * 0.75);
    }
  });

  it("runs as a non-root user with tini as PID 1", () => {
    expect(dockerfile).toMatch(/^USER node$/m);
    expect(dockerfile).toContain('ENTRYPOINT ["/usr/bin/tini", "--"]');
  });
});

describe("docker/Dockerfile: the compiled runtime on a supported Node line", () => {
  const dockerfile = read("docker/Dockerfile");
  const sections = dockerfile.split(/^FROM /m);
  const section = (target: string) => sections.find((s) => s.startsWith(`runtime AS ${target}\n`)) ?? "";
  const manifest = (file: string) => JSON.parse(read(file)) as AnyObject;
  const nodeMajor = Number(/^ARG NODE_IMAGE=node:(\d+)-/m.exec(dockerfile)?.[1]);
  /** The apps' build (what `turbo run build` runs in the build stage). */
  const buildScript = (pkg: string) =>
    (manifest(`${pkg}/package.json`).scripts as Record<string, string>).build;

  it("runs on Node 24, an LTS line supported today, which engines and the README allow", () => {
    // Node 20 ended in April 2026; 22 ends in April 2027; 24 is supported until April 2028.
    expect(nodeMajor).toBe(24);
    const engines = (manifest("package.json").engines as { node: string }).node;
    const floor = /^>=(\d+)\.(\d+)$/.exec(engines);
    expect(floor).not.toBeNull();
    expect(nodeMajor).toBeGreaterThanOrEqual(Number(floor?.[1]));
    expect(read("README.md")).toContain(`Node.js ${nodeMajor}`);
    expect(read("README.md")).toContain(`Node.js ${floor?.[1]}.${floor?.[2]}+`);
    // Every stage builds and runs on that one image.
    expect(
      [...dockerfile.matchAll(/^FROM (\S+)/gm)].map((m) => m[1] ?? "").filter((f) => f.startsWith("node:")),
    ).toEqual([]);
  });

  it.each(Object.keys(APPS))("target %s runs compiled JavaScript: node dist/main.js, no tsx", (name) => {
    const target = section(name);
    expect(target).toMatch(/^CMD \["node", "dist\/main\.js"\]$/m);
    expect(target).not.toMatch(/tsx|\.ts"/);
    // dist/main.js is what the app's build writes, and its build is part of `pnpm build`.
    expect(buildScript(`apps/${name}`)).toMatch(/scripts\/build-app\.mjs main=src\/main\.ts/);
    expect((manifest(`apps/${name}/package.json`).scripts as Record<string, string>).start).toBe(
      "node dist/main.js",
    );
  });

  it("builds in the build stage with the real build task, which generates the Prisma client first", () => {
    const build = sections.find((s) => s.startsWith("base AS build\n")) ?? "";
    expect(build).toMatch(/pnpm install --frozen-lockfile/);
    expect(build).toMatch(/&& pnpm build$/m);
    expect(manifest("package.json").scripts).toMatchObject({ build: "turbo run build" });
    const turbo = manifest("turbo.json") as { tasks: Record<string, { dependsOn?: string[] }> };
    expect(turbo.tasks.build?.dependsOn).toEqual(expect.arrayContaining(["generate", "^generate"]));
  });

  it("keeps build and development tools out of the runtime: no node_modules copied, tsx a dev dependency", () => {
    for (const target of [...Object.keys(APPS), "migrate"]) {
      const copies = [...section(target).matchAll(/^COPY --from=build \S+ (\S+) \S+$/gm)].map((m) => m[1]);
      expect(copies.length).toBeGreaterThan(0);
      for (const from of copies) expect(from).toMatch(/\/dist$|\/prisma\/migrations$/);
    }
    for (const pkg of [
      "package.json",
      ...Object.keys(APPS).map((a) => `apps/${a}/package.json`),
      "packages/db/package.json",
    ]) {
      const deps = (manifest(pkg).dependencies ?? {}) as Record<string, string>;
      for (const tool of ["tsx", "typescript", "esbuild", "prisma", "pino-pretty"])
        expect(deps).not.toHaveProperty(tool);
    }
  });

  it("runs migrations from their own target: the bundled runner and the SQL files only", () => {
    const migrate = section("migrate");
    expect(migrate).toMatch(/^CMD \["node", "dist\/migrate\.js"\]$/m);
    expect(migrate).toContain("/repo/packages/db/prisma/migrations /app/prisma/migrations");
    expect(buildScript("packages/db")).toMatch(/migrate=src\/migrate-cli\.ts/);
  });
});

describe("infra (kustomize)", () => {
  const base = "infra/base";
  const kustomization = parseYaml(read(`${base}/kustomization.yaml`)) as { resources: string[] };
  const docs = kustomization.resources.flatMap((file) =>
    parseAllDocuments(read(`${base}/${file}`)).map((d) => d.toJSON() as AnyObject),
  );
  const byKind = (kind: string) => docs.filter((d) => d.kind === kind);
  const config = (byKind("ConfigMap")[0] as { data: Record<string, string> }).data;

  it("every file of every kustomization parses", () => {
    const dirs = [
      "infra/base",
      "infra/overlays/example",
      "infra/components/keda",
      "infra/components/pgbouncer",
    ];
    for (const dir of dirs) {
      for (const file of readdirSync(path.join(root, dir)).filter((f) => f.endsWith(".yaml"))) {
        expect(() => parseAllDocuments(read(`${dir}/${file}`)).map((d) => d.toJSON())).not.toThrow();
        for (const doc of parseAllDocuments(read(`${dir}/${file}`))) expect(doc.errors).toEqual([]);
      }
    }
  });

  it.each(Object.keys(APPS))(
    "the %s Deployment sets accepted variables, all required ones, from secrets",
    (name) => {
      const app = APPS[name]!;
      const deployment = byKind("Deployment").find(
        (d) => (d.metadata as AnyObject).name === name,
      ) as AnyObject;
      const container = (deployment.spec as AnyObject as { template: { spec: { containers: AnyObject[] } } })
        .template.spec.containers[0] as {
        image: string;
        env: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string } } }[];
        envFrom: { configMapRef: { name: string } }[];
        ports: { containerPort: number }[];
        readinessProbe: { httpGet: { path: string } };
      };
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(config)) env[k] = v;
      for (const item of container.env) {
        expect(item.value).toBeUndefined(); // secrets are referenced, never inlined
        expect(item.valueFrom?.secretKeyRef?.name).toBe("botdir-secrets");
        // The Secret holds one of the key ring's two variables (optional refs), here the single key.
        if (item.name !== "SECRET_ENCRYPTION_KEYS") env[item.name] = placeholder(item.name);
      }
      const accepted = Object.keys(app.schema.shape);
      for (const item of container.env) expect(accepted).toContain(item.name);
      expect(() => parseEnv(app.schema, env)).not.toThrow();
      expect(container.ports[0]?.containerPort).toBe(Number(config[app.portVar]));
      expect(container.readinessProbe.httpGet.path).toBe("/readyz");
      expect(container.image).toBe(`botdir/${name}:latest`);
    },
  );

  it.each(Object.keys(APPS))(
    "the %s pods carry Prometheus scrape annotations for the port and path the code serves metrics on",
    (name) => {
      const app = APPS[name]!;
      const deployment = byKind("Deployment").find((d) => (d.metadata as AnyObject).name === name) as {
        spec: {
          template: {
            metadata: { annotations: Record<string, string> };
            spec: { containers: { ports: { name: string; containerPort: number }[] }[] };
          };
        };
      };
      const { annotations } = deployment.spec.template.metadata;
      expect(annotations["prometheus.io/scrape"]).toBe("true");
      expect(annotations["prometheus.io/path"]).toBe("/metrics");
      expect(Number(annotations["prometheus.io/port"])).toBe(app.metricsPort);
      expect(Number(config[app.metricsVar])).toBe(app.metricsPort);
      const ports = deployment.spec.template.spec.containers[0]?.ports.map((p) => p.containerPort);
      expect(ports).toContain(app.metricsPort);
    },
  );

  it("every variable of the shared ConfigMap is accepted by at least one app", () => {
    const all = new Set(Object.values(APPS).flatMap((a) => Object.keys(a.schema.shape)));
    for (const key of Object.keys(config)) expect(all).toContain(key);
  });

  it("has PodDisruptionBudgets, a migration Job and an autoscaler for the dispatcher", () => {
    expect(byKind("PodDisruptionBudget")).toHaveLength(3);
    expect(byKind("Job")).toHaveLength(1);
    const hpa = byKind("HorizontalPodAutoscaler").find(
      (d) => (d.metadata as AnyObject).name === "webhook-dispatcher",
    );
    expect(hpa).toBeDefined();
    const spec = hpa?.spec as { scaleTargetRef: { name: string } };
    expect(spec.scaleTargetRef.name).toBe("webhook-dispatcher");
  });

  it("the PgBouncer component pools by transaction, ignores the startup parameters the apps send, has the failover settings and session entry, and is the block docs/scaling.md shows", async () => {
    const ini = read("infra/components/pgbouncer/pgbouncer.ini");
    const settings = Object.fromEntries(
      ini
        .split("\n")
        .map((line) => /^([a-z_]+)\s*=\s*(.*)$/.exec(line.trim()))
        .filter((m): m is RegExpExecArray => m !== null)
        .map((m) => [m[1], m[2]]),
    );
    expect(settings.pool_mode).toBe("transaction");
    expect(settings.ignore_startup_parameters?.split(",").sort()).toEqual(
      ["extra_float_digits", "options", "statement_timeout"].sort(),
    );
    expect(read("docs/scaling.md")).toContain(ini.trim());
    // Failover in seconds (docs/scaling.md Failover): the settings pnpm test:failover runs with,
    // and the session-mode entry DATABASE_DIRECT_URL names, repointed by the same RELOAD.
    const { PGBOUNCER_FAILOVER_SETTINGS } = await import("@botdir/test-stores");
    for (const [key, value] of Object.entries(PGBOUNCER_FAILOVER_SETTINGS)) expect(settings[key]).toBe(value);
    expect(settings.botdir_session).toMatch(/dbname=botdir pool_mode=session/);
    const component = parseYaml(read("infra/components/pgbouncer/kustomization.yaml")) as {
      configMapGenerator: { name: string; files: string[] }[];
    };
    expect(component.configMapGenerator[0]?.files).toEqual(["pgbouncer.ini"]);
  });

  it("every app and the migration Job take the optional DATABASE_DIRECT_URL; the apps take REDIS_CLUSTER_NODES", () => {
    const envOf = (doc: AnyObject) =>
      (
        (
          doc.spec as {
            template: { spec: { containers: { env: { name: string; valueFrom: AnyObject }[] }[] } };
          }
        ).template.spec.containers[0]?.env ?? []
      ).map((e) => e.name);
    for (const name of Object.keys(APPS)) {
      const deployment = byKind("Deployment").find(
        (d) => (d.metadata as AnyObject).name === name,
      ) as AnyObject;
      expect(envOf(deployment)).toEqual(
        expect.arrayContaining(["DATABASE_DIRECT_URL", "REDIS_CLUSTER_NODES"]),
      );
    }
    expect(envOf(byKind("Job")[0] as AnyObject)).toContain("DATABASE_DIRECT_URL");
  });

  it("the KEDA component scales the dispatcher on the BullMQ wait list of the queue the code uses", async () => {
    const { DEFAULT_QUEUE_PREFIX, QUEUES } = await import("@botdir/schema");
    const keda = parseAllDocuments(read("infra/components/keda/scaledobject.yaml")).map(
      (d) => d.toJSON() as AnyObject,
    );
    const scaled = keda.find((d) => d.kind === "ScaledObject") as {
      spec: { scaleTargetRef: { name: string }; triggers: { metadata: { listName: string } }[] };
    };
    expect(scaled.spec.scaleTargetRef.name).toBe("webhook-dispatcher");
    expect(scaled.spec.triggers[0]?.metadata.listName).toBe(
      `${DEFAULT_QUEUE_PREFIX}:${QUEUES.webhookDeliveries}:wait`,
    );
  });
});

describe("infra/grafana/botdir-dashboard.json", () => {
  const dashboard = JSON.parse(read("infra/grafana/botdir-dashboard.json")) as {
    panels: {
      type: string;
      title: string;
      targets?: { expr: string }[];
      fieldConfig?: { defaults: { links?: { title: string; url: string }[] } };
    }[];
    templating: { list: { name: string; type: string; query: unknown }[] };
  };
  const exprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));

  it("queries only series the apps' registries define (with the process series main.ts turns on)", () => {
    const defined = appSeries({ processMetrics: true });
    const used = new Set(
      exprs.flatMap((e) => [...e.matchAll(/\b(botdir_\w+|process_\w+|nodejs_\w+)/g)].map((m) => m[1]!)),
    );
    expect(used.size).toBeGreaterThan(10);
    for (const name of used) {
      expect({ name, defined: defined.has(name.replace(/_(bucket|sum|count)$/, "")) }).toEqual({
        name,
        defined: true,
      });
    }
  });

  it("shows request rate and latency by route, 429s, fail-open, outbox backlog and age, queue depth, outcomes by kind and delivery latency p50/p99", () => {
    const all = exprs.join("\n");
    for (const needle of [
      "sum by (app, route, method) (rate(botdir_http_requests_total",
      "botdir_http_request_duration_seconds_bucket",
      'status="429"',
      "botdir_rate_limit_fail_open_total",
      "botdir_outbox_pending_deliveries",
      "botdir_outbox_oldest_due_age_seconds",
      "botdir_queue_jobs",
      "sum by (outcome, error_kind) (rate(botdir_webhook_attempts_total",
      "histogram_quantile(0.5, sum by (le) (rate(botdir_webhook_delivery_latency_seconds_bucket",
      "histogram_quantile(0.99, sum by (le) (rate(botdir_webhook_delivery_latency_seconds_bucket",
    ]) {
      expect(all).toContain(needle);
    }
  });

  it("links every latency histogram panel to its traces: Explore on the Tempo data-source variable, by service and route, in the panel's time range", () => {
    /** A Grafana variable reference, `${name}`, as the dashboard writes it. */
    const v = (name: string) => `\${${name}}`;
    const traces = dashboard.templating.list.find((x) => x.name === "traces");
    expect(traces).toMatchObject({ type: "datasource", query: "tempo" });
    const latencyPanels = dashboard.panels.filter((p) =>
      (p.targets ?? []).some((t) => /_(duration|latency)_seconds_bucket/.test(t.expr)),
    );
    expect(latencyPanels.length).toBeGreaterThanOrEqual(3);
    for (const panel of latencyPanels) {
      const links = panel.fieldConfig?.defaults.links ?? [];
      expect({ panel: panel.title, links: links.length }).toEqual({ panel: panel.title, links: 1 });
      const url = decodeURIComponent(links[0]!.url);
      expect(url).toMatch(/^\/explore\?/);
      const pane = JSON.parse(/panes=(.*)$/.exec(url)![1]!) as {
        a: { datasource: string; queries: { queryType: string; query: string }[]; range: unknown };
      };
      expect(pane.a.datasource).toBe(v("traces"));
      expect(pane.a.queries[0]?.queryType).toBe("traceql");
      // The services are named botdir-<app> (OTEL_SERVICE_NAME's defaults).
      expect(pane.a.queries[0]?.query).toMatch(/^\{resource\.service\.name="botdir-/);
      expect(pane.a.range).toEqual({ from: v("__from"), to: v("__to") });
    }
    const byRoute = latencyPanels.find((p) => p.targets?.some((t) => t.expr.includes("by (le, app, route)")));
    const query = /panes=(.*)$/.exec(
      decodeURIComponent(byRoute?.fieldConfig?.defaults.links?.[0]?.url ?? ""),
    );
    expect(
      (JSON.parse(query?.[1] ?? "{}") as { a: { queries: { query: string }[] } }).a.queries[0]?.query,
    ).toBe(
      `{resource.service.name="botdir-${v("__field.labels.app:percentencode")}" && span.http.route="${v("__field.labels.route:percentencode")}"}`,
    );
  });

  it("shows the ready replicas of each app, which the readiness alerts watch", () => {
    const panel = dashboard.panels.find((p) => p.title === "Ready replicas by app");
    expect(panel?.targets?.map((t) => t.expr)).toEqual(['sum by (app) (botdir_ready{app=~"$app"})']);
  });
});

describe("probes, drain and grace periods", () => {
  const base = "infra/base";
  const kustomization = parseYaml(read(`${base}/kustomization.yaml`)) as { resources: string[] };
  const docs = kustomization.resources.flatMap((file) =>
    parseAllDocuments(read(`${base}/${file}`)).map((d) => d.toJSON() as AnyObject),
  );
  const config = (docs.find((d) => d.kind === "ConfigMap") as { data: Record<string, string> }).data;
  const compose = parseYaml(read("docker/compose.yml"), { merge: true }) as {
    services: Record<string, AnyObject>;
  };
  type Pod = {
    terminationGracePeriodSeconds: number;
    containers: {
      readinessProbe: { httpGet: { path: string; port: string } };
      livenessProbe: { httpGet?: { path: string; port: string }; tcpSocket?: unknown };
      lifecycle?: { preStop?: { sleep?: { seconds: number }; exec?: unknown } };
    }[];
  };
  const podOf = (name: string) =>
    (
      docs.find((d) => d.kind === "Deployment" && (d.metadata as AnyObject).name === name) as {
        spec: { template: { spec: Pod } };
      }
    ).spec.template.spec;
  /** The app's shutdown deadline after the drain, as its main.ts passes it to onShutdown. */
  const deadlineS: Record<string, number> = {
    api: 15,
    "vote-ingest": 15,
    "webhook-dispatcher": Number(config.WEBHOOK_TIMEOUT_MS) / 1000 + 10,
  };

  it.each(Object.keys(APPS))(
    "%s: readiness on /readyz, liveness on /livez (no dependency), both on the app's port",
    (name) => {
      const container = podOf(name).containers[0]!;
      expect(container.readinessProbe.httpGet).toEqual({ path: "/readyz", port: "http" });
      expect(container.livenessProbe.httpGet).toEqual({ path: "/livez", port: "http" });
      expect(container.livenessProbe.tcpSocket).toBeUndefined();
    },
  );

  it.each(Object.keys(APPS))(
    "%s: a preStop sleep, and a grace period that covers preStop + SHUTDOWN_DRAIN_MS + the shutdown deadline",
    (name) => {
      const pod = podOf(name);
      const preStop = pod.containers[0]?.lifecycle?.preStop?.sleep?.seconds ?? 0;
      const env = parseEnv(APPS[name]!.schema, {
        ...config,
        ...Object.fromEntries(
          ["DATABASE_URL", "REDIS_URL", "INTERNAL_API_KEY", "SECRET_ENCRYPTION_KEY"].map((k) => [
            k,
            placeholder(k),
          ]),
        ),
      }) as { SHUTDOWN_DRAIN_MS: number };
      expect(preStop).toBeGreaterThanOrEqual(3);
      expect(env.SHUTDOWN_DRAIN_MS).toBeGreaterThan(0);
      expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(
        preStop + env.SHUTDOWN_DRAIN_MS / 1000 + deadlineS[name]!,
      );
    },
  );

  it("sets the listener timeouts by the load-balancer rule: keep-alive above 60 s, headers above keep-alive", () => {
    expect(Number(config.HTTP_KEEP_ALIVE_TIMEOUT_MS)).toBeGreaterThan(60_000);
    expect(Number(config.HTTP_HEADERS_TIMEOUT_MS)).toBeGreaterThan(Number(config.HTTP_KEEP_ALIVE_TIMEOUT_MS));
    expect(Number(config.HTTP_REQUEST_TIMEOUT_MS)).toBeGreaterThanOrEqual(
      Number(config.HTTP_HEADERS_TIMEOUT_MS),
    );
  });

  it.each(Object.keys(APPS))(
    "compose: %s is health-checked on /readyz and may stop within the drain plus its deadline",
    (name) => {
      const service = compose.services[name] as {
        healthcheck: { test: string[] };
        stop_grace_period?: string;
        environment: Record<string, string>;
      };
      const test = service.healthcheck.test.join(" ");
      expect(test).toContain("/readyz");
      expect(test).toContain(`process.env.${APPS[name]!.portVar}`);
      const grace = Number((service.stop_grace_period ?? "10s").replace(/s$/, ""));
      const env = parseEnv(
        APPS[name]!.schema,
        Object.fromEntries(
          Object.entries(service.environment).map(([k, v]) => [k, interpolate(String(v), k)]),
        ),
      ) as { SHUTDOWN_DRAIN_MS: number };
      expect(grace).toBeGreaterThanOrEqual(env.SHUTDOWN_DRAIN_MS / 1000 + deadlineS[name]!);
    },
  );
});
