/**
 * The Kubernetes manifests as `kubectl kustomize` renders them: every overlay under infra/overlays
 * and the example overlay with each component the docs name (keda, pgbouncer, prometheus-rules)
 * and with all three. Every rendered object validates against the Kubernetes schemas and the KEDA
 * and Prometheus Operator CRDs with unknown fields refused, and agrees with the code: images are
 * docker/Dockerfile targets, ports are the apps' env defaults and the Dockerfile's EXPOSE, probes
 * are the paths service-kit answers, env names are the ones the apps' env schemas read
 * (e2e/src/manifests.ts). Injected faults show each kind of mistake is refused.
 *
 * kubectl must be installed (docs/operations.md "Kubernetes manifest check"): without it this fails, it does
 * not skip. The components render only inside an overlay (keda deletes the base's CPU autoscaler,
 * which must be there to delete), so they are rendered that way.
 */
import { readdirSync, readFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { MIGRATION_ENV } from "@botdir/db";
import { DEFAULT_HTTP_TIMEOUTS, type Service, serve } from "@botdir/service-kit";
import { silentLogger } from "@botdir/service-kit/testing";
import { parse as parseYaml } from "yaml";
import type { z } from "zod";
import { ApiEnv } from "../../apps/api/src/env.js";
import { IngestEnv } from "../../apps/vote-ingest/src/env.js";
import { DispatcherEnv } from "../../apps/webhook-dispatcher/src/env.js";
import {
  type AnyObject,
  type CodeFacts,
  dockerfileTargets,
  driftProblems,
  kubectlVersion,
  kustomize,
  renderOverlay,
  repoRoot,
  schemaProblems,
} from "../src/manifests.js";

const read = (file: string) => readFileSync(path.join(repoRoot, file), "utf8");

const APPS: CodeFacts["apps"] = {
  api: { schema: ApiEnv as unknown as z.ZodObject, portVar: "API_PORT", metricsVar: "METRICS_PORT" },
  "vote-ingest": {
    schema: IngestEnv as unknown as z.ZodObject,
    portVar: "INGEST_PORT",
    metricsVar: "INGEST_PORT",
  },
  "webhook-dispatcher": {
    schema: DispatcherEnv as unknown as z.ZodObject,
    portVar: "DISPATCHER_PORT",
    metricsVar: "DISPATCHER_PORT",
  },
};

/** A plausible value for a variable the Secret botdir-secrets holds. */
function secretValue(name: string): string {
  const values: Record<string, string> = {
    DATABASE_URL: "postgresql://botdir:pw@pgbouncer:6432/botdir",
    DATABASE_DIRECT_URL: "postgresql://botdir:pw@pgbouncer:6432/botdir_session",
    REDIS_URL: "redis://redis:6379",
    REDIS_CLUSTER_NODES: "redis-0.redis:6379,redis-1.redis:6379,redis-2.redis:6379",
    INTERNAL_API_KEY: "k".repeat(32),
    SECRET_ENCRYPTION_KEY: "ab".repeat(32),
  };
  return values[name] ?? "1";
}

const COMPONENTS = ["keda", "pgbouncer", "prometheus-rules"];
/** The label docs/alerts.md tells the overlay to add with the rules, so the Operator loads them. */
const RULES_LABELS = (() => {
  const block = /components: \[\.\.\/\.\.\/components\/prometheus-rules\][\s\S]*?```yaml\n([\s\S]*?)```/.exec(
    read("docs/alerts.md"),
  )?.[1];
  return (parseYaml(dedent(block ?? "")) as { labels: AnyObject[] }).labels;
})();

function dedent(text: string): string {
  const indent = Math.min(
    ...text
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => /^ */.exec(l)![0].length),
  );
  return text
    .split("\n")
    .map((l) => l.slice(indent))
    .join("\n");
}
const OVERLAYS = readdirSync(path.join(repoRoot, "infra/overlays"));
/** What is rendered: each overlay as committed, and the example overlay with the components. */
const RENDERINGS: [string, () => AnyObject[]][] = [
  ...OVERLAYS.map((o): [string, () => AnyObject[]] => [
    `overlays/${o}`,
    () => kustomize(path.join(repoRoot, "infra/overlays", o)),
  ]),
  ...[...COMPONENTS.map((c) => [c]), COMPONENTS].map((components): [string, () => AnyObject[]] => [
    `overlays/example + ${components.join(" + ")}`,
    () =>
      renderOverlay("infra/overlays/example", {
        components: components.map((c) => `infra/components/${c}`),
        ...(components.includes("prometheus-rules") ? { labels: RULES_LABELS } : {}),
      }),
  ]),
];

let probeService: Service;
let facts: CodeFacts;
const rendered = new Map<string, AnyObject[]>();

/** Which of `paths` service-kit's listener answers 200 in front of an app that answers 404 to all. */
async function probePathsServed(paths: string[]): Promise<Set<string>> {
  const base = `http://127.0.0.1:${(probeService.server.address() as AddressInfo).port}`;
  const served = new Set<string>();
  for (const p of paths) if ((await fetch(`${base}${p}`)).status === 200) served.add(p);
  return served;
}

beforeAll(async () => {
  // Fails (does not skip) without kubectl, naming how to get it.
  kubectlVersion();
  for (const [name, render] of RENDERINGS) rendered.set(name, render());
  probeService = await serve({
    logger: silentLogger,
    app: (_req, res) => {
      res.statusCode = 404;
      res.end();
    },
    port: 0,
    portVariable: "TEST_PORT",
    host: "127.0.0.1",
    timeouts: DEFAULT_HTTP_TIMEOUTS,
    readiness: {},
  });
  const used = [...rendered.values()]
    .flat()
    .flatMap((o) =>
      (
        (o.spec as { template?: { spec: { containers: Record<string, { httpGet?: { path: string } }>[] } } })
          ?.template?.spec.containers ?? []
      ).flatMap((c) =>
        ["readinessProbe", "livenessProbe", "startupProbe"].map((k) => c[k]?.httpGet?.path ?? ""),
      ),
    );
  facts = {
    apps: APPS,
    targets: dockerfileTargets(read("docker/Dockerfile")),
    migrationEnv: MIGRATION_ENV,
    probePaths: await probePathsServed([...new Set([...used.filter(Boolean), "/healthz", "/api/health"])]),
    secretValue,
  };
});

afterAll(async () => {
  await probeService?.close();
});

describe("kubectl kustomize", () => {
  it("is installed, with kustomize", () => {
    expect(kubectlVersion()).toMatch(/Kustomize Version: v5\./);
  });

  it.each(RENDERINGS.map(([name]) => name))("%s renders", (name) => {
    const objects = rendered.get(name) ?? [];
    expect(objects.length).toBeGreaterThan(10);
    expect(objects.filter((o) => o.kind === "Deployment").length).toBeGreaterThanOrEqual(3);
  });

  it("the components change what they say: KEDA replaces the dispatcher's CPU autoscaler, PgBouncer adds its Deployment and config, the rules add a PrometheusRule", () => {
    const all = rendered.get(`overlays/example + ${COMPONENTS.join(" + ")}`) ?? [];
    const names = (kind: string) =>
      all.filter((o) => o.kind === kind).map((o) => (o.metadata as AnyObject).name);
    expect(names("HorizontalPodAutoscaler")).toEqual(["api"]);
    expect(names("ScaledObject")).toEqual(["webhook-dispatcher"]);
    expect(names("TriggerAuthentication")).toEqual(["botdir-redis"]);
    expect(names("Deployment")).toContain("pgbouncer");
    expect(names("ConfigMap").some((n) => String(n).startsWith("pgbouncer-config-"))).toBe(true);
    expect(names("PrometheusRule")).toHaveLength(1);
    // With the label docs/alerts.md gives the overlay for the Operator's ruleSelector.
    expect(RULES_LABELS).toEqual([{ pairs: { release: "kube-prometheus-stack" }, includeSelectors: false }]);
    const rule = all.find((o) => o.kind === "PrometheusRule")?.metadata as { labels: Record<string, string> };
    expect(rule.labels.release).toBe("kube-prometheus-stack");
    // The overlay's namespace reaches every namespaced object, the components' too.
    for (const o of all.filter((x) => x.kind !== "Namespace"))
      expect({
        o: `${String(o.kind)}/${String((o.metadata as AnyObject).name)}`,
        ns: (o.metadata as AnyObject).namespace,
      }).toEqual({
        o: `${String(o.kind)}/${String((o.metadata as AnyObject).name)}`,
        ns: "botdir",
      });
  });
});

describe("every rendered object", () => {
  it.each(RENDERINGS.map(([name]) => name))(
    "%s: validates against the Kubernetes, KEDA and Prometheus Operator schemas, unknown fields refused",
    async (name) => {
      expect(await schemaProblems(rendered.get(name) ?? [])).toEqual([]);
    },
  );

  it.each(RENDERINGS.map(([name]) => name))(
    "%s: images, ports, probes and env names agree with docker/Dockerfile and the apps' code",
    (name) => {
      expect(driftProblems(rendered.get(name) ?? [], facts)).toEqual([]);
    },
  );

  it("the probes are the paths service-kit answers, and nothing else is taken for one", () => {
    expect([...facts.probePaths].sort()).toEqual(["/livez", "/readyz"]);
  });
});

describe("the check refuses", () => {
  /** The example overlay (with the KEDA component) plus JSON patches. */
  const withPatches = (...patches: { kind: string; name: string; ops: AnyObject[] }[]) =>
    renderOverlay("infra/overlays/example", {
      components: ["infra/components/keda"],
      patches: patches.map((p) => ({ target: { kind: p.kind, name: p.name }, patch: JSON.stringify(p.ops) })),
    });
  const container = "/spec/template/spec/containers/0";

  it("an unknown field in a container (imagee), in a pod spec and in a KEDA ScaledObject", async () => {
    const objects = withPatches(
      {
        kind: "Deployment",
        name: "api",
        ops: [{ op: "add", path: `${container}/imagee`, value: "botdir/api:1.0.0" }],
      },
      {
        kind: "Deployment",
        name: "vote-ingest",
        ops: [{ op: "add", path: "/spec/template/spec/restartPolicyy", value: "Always" }],
      },
      {
        kind: "ScaledObject",
        name: "webhook-dispatcher",
        ops: [{ op: "add", path: "/spec/pollingIntervall", value: 30 }],
      },
    );
    const problems = await schemaProblems(objects);
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^Deployment\/api: .*'imagee'/),
        expect.stringMatching(/^Deployment\/vote-ingest: .*'restartPolicyy'/),
        expect.stringMatching(/^ScaledObject\/webhook-dispatcher: .*'pollingIntervall'/),
      ]),
    );
    expect(problems).toHaveLength(3);
  });

  it("a wrong type: a port or a grace period as a string", async () => {
    const objects = withPatches(
      {
        kind: "Deployment",
        name: "api",
        ops: [{ op: "replace", path: `${container}/ports/0/containerPort`, value: "3000" }],
      },
      {
        kind: "Deployment",
        name: "webhook-dispatcher",
        ops: [{ op: "replace", path: "/spec/template/spec/terminationGracePeriodSeconds", value: "45s" }],
      },
    );
    const problems = await schemaProblems(objects);
    expect(problems).toEqual(
      expect.arrayContaining([
        "Deployment/api: data/spec/template/spec/containers/0/ports/0/containerPort must be integer",
        "Deployment/webhook-dispatcher: data/spec/template/spec/terminationGracePeriodSeconds must be integer",
        "Deployment/api: TS2322 Type 'string' is not assignable to type 'number'.",
        "Deployment/webhook-dispatcher: TS2322 Type 'string' is not assignable to type 'number'.",
      ]),
    );
    expect(problems).toHaveLength(4);
  });

  it("a kind no schema knows", async () => {
    const problems = await schemaProblems([
      { apiVersion: "example.com/v1", kind: "Widget", metadata: { name: "w" } },
    ]);
    expect(problems).toEqual(["Widget/w: no schema for example.com/v1 Widget"]);
  });

  it("a port, probe, image or env name that drifts from the code", () => {
    const objects = withPatches(
      {
        kind: "Deployment",
        name: "api",
        ops: [{ op: "replace", path: `${container}/ports/0/containerPort`, value: 3005 }],
      },
      {
        kind: "Deployment",
        name: "vote-ingest",
        ops: [
          { op: "replace", path: `${container}/readinessProbe/httpGet/path`, value: "/healthz" },
          { op: "add", path: `${container}/env/-`, value: { name: "INGEST_PROT", value: "3001" } },
        ],
      },
      {
        kind: "Deployment",
        name: "webhook-dispatcher",
        ops: [{ op: "replace", path: `${container}/image`, value: "botdir/dispatcher:1.0.0" }],
      },
      {
        kind: "ConfigMap",
        name: "botdir-config",
        ops: [{ op: "add", path: "/data/WEBHOOK_TIMEOUT", value: "10000" }],
      },
    );
    const problems = driftProblems(objects, facts);
    for (const expected of [
      /^Deployment\/api: container port "http" is 3005, api listens on API_PORT=3000$/,
      /^Deployment\/api: container port 3005 is neither/,
      /^Deployment\/api: readinessProbe port http is not API_PORT=3000$/,
      /^Deployment\/vote-ingest: readinessProbe path \/healthz is not a probe the apps answer/,
      /^Deployment\/vote-ingest: env INGEST_PROT is not read by vote-ingest's env schema$/,
      /^ConfigMap\/botdir-config: WEBHOOK_TIMEOUT is read by none of the apps that load it$/,
      /^Deployment\/webhook-dispatcher: image botdir\/dispatcher:1\.0\.0 is no target of docker\/Dockerfile/,
      /^no Deployment runs botdir\/webhook-dispatcher$/,
    ])
      expect({ expected: String(expected), found: problems.some((p) => expected.test(p)) }).toEqual({
        expected: String(expected),
        found: true,
      });
  });

  it("a required variable no manifest sets, and a ConfigMap value the app refuses", () => {
    const objects = withPatches(
      { kind: "Deployment", name: "vote-ingest", ops: [{ op: "remove", path: `${container}/env/4` }] },
      {
        kind: "ConfigMap",
        name: "botdir-config",
        ops: [{ op: "replace", path: "/data/DISPATCHER_CONCURRENCY", value: "many" }],
      },
    );
    const problems = driftProblems(objects, facts);
    expect(problems).toEqual(
      expect.arrayContaining([
        "Deployment/vote-ingest: Invalid environment: INTERNAL_API_KEY is required.",
        expect.stringMatching(
          /^Deployment\/webhook-dispatcher: Invalid environment: DISPATCHER_CONCURRENCY /,
        ),
      ]),
    );
  });

  it("a Dockerfile whose port, EXPOSE or targets drift from the code and the manifests", () => {
    const objects = rendered.get("overlays/example") ?? [];
    const dockerfile = read("docker/Dockerfile")
      .replace("ENV INGEST_PORT=3001", "ENV INGEST_PORT=3011")
      .replace("EXPOSE 3002", "EXPOSE 3012")
      .replace("FROM runtime AS migrate", "FROM runtime AS migrations");
    const problems = driftProblems(objects, { ...facts, targets: dockerfileTargets(dockerfile) });
    expect(problems).toEqual(
      expect.arrayContaining([
        "Deployment/vote-ingest: docker/Dockerfile target vote-ingest sets INGEST_PORT=3011, the code's default is 3001",
        expect.stringMatching(
          /^Deployment\/webhook-dispatcher: DISPATCHER_PORT is 3002, which docker\/Dockerfile target webhook-dispatcher does not EXPOSE \(3012\)$/,
        ),
        expect.stringMatching(
          /^Job\/botdir-migrate: image botdir\/migrate:1\.0\.0 is no target of docker\/Dockerfile/,
        ),
      ]),
    );
  });

  it("a Service, autoscaler or budget that points at nothing, and two autoscalers on one Deployment", () => {
    const dispatcherHpa = (rendered.get("overlays/example") ?? []).find(
      (o) => o.kind === "HorizontalPodAutoscaler" && (o.metadata as AnyObject).name === "webhook-dispatcher",
    ) as AnyObject;
    const objects = [
      ...renderOverlay("infra/overlays/example", {
        components: ["infra/components/keda"],
        patches: [
          {
            target: { kind: "Service", name: "api" },
            patch: JSON.stringify([{ op: "replace", path: "/spec/ports/0/targetPort", value: "web" }]),
          },
          {
            target: { kind: "PodDisruptionBudget", name: "vote-ingest" },
            patch: JSON.stringify([
              { op: "replace", path: "/spec/selector/matchLabels/app.kubernetes.io~1name", value: "ingest" },
            ]),
          },
        ],
      }),
      dispatcherHpa,
    ];
    const problems = driftProblems(objects, facts);
    expect(problems).toEqual(
      expect.arrayContaining([
        "Service/api: targetPort web is no port of Deployment/api",
        "PodDisruptionBudget/vote-ingest: selects no Deployment",
        "Deployment/webhook-dispatcher: 2 autoscalers fight over its replicas",
      ]),
    );
  });
});
