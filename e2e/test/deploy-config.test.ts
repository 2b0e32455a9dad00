/**
 * No Docker engine runs here, so the container and Kubernetes files are checked as data: they
 * parse, every variable they set is one the apps accept, every required one is set, and ports,
 * health paths and image targets agree with the code.
 */
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseEnv } from "@botdir/schema";
import { parseAllDocuments, parse as parseYaml } from "yaml";
import type { z } from "zod";
import { ApiEnv } from "../../apps/api/src/env.js";
import { IngestEnv } from "../../apps/vote-ingest/src/env.js";
import { DispatcherEnv } from "../../apps/webhook-dispatcher/src/env.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const read = (file: string) => readFileSync(path.join(root, file), "utf8");

type AnyObject = Record<string, unknown>;

const APPS: Record<string, { schema: z.ZodObject; portVar: string; port: number; health: string }> = {
  api: { schema: ApiEnv as unknown as z.ZodObject, portVar: "API_PORT", port: 3000, health: "/api/health" },
  "vote-ingest": {
    schema: IngestEnv as unknown as z.ZodObject,
    portVar: "INGEST_PORT",
    port: 3001,
    health: "/health",
  },
  "webhook-dispatcher": {
    schema: DispatcherEnv as unknown as z.ZodObject,
    portVar: "DISPATCHER_PORT",
    port: 3002,
    health: "/health",
  },
};

/** A plausible value for a variable whose real value is a secret or comes from compose. */
function placeholder(name: string): string {
  const values: Record<string, string> = {
    DATABASE_URL: "postgresql://postgres:pw@postgres:5432/botdir",
    REDIS_URL: "redis://redis:6379",
    INTERNAL_API_KEY: "k".repeat(32),
    SECRET_ENCRYPTION_KEY: "ab".repeat(32),
  };
  return values[name] ?? "1";
}

/** Replaces ${VAR:-default} / ${VAR:?msg} / ${VAR} with a default or a placeholder. */
function interpolate(value: string, name: string): string {
  if (/^\$\{[A-Z_]+:\?[^}]*\}$/.test(value)) return placeholder(name);
  return value.replace(/\$\{([A-Z_]+)(?::-([^}]*))?(?::\?[^}]*)?\}/g, (_m, v: string, def?: string) =>
    def !== undefined ? def : placeholder(v),
  );
}

describe("docker/compose.yml", () => {
  const compose = parseYaml(read("docker/compose.yml"), { merge: true }) as {
    services: Record<string, AnyObject>;
  };

  it("has the whole stack: PostgreSQL, Redis, a one-shot migration and the three apps", () => {
    expect(Object.keys(compose.services).sort()).toEqual(
      ["api", "migrate", "postgres", "redis", "vote-ingest", "webhook-dispatcher"].sort(),
    );
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

  it("lets the dispatcher's replica count be configured on its own", () => {
    const deploy = compose.services["webhook-dispatcher"]?.deploy as { replicas: string };
    expect(deploy.replicas).toMatch(/DISPATCHER_REPLICAS/);
  });

  it("builds only targets the Dockerfile defines", () => {
    const targets = [...read("docker/Dockerfile").matchAll(/^FROM \S+ AS (\S+)$/gm)].map((m) => m[1]);
    for (const service of Object.values(compose.services)) {
      const build = service.build as { target?: string } | undefined;
      if (build) expect(targets).toContain(build.target);
    }
  });
});

describe("docker/Dockerfile", () => {
  const dockerfile = read("docker/Dockerfile");

  it.each(Object.keys(APPS))("target %s exposes its port and health-checks its real health path", (name) => {
    const app = APPS[name]!;
    const section = dockerfile.split(/^FROM /m).find((s) => s.startsWith(`runtime AS ${name}\n`));
    expect(section).toBeDefined();
    expect(section).toContain(`EXPOSE ${app.port}`);
    expect(section).toContain(`ENV ${app.portVar}=${app.port}`);
    expect(section).toContain(`'${app.health}'`);
    expect(section).toContain(`COPY --from=build --chown=node:node /out/${name} /app`);
    expect(dockerfile).toContain(`pnpm deploy --filter @botdir/${name} --prod --legacy /out/${name}`);
  });

  it("runs as a non-root user with tini as PID 1 and production dependencies only", () => {
    expect(dockerfile).toMatch(/^USER node$/m);
    expect(dockerfile).toContain('ENTRYPOINT ["/usr/bin/tini", "--"]');
    expect(dockerfile).toMatch(/pnpm deploy --filter @botdir\/api --prod/);
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
    const dirs = ["infra/base", "infra/overlays/example", "infra/components/keda"];
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
        env[item.name] = placeholder(item.name);
      }
      const accepted = Object.keys(app.schema.shape);
      for (const item of container.env) expect(accepted).toContain(item.name);
      expect(() => parseEnv(app.schema, env)).not.toThrow();
      expect(container.ports[0]?.containerPort).toBe(Number(config[app.portVar]));
      expect(container.readinessProbe.httpGet.path).toBe(app.health);
      expect(container.image).toBe(`botdir/${name}:latest`);
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
